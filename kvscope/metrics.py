"""prometheus_client objects built from catalog entries, so names, help and labels come from
one place."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvscope.catalog import Kind, Signal


def _labels(signal: Signal, labels: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(signal.labels if labels is None else labels)


def counter(signal: Signal, registry: CollectorRegistry, labels: Sequence[str] | None = None) -> Counter:
    """A Counter for a counter `signal`, registered in `registry`."""
    if signal.kind is not Kind.COUNTER:
        raise TypeError(f"{signal.name} is a {signal.kind}, not a counter")
    return Counter(signal.family, signal.help, _labels(signal, labels), registry=registry)


def gauge(signal: Signal, registry: CollectorRegistry, labels: Sequence[str] | None = None) -> Gauge:
    """A Gauge for a gauge or info `signal` (info series are value-1 gauges with labels)."""
    if signal.kind not in (Kind.GAUGE, Kind.INFO):
        raise TypeError(f"{signal.name} is a {signal.kind}, not a gauge")
    return Gauge(signal.family, signal.help, _labels(signal, labels), registry=registry)


def histogram(signal: Signal, registry: CollectorRegistry, labels: Sequence[str] | None = None) -> Histogram:
    """A Histogram with the catalog's buckets for a histogram `signal`."""
    if signal.kind is not Kind.HISTOGRAM:
        raise TypeError(f"{signal.name} is a {signal.kind}, not a histogram")
    return Histogram(
        signal.family,
        signal.help,
        _labels(signal, labels),
        registry=registry,
        buckets=signal.buckets,
    )
