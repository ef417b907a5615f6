"""The scrape source: live /metrics pages (vLLM, kvscope serve, kvscope export, dcgm-exporter),
snapshotted at the start and the end of `interval` and every `step` seconds in between, the
way a Prometheus scrape would: KV usage swings within a second on a busy engine, and two
samples alone can miss a full pool. Every sample gets `instance=<host:port>`.

Each measure is evaluated over the snapshots exactly as its PromQL (sources/prometheus.py) is
over the same samples in Prometheus: per series first (the `_over_time` functions, `rate`,
`increase` with counter resets, `deriv` as a least-squares slope, `changes`), then aggregated
by the entity's labels (`max by`, `sum by`, ...), then the alternatives (legacy names) joined
as `or` joins them. tests/integration/test_scrape_equals_prometheus.py proves it on real pages.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlparse

from diagnosis.measures import (
    ENTITY_LABELS,
    Entity,
    Kind,
    Measure,
    Measurements,
    Value,
    entity_key,
    readable,
)
from diagnosis.sources import SourceError
from kvscope import catalog, promtext
from kvscope.catalog import Signal
from kvscope.pages import DEFAULT_MAX_BYTES, Target, fetch_all
from kvscope.promql import ANY, Matcher, Selector

Snapshot = list[promtext.Sample]
Timed = tuple[float, Snapshot]  # (seconds, the samples of every page at that time)
SeriesKey = tuple[tuple[str, str], ...]
Group = tuple[SeriesKey, tuple[str, ...]]  # (entity labels, values of the measure's `by` labels)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]) or buckets[-1][1] <= 0:
        return math.nan
    # Prometheus makes the counts monotonic before interpolating
    counts, highest = [], 0.0
    for _, count in buckets:
        highest = max(highest, count)
        counts.append(highest)
    rank = q * counts[-1]
    b = next((i for i in range(len(buckets) - 1) if counts[i] >= rank), len(buckets) - 1)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], counts[b]
    if b > 0:
        start = buckets[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count)


@dataclass
class ScrapeSource:
    urls: Sequence[str]
    interval: float = 10.0
    step: float = 1.0  # gauges are also sampled this often within the interval
    timeout: float = 10.0  # each page, total
    max_bytes: int = DEFAULT_MAX_BYTES
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    selectors: Mapping[Entity, Selector] = field(default_factory=dict)  # per entity, as --prometheus
    status: dict[str, tuple[str, str]] = field(default_factory=dict)  # url -> (status, detail)

    @property
    def name(self) -> str:
        return " ".join(self.urls)

    def snapshot(self) -> Snapshot:
        """One page from every URL (kvscope/pages.py: a deadline and a byte cap each). A page
        that cannot be fetched or read costs only its own series (its status says why); when no
        page gives a sample, the source is unusable."""
        samples: Snapshot = []
        targets = [Target.of(url) for url in self.urls]
        errors = []
        for target, fetched in zip(targets, fetch_all(targets, self.timeout, self.max_bytes), strict=True):
            if fetched.body is None:
                self.status[target.url] = ("unreachable", f"cannot scrape {target.url}: {fetched.error}")
                errors.append(self.status[target.url][1])
                continue
            page, bad = promtext.parse_lenient(fetched.body.decode("utf-8", "replace"))
            if not page:
                why = f"{target.url} did not serve a Prometheus page" + (f" ({bad} unreadable lines)" if bad else "")
                self.status[target.url] = ("unparseable", why)
                errors.append(why)
                continue
            unknown = _unknown_dcgm(page)
            if bad:
                self.status[target.url] = ("partial", f"{bad} unreadable line(s) skipped, {len(page)} samples read")
            elif unknown:
                self.status[target.url] = ("partial", unknown)
            else:
                self.status.setdefault(target.url, ("ok", f"{len(page)} samples"))
            instance = urlparse(target.url).netloc
            samples += [promtext.Sample(s.name, {"instance": instance, **s.labels}, s.value) for s in page]
        if not samples:
            raise SourceError("; ".join(errors) or "no page served a sample")
        return samples

    def fetch(self, measures: Sequence[Measure]) -> Measurements:
        started = self.clock()
        snapshots: list[Timed] = [(0.0, self.snapshot())]
        while self.step > 0 and self.interval - (self.clock() - started) > self.step:
            self.sleep(self.step)
            snapshots.append((self.clock() - started, self.snapshot()))
        self.sleep(max(self.interval - (self.clock() - started), 0.0))
        snapshots.append((max(self.clock() - started, 1e-3), self.snapshot()))
        elapsed = snapshots[-1][0]
        out = compute(measures, snapshots, f"scrape {self.name} over {elapsed:.0f}s", self.selectors)
        out.sources = [
            {"source": url, "status": status, "detail": detail} for url, (status, detail) in self.status.items()
        ]
        return out


def compute(
    measures: Sequence[Measure],
    snapshots: Sequence[Timed],
    how: str,
    selectors: Mapping[Entity, Selector] | None = None,
) -> Measurements:
    """Every measure over time-stamped snapshots (the first and last bound the window), on the
    series the entity's selector (the user's --selector and kvscope.yaml's) matches."""
    out = Measurements()
    for measure in measures:
        found = _measure(measure, snapshots, how, (selectors or {}).get(measure.entity, ANY))
        values, note = readable(measure, found)
        if note:
            out.notes.append(note)
        if values:
            out.values[measure.name] = values
    return out


def _unknown_dcgm(page: Sequence[promtext.Sample]) -> str:
    """A note when a page's DCGM_* families are all ones the catalog does not know (another
    release's names): its GPUs cannot be read, and that is said, not taken for idle GPUs."""
    dcgm = {s.name for s in page if s.name.startswith("DCGM_")}
    if not dcgm or dcgm & _CATALOGUED:
        return ""
    shown = ", ".join(sorted(dcgm)[:3]) + (", ..." if len(dcgm) > 3 else "")
    return f"none of its {len(dcgm)} DCGM_* families is one kvscope knows ({shown}): its GPUs are not read"


_CATALOGUED = frozenset(n for sig in catalog.all_signals() for n in sig.every_name)


# --- series over time ----------------------------------------------------------------------


def _matches(labels: dict[str, str], matchers: Sequence[Matcher]) -> bool:
    """Prometheus' matching: a missing label is the empty string; regexes are anchored."""
    for m in matchers:
        value = labels.get(m.name, "")
        hit = value == m.value if m.op in ("=", "!=") else re.fullmatch(m.value, value) is not None
        if hit == (m.op in ("!=", "!~")):
            return False
    return True


def _series(
    snapshots: Sequence[Timed], name: str, matchers: Sequence[Matcher], factor: float = 1.0
) -> dict[SeriesKey, list[tuple[float, float]]]:
    """name's samples per series (labels without the name), in time order, times `factor` (a
    name in another unit, read in the measure's)."""
    out: dict[SeriesKey, list[tuple[float, float]]] = defaultdict(list)
    for at, samples in snapshots:
        for s in samples:
            if s.name == name and _matches(dict(s.labels), matchers):
                out[tuple(sorted(s.labels.items()))].append((at, s.value * factor))
    return out


def _increase(points: list[tuple[float, float]]) -> float:
    """Counter growth over the points, a reset (a drop) counting as a restart from zero."""
    total = 0.0
    for (_, a), (_, b) in itertools.pairwise(points):
        total += b - a if b >= a else b
    return total


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope per second, as Prometheus' deriv()."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var


def _changes(points: list[tuple[float, float]]) -> float:
    return float(sum(1 for (_, a), (_, b) in itertools.pairwise(points) if a != b))


def _group(measure: Measure, key: SeriesKey) -> Group:
    labels = dict(key)
    return entity_key(labels, measure.entity), tuple(labels.get(b, "") for b in measure.by)


def _labels(measure: Measure, group: Group) -> dict[str, str]:
    entity, by = group
    return {**dict(entity), **{b: v for b, v in zip(measure.by, by, strict=True) if v}}


def _per_series(
    measure: Measure,
    name: str,
    snapshots: Sequence[Timed],
    matchers: Sequence[Matcher],
    born_from_zero: bool = False,
    factor: float = 1.0,
) -> dict[Group, list[float]]:
    """One number per series (the range function of the measure's kind), grouped by entity.

    `born_from_zero`: a counter that first appears inside the window counts from zero, as the
    PromQL of an INCREASE measure does (`(x unless x offset w) or increase(x[w])`); plain
    `increase()` (ratios, histograms) counts only the growth between its own samples.
    """
    span = snapshots[-1][0] - snapshots[0][0]
    out: dict[Group, list[float]] = defaultdict(list)
    for key, points in _series(snapshots, name, matchers, factor).items():
        kind, values = measure.kind, [v for _, v in points]
        number: float | None
        if kind is Kind.GAUGE_MAX:
            number = max(values)
        elif kind is Kind.GAUGE_MIN:
            number = min(values)
        elif kind is Kind.GAUGE_AVG:
            number = sum(values) / len(values)
        elif kind is Kind.GAUGE_LAST:
            number = values[-1]
        elif kind is Kind.DERIV:
            number = _slope(points)
        elif kind in (Kind.RATE, Kind.RATE_RECENT):
            number = _increase(points) / span if len(points) >= 2 and span > 0 else None
        elif kind in (Kind.INCREASE, Kind.RATIO, Kind.RATIO_RECENT):
            born = points[0][0] > snapshots[0][0]
            grown = _increase(points) if len(points) >= 2 else None
            number = values[-1] if born and born_from_zero else grown
        elif kind is Kind.CHANGED:
            number = 1.0 if points[0][0] > snapshots[0][0] else min(1.0, _changes(points))
        elif kind is Kind.RESETS:
            number = float(sum(1 for (_, a), (_, b) in itertools.pairwise(points) if b < a))
        else:
            raise ValueError(kind)
        if number is not None and math.isfinite(number):
            out[_group(measure, key)].append(number)
    return out


_AGGREGATE: dict[Kind, Callable[[list[float]], float]] = {
    Kind.GAUGE_MAX: max,
    Kind.GAUGE_MIN: min,
    Kind.GAUGE_AVG: lambda v: sum(v) / len(v),
    Kind.GAUGE_LAST: max,
    Kind.DERIV: sum,
    Kind.RATE: sum,
    Kind.RATE_RECENT: sum,
    Kind.INCREASE: sum,
    Kind.CHANGED: max,
    Kind.RESETS: sum,
}


def _names(signals: Sequence[Signal]) -> list[str]:
    """Every name to try, in the PromQL's order: each signal's same-unit names, then its rescaled ones."""
    return [n for s in signals for n in s.every_name]


def _factor(signals: Sequence[Signal], name: str) -> float:
    return next((k for s in signals if (k := s.scale_of(name)) is not None), 1.0)


def _alternative(measure: Measure, index: int, snapshots: Sequence[Timed], selector: Selector) -> dict[Group, float]:
    """The measure's value per entity under its `index`-th metric name."""
    matchers = (selector & measure.matchers).matchers
    names = _names(measure.signals)
    name = names[index]
    kind = measure.kind
    if kind in _AGGREGATE:
        factor = _factor(measure.signals, name)
        series = _per_series(measure, name, snapshots, matchers, born_from_zero=kind is Kind.INCREASE, factor=factor)
        return {g: _AGGREGATE[kind](v) for g, v in series.items()}
    if kind in (Kind.RATIO, Kind.RATIO_RECENT):
        dens = _names(measure.denominator)
        den_matchers = (selector & measure.denominator_matchers).matchers
        numerator = _per_series(measure, name, snapshots, matchers)
        denominator = _per_series(measure, dens[min(index, len(dens) - 1)], snapshots, den_matchers)
        # A / B keeps only the entities both sides have, as PromQL's one-to-one matching does
        return {g: sum(numerator[g]) / sum(d) for g, d in denominator.items() if g in numerator and sum(d) > 0}
    if kind is Kind.COUNT_RATE:
        counts = _per_series(_as(measure, Kind.RATE), name + "_count", snapshots, matchers)
        return {g: sum(v) for g, v in counts.items()}
    if kind is Kind.MEAN:
        sums = _per_series(_as(measure, Kind.INCREASE), name + "_sum", snapshots, matchers)
        counts = _per_series(_as(measure, Kind.INCREASE), name + "_count", snapshots, matchers)
        return {g: sum(sums[g]) / sum(c) for g, c in counts.items() if g in sums and sum(c) > 0}
    if kind is Kind.QUANTILE:
        # sum by (le, entity) of each bucket's growth, then Prometheus' interpolation
        by_le: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        rated = _as(measure, Kind.INCREASE, by=(*measure.by, "le"))
        for (entity, by), values in _per_series(rated, name + "_bucket", snapshots, matchers).items():
            by_le[(entity, by[:-1])][float(by[-1])] += sum(values)
        out = {}
        for group, buckets in by_le.items():
            q = histogram_quantile(measure.quantile or 0.5, list(buckets.items()))
            if not math.isnan(q):
                out[group] = q
        return out
    return {}  # RATIO_BEFORE needs history a scrape does not have


def _as(measure: Measure, kind: Kind, by: tuple[str, ...] | None = None) -> Measure:
    from dataclasses import replace

    return replace(measure, kind=kind, by=measure.by if by is None else by)


def _measure(measure: Measure, snapshots: Sequence[Timed], how: str, selector: Selector) -> list[Value]:
    if len(snapshots) < 2:
        return []
    found: dict[Group, tuple[float, str]] = {}
    for index, name in enumerate(_names(measure.signals)):
        for group, number in _alternative(measure, index, snapshots, selector).items():
            found.setdefault(group, (number, f"{how}: {name}"))  # `A or B`: A wins where both exist
    return [Value(number, _labels(measure, group), query) for group, (number, query) in found.items()]


__all__ = ["ENTITY_LABELS", "ScrapeSource", "compute", "histogram_quantile"]
