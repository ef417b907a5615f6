"""Metric families for the exporter's collectors, and the text format they are served in.

prometheus_client's own writer appends `_total` to every counter's TYPE line, but
dcgm-exporter serves counters such as the PCIe replay counter without it, and users'
dashboards and rules depend on those exact names. So families are built from catalog
entries with the sample names the catalog gives, and rendered here, name for name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from prometheus_client.core import Metric

from kvscope.catalog import Kind, Signal

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TYPES = {
    Kind.COUNTER: "counter",
    Kind.GAUGE: "gauge",
    Kind.INFO: "gauge",
    Kind.HISTOGRAM: "histogram",
}


class Series:
    """One family under its catalog name; `add(label values, value)` appends a sample."""

    def __init__(self, signal: Signal, labelnames: Sequence[str] | None = None) -> None:
        self.labelnames = tuple(signal.labels if labelnames is None else labelnames)
        self.sample_name = signal.name
        self.metric = Metric(signal.family, signal.help, _TYPES[signal.kind])

    def add(self, values: Sequence[object], value: float | None) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return  # not available here: the series is absent, never invented
        labels = {k: str(v) for k, v in zip(self.labelnames, values, strict=True)}
        self.metric.add_sample(self.sample_name, labels, float(value))

    def __bool__(self) -> bool:
        return bool(self.metric.samples)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


_SPECIAL_VALUES = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}


def _value(v: float) -> str:
    text = repr(float(v))
    return _SPECIAL_VALUES.get(text, text)


def _head_name(metric: Metric, samples: Sequence) -> str:
    """The name for HELP/TYPE: counters whose samples end in _total are announced so."""
    if metric.type == "counter" and all(s.name == metric.name + "_total" for s in samples):
        return metric.name + "_total"
    return metric.name


def render(families: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4. Families of the same name are merged into one block
    (several targets, or several collectors, may yield the same family); inputs are not
    modified, so cached families can be rendered again."""
    merged: dict[str, tuple[Metric, list]] = {}
    for family in families:
        if not family.samples:
            continue
        if family.name in merged:
            merged[family.name][1].extend(family.samples)
        else:
            merged[family.name] = (family, list(family.samples))
    lines: list[str] = []
    pairs: dict[tuple[str, str], str] = {}  # `name="value"`, escaped: label pairs repeat on every series
    for metric, samples in merged.values():
        head = _head_name(metric, samples)
        mtype = "untyped" if metric.type == "unknown" else metric.type
        lines.append(f"# HELP {head} {_escape_help(metric.documentation)}")
        lines.append(f"# TYPE {head} {mtype}")
        for s in samples:
            if s.labels:
                rendered = []
                for pair in s.labels.items():
                    text = pairs.get(pair)
                    if text is None:
                        text = pairs[pair] = f'{pair[0]}="{_escape_label(pair[1])}"'
                    rendered.append(text)
                lines.append(f"{s.name}{{{','.join(rendered)}}} {_value(s.value)}")
            else:
                lines.append(f"{s.name} {_value(s.value)}")
    lines.append("")
    return "\n".join(lines).encode()
