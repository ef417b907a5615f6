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


def parse_lenient(text: str) -> tuple[list[Sample], int]:
    """Every sample that can be read, and how many lines could not: a page with redacted or
    broken lines (as pastes and half-written pages are) costs only those lines. A whole page
    that parses is read in one pass; otherwise each family block, then each of its lines."""
    try:
        return parse(text), 0
    except Exception:  # the parser raises assorted errors on junk
        pass
    samples: list[Sample] = []
    bad = 0
    for block in _blocks(text):
        try:
            samples += parse("\n".join(block) + "\n")
            continue
        except Exception:
            pass
        header = [line for line in block if line.startswith("#")]
        for line in block:
            if line.startswith("#") or not line.strip():
                continue
            try:
                samples += parse("\n".join([*header, line]) + "\n")
            except Exception:
                bad += 1
    return samples, bad


def _blocks(text: str) -> list[list[str]]:
    """The page split where a new family's comments begin or the sample name changes."""
    blocks: list[list[str]] = []
    current: list[str] = []
    last_name = ""
    for line in text.splitlines():
        if line.startswith("#"):
            if current and not current[-1].startswith("#"):
                blocks.append(current)
                current = []
            current.append(line)
            continue
        match = _SAMPLE_NAME.match(line)
        name = match.group(1) if match else ""
        base = re.sub(r"_(bucket|sum|count|total|created)$", "", name)
        if current and not current[-1].startswith("#") and base != last_name:
            blocks.append(current)
            current = []
        current.append(line)
        last_name = base
    if current:
        blocks.append(current)
    return blocks


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples named `name` whose labels include `labels`."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """Sum of the matching samples (0 when none)."""
    return sum(s.value for s in select(samples, name, **labels))
