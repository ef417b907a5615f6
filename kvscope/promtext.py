"""Reading Prometheus text pages (vLLM, kvscope, dcgm-exporter) with prometheus_client's parser.

One correction: the parser renames the samples of a counter declared without `_total`
(dcgm-exporter's DCGM_FI_DEV_* counters) to `<name>_total`. Prometheus keeps the name as
written, and so do users' queries, so the renaming is undone here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

_COUNTER_TYPE = re.compile(r"^# TYPE (\S+) counter\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


_SAMPLE_NAME = re.compile(r"^([^#\s{][^\s{]*)", re.MULTILINE)


def bare_counters(text: str) -> set[str]:
    """Counters whose samples carry no `_total` suffix on the page (one pass: linear in its size)."""
    counters = {name for name in _COUNTER_TYPE.findall(text) if not name.endswith("_total")}
    if not counters:
        return set()
    return counters & set(_SAMPLE_NAME.findall(text))


def parse_families(text: str) -> list[Metric]:
    """Every family of a page, sample names as written. Raises on a malformed page."""
    bare = bare_counters(text)
    families = list(text_string_to_metric_families(text))
    for family in families:
        if family.type == "counter" and family.name in bare:
            family.samples = [
                s._replace(name=family.name) if s.name == family.name + "_total" else s for s in family.samples
            ]
    return families


def parse(text: str) -> list[Sample]:
    """Every sample of a page. Raises ValueError (or a subclass) on a malformed page."""
    return [Sample(s.name, dict(s.labels), float(s.value)) for family in parse_families(text) for s in family.samples]


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples named `name` whose labels include `labels`."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """Sum of the matching samples (0 when none)."""
    return sum(s.value for s in select(samples, name, **labels))
