"""Reading Prometheus text pages (vLLM, kvscope, dcgm-exporter) with prometheus_client's parser."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """Every sample of a page. Raises ValueError (or a subclass) on a malformed page."""
    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples named `name` whose labels include `labels`."""
    return [
        s
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """Sum of the matching samples (0 when none)."""
    return sum(s.value for s in select(samples, name, **labels))
