"""The scrape source: live /metrics pages (vLLM, kvscope serve, kvscope export, dcgm-exporter),
fetched at the start and the end of `interval`, so counters give rates and histograms give
quantiles over the interval, and every `step` seconds in between, so gauges (KV usage, waiting
requests) are sampled the way a Prometheus scrape would: KV usage swings within a second on a
busy engine, and two samples alone can miss a full pool. Every sample gets
`instance=<host:port>` as Prometheus would add.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx

from diagnosis.measures import ENTITY_LABELS, Kind, Measure, Measurements, Value, entity_key
from diagnosis.sources import SourceError
from kvscope import promtext

Snapshot = list[promtext.Sample]


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return buckets[-1][0]


@dataclass
class ScrapeSource:
    urls: Sequence[str]
    interval: float = 10.0
    step: float = 1.0  # gauges are also sampled this often within the interval
    timeout: float = 10.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    @property
    def name(self) -> str:
        return " ".join(self.urls)

    def snapshot(self, client: httpx.Client) -> Snapshot:
        samples: Snapshot = []
        for url in self.urls:
            try:
                response = client.get(url, timeout=self.timeout)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                raise SourceError(f"cannot scrape {url}: {exc}") from exc
            try:
                page = promtext.parse(response.text)
            except Exception as exc:  # the parser raises assorted errors on junk
                raise SourceError(f"{url} did not serve a Prometheus page: {exc}") from exc
            instance = urlparse(url).netloc
            samples += [promtext.Sample(s.name, {"instance": instance, **s.labels}, s.value) for s in page]
        return samples

    def fetch(self, measures: Sequence[Measure]) -> Measurements:
        with httpx.Client() as client:
            first = self.snapshot(client)
            started = self.clock()
            between: list[Snapshot] = []
            while self.step > 0 and self.interval - (self.clock() - started) > self.step:
                self.sleep(self.step)
                between.append(self.snapshot(client))
            self.sleep(max(self.interval - (self.clock() - started), 0.0))
            second = self.snapshot(client)
            elapsed = max(self.clock() - started, 1e-3)
        return compute(measures, first, second, elapsed, f"scrape {self.name} over {elapsed:.0f}s", between=between)


def _grouped(samples: Snapshot, name: str, measure: Measure, matcher: str = "") -> dict[tuple, list[promtext.Sample]]:
    wanted = _matchers(matcher)
    out: dict[tuple, list[promtext.Sample]] = defaultdict(list)
    for s in samples:
        if s.name == name and all(_match(s.labels.get(k, ""), op, v) for k, op, v in wanted):
            key = (
                entity_key(dict(s.labels), measure.entity),
                tuple(s.labels.get(b, "") for b in measure.by),
            )
            out[key].append(s)
    return out


def _matchers(text: str) -> list[tuple[str, str, str]]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        for op in ("=~", "!=", "="):
            if op in part:
                k, v = part.split(op, 1)
                out.append((k.strip(), op, v.strip().strip('"')))
                break
    return out


def _match(value: str, op: str, pattern: str) -> bool:
    import re

    if op == "=":
        return value == pattern
    if op == "!=":
        return value != pattern
    return re.fullmatch(pattern, value) is not None


def _labels(key: tuple, measure: Measure) -> dict[str, str]:
    entity, by = key
    return {**dict(entity), **{b: v for b, v in zip(measure.by, by, strict=True) if v}}


def compute(
    measures: Sequence[Measure],
    first: Snapshot,
    second: Snapshot,
    dt: float,
    how: str,
    between: Sequence[Snapshot] = (),
) -> Measurements:
    """Every measure from two snapshots `dt` seconds apart; gauges also from those `between`."""
    out = Measurements()
    for measure in measures:
        values: list[Value] = []
        for index, name in enumerate(measure.names):
            values = _one(measure, name, index, first, second, dt, how, between)
            if values:
                break
        if values:
            out.values[measure.name] = values
    return out


def _one(
    m: Measure,
    name: str,
    index: int,
    first: Snapshot,
    second: Snapshot,
    dt: float,
    how: str,
    between: Sequence[Snapshot] = (),
) -> list[Value]:
    query = f"{how}: {name}"
    now, before = _grouped(second, name, m, m.matchers), _grouped(first, name, m, m.matchers)
    values: list[Value] = []
    if m.kind in (Kind.GAUGE_MAX, Kind.GAUGE_AVG, Kind.GAUGE_MIN, Kind.GAUGE_LAST):
        middle = [_grouped(snap, name, m, m.matchers) for snap in between]
        for key, samples in now.items():
            seen = [sum(s.value for s in group[key]) for group in (before, *middle) if key in group]
            seen.append(sum(s.value for s in samples))
            v = {
                Kind.GAUGE_MAX: max(seen),
                Kind.GAUGE_MIN: min(seen),
                Kind.GAUGE_LAST: seen[-1],
                Kind.GAUGE_AVG: sum(seen) / len(seen),
            }[m.kind]
            values.append(Value(v, _labels(key, m), query))
    elif m.kind is Kind.DERIV:
        for key, samples in now.items():
            if key in before:
                values.append(
                    Value(
                        (sum(s.value for s in samples) - sum(s.value for s in before[key])) / dt,
                        _labels(key, m),
                        query,
                    )
                )
    elif m.kind in (Kind.RATE, Kind.RATE_RECENT, Kind.INCREASE):
        for key, samples in now.items():
            delta = sum(s.value for s in samples) - sum(s.value for s in before.get(key, []))
            delta = max(delta, 0.0)
            values.append(Value(delta if m.kind is Kind.INCREASE else delta / dt, _labels(key, m), query))
    elif m.kind in (Kind.RATIO, Kind.RATIO_RECENT):
        dens = [n for s in m.denominator for n in s.names]
        den = dens[index] if index < len(dens) else dens[0]
        den_now = _grouped(second, den, m, m.denominator_matchers)
        den_before = _grouped(first, den, m, m.denominator_matchers)
        for key in now.keys() | den_now.keys():
            numerator = sum(s.value for s in now.get(key, [])) - sum(s.value for s in before.get(key, []))
            denominator = sum(s.value for s in den_now.get(key, [])) - sum(s.value for s in den_before.get(key, []))
            if denominator > 0:
                values.append(Value(max(numerator, 0.0) / denominator, _labels(key, m), query))
    elif m.kind in (Kind.QUANTILE, Kind.MEAN):
        values = _histogram(m, name, first, second, query)
    elif m.kind is Kind.CHANGED:
        for key, samples in now.items():
            changed = key not in before or {s.value for s in samples} != {s.value for s in before[key]}
            values.append(Value(1.0 if changed else 0.0, _labels(key, m), query))
    # RATIO_BEFORE needs history a scrape does not have: left out
    return values


def _histogram(m: Measure, name: str, first: Snapshot, second: Snapshot, query: str) -> list[Value]:
    values = []
    if m.kind is Kind.MEAN:
        sums_now, sums_before = (
            _grouped(second, name + "_sum", m),
            _grouped(first, name + "_sum", m),
        )
        counts_now, counts_before = (
            _grouped(second, name + "_count", m),
            _grouped(first, name + "_count", m),
        )
        for key, counts in counts_now.items():
            count = sum(s.value for s in counts) - sum(s.value for s in counts_before.get(key, []))
            total = sum(s.value for s in sums_now.get(key, [])) - sum(s.value for s in sums_before.get(key, []))
            if count > 0:
                values.append(Value(total / count, _labels(key, m), query))
        return values
    buckets_now, buckets_before = (
        _grouped(second, name + "_bucket", m),
        _grouped(first, name + "_bucket", m),
    )
    for key, samples in buckets_now.items():
        by_le: dict[float, float] = defaultdict(float)
        for s in samples:
            by_le[float(s.labels["le"])] += s.value
        for s in buckets_before.get(key, []):
            by_le[float(s.labels["le"])] -= s.value
        q = histogram_quantile(m.quantile or 0.5, list(by_le.items()))
        if not math.isnan(q):
            values.append(Value(q, _labels(key, m), query))
    return values


__all__ = ["ENTITY_LABELS", "ScrapeSource", "compute", "histogram_quantile"]
