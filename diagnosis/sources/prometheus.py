"""The Prometheus source: every measure as one PromQL instant query at `at` over `window`.

Speaks the common Prometheus HTTP API (kvscope/prometheus.py), so Thanos, Mimir and
VictoriaMetrics work. Queries run concurrently; range functions keep each one to the window,
so the time to a verdict does not grow with how much history the server holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from diagnosis.measures import BASELINE, ENTITY_LABELS, Entity, Kind, Measure, Measurements, Value, readable
from diagnosis.sources import SourceError
from kvscope.durations import format_duration, parse_duration
from kvscope.prometheus import PrometheusClient, PrometheusError, QueryFailed, Vector
from kvscope.promql import ANY, Expr, Selector, either, histogram_mean, metric, quantile, vector

RECENT = 300.0  # "recent" = the last 5 minutes unless the caller says otherwise


def promql(measure: Measure, window: float, selector: Selector = ANY, recent: float = RECENT) -> str:
    """The query for a measure: alternatives (legacy names) joined with `or`.

    `recent` is the end part of the window compared with what came before it (prefix hit
    rate, throughput); the "before" part is the rest of the window, at least a minute.
    """
    by = (*ENTITY_LABELS[measure.entity], *measure.by)
    w, r = format_duration(window), format_duration(recent)
    before = format_duration(max(window - recent, 60.0))
    sel = selector & measure.matchers
    den_sel = selector & measure.denominator_matchers
    series = either(*(metric(s, sel) for s in measure.signals))

    match measure.kind:
        case Kind.GAUGE_MAX:
            expr = series.over_time("max", w).max(by)
        case Kind.GAUGE_AVG:
            expr = series.over_time("avg", w).avg(by)
        case Kind.GAUGE_MIN:
            expr = series.over_time("min", w).min(by)
        case Kind.GAUGE_LAST:
            expr = series.over_time("last", w).max(by)
        case Kind.DERIV:
            expr = series.deriv(w).sum(by)
        case Kind.RATE:
            expr = per_second(series, window).sum(by)
        case Kind.RATE_RECENT:
            expr = per_second(series, recent).sum(by)
        case Kind.COUNT_RATE:
            expr = per_second(either(*(metric(s, sel, "_count") for s in measure.signals)), window).sum(by)
        case Kind.INCREASE:
            expr = series.increase_from_zero(w).sum(by)  # a first XID appears at 1 and stays
        case Kind.RATIO | Kind.RATIO_RECENT | Kind.RATIO_BEFORE:
            span, shift = {Kind.RATIO: (w, None), Kind.RATIO_RECENT: (r, None), Kind.RATIO_BEFORE: (before, r)}[
                measure.kind
            ]
            numerator, denominator = series.range(span), either(*(metric(s, den_sel) for s in measure.denominator))
            denominator = denominator.range(span)
            if shift:
                numerator, denominator = numerator.offset(shift), denominator.offset(shift)
            expr = numerator.increase().sum(by) / denominator.increase().sum(by)
        case Kind.QUANTILE:
            expr = quantile(measure.quantile or 0.5, *measure.signals, window=w, by=by, selector=sel)
        case Kind.MEAN:
            expr = either(*(histogram_mean(s, w, by, sel) for s in measure.signals))
        case Kind.RESETS:
            expr = series.resets(w).sum(by)
        case Kind.CHANGED:
            appeared = series.unless(series.offset(w)).max(by) * 0 + 1
            changed = series.changes(w).clamp_max(1).max(by)
            expr = appeared.binop("or", changed)
        case _:
            raise ValueError(measure.kind)
    return str(expr)


def per_second(series: Expr, seconds: float) -> Expr:
    """A counter's rate over `seconds`, read the same from Prometheus and VictoriaMetrics.

    In Prometheus this is `rate()` exactly (its rate is the extrapolated increase divided by the
    range). MetricsQL's `rate()` divides by the time the samples span instead, so a series that
    stopped inside the window (a GPU fallen off the bus) reads its rate while alive; and where
    the range holds fewer than two samples (a scrape gap) it answers 0 where Prometheus has no
    value. Dividing `increase()` by the window and keeping only ranges with two samples gives
    both stores the same meaning: the average over the window, or nothing.
    """
    window = format_duration(seconds)
    two_samples = series.over_time("count", window).ge(2)
    return (series.increase(window) / parse_duration(window)).binop("and", two_samples)


class PrometheusSource:
    def __init__(
        self,
        client: PrometheusClient,
        selector: Selector = ANY,
        recent: float = RECENT,
        gpu_selector: Selector = ANY,
        engine_selector: Selector = ANY,
    ) -> None:
        self.client = client
        self.selector, self.recent = selector, recent
        self.entity_selector = {Entity.ENGINE: engine_selector, Entity.GPU: gpu_selector}

    @property
    def name(self) -> str:
        return self.client.name

    def query(self, expr: str, at: float) -> Vector:
        try:
            return self.client.query(expr, at)
        except QueryFailed:
            raise
        except PrometheusError as exc:
            raise SourceError(str(exc)) from exc

    def fetch(
        self, measures: Sequence[Measure], at: float, window: float, baseline: float | None = None
    ) -> Measurements:
        """Every measure over the window ending at `at`; the BASELINE measures also over the
        `baseline` seconds (default: the window's length) before the window."""
        return self.fetch_with_present(measures, at, window, baseline)[0]

    def fetch_with_present(
        self,
        measures: Sequence[Measure],
        at: float,
        window: float,
        baseline: float | None = None,
        present: tuple[Sequence[Measure], float] | None = None,
        only: Selector = ANY,
    ) -> tuple[Measurements, Measurements | None]:
        """`fetch`, and `present` (measures, span) over the end of the window alone, all in one
        pool of queries: the slowest query of one part does not hold the next part back. `only`
        narrows every query further (the second phase: the engines the screen did not clear)."""
        self.query(str(vector(1)), at)  # unreachable or refused: the whole source is unusable
        wanted = [m for m in measures if m.name in BASELINE]
        jobs = [(measures, at, window), (wanted, at - window, baseline or window)]
        if present is not None:
            jobs.append((present[0], at, present[1]))
        parts = self._fetch_many(jobs, only)
        out, past = parts[0], parts[1]
        out.baseline = past.values
        out.spans = (window, baseline or window)
        out.notes += [n for n in past.notes if n not in out.notes]
        out.sources.append({"source": self.name, "status": "ok", "detail": f"{len(out.values)} measures"})
        return out, parts[2] if present is not None else None

    def _fetch_many(
        self, jobs: Sequence[tuple[Sequence[Measure], float, float]], only: Selector = ANY
    ) -> list[Measurements]:
        """Each job's measures (measures, at, window), their queries run 8 at a time."""
        outs = [Measurements() for _ in jobs]

        def run(task: tuple[int, Measure, float, float]) -> tuple[int, Measure, str, Vector | str]:
            part, measure, at, window = task
            selector = self.selector & self.entity_selector[measure.entity] & only
            expr = promql(measure, window, selector, self.recent)
            try:
                return part, measure, expr, self.query(expr, at)
            except QueryFailed as exc:
                return part, measure, expr, str(exc)
            except SourceError as exc:  # one query too large or timed out: that measure is missing
                return part, measure, expr, str(exc)

        tasks = [(part, m, at, window) for part, (measures, at, window) in enumerate(jobs) for m in measures]
        with ThreadPoolExecutor(max_workers=8) as pool:
            for part, measure, expr, result in pool.map(run, tasks):
                out = outs[part]
                if isinstance(result, str):
                    out.errors[measure.name] = result
                    continue
                values, note = readable(measure, [Value(v, labels, expr) for labels, v in result])
                if note:
                    out.notes.append(note)
                if values:
                    out.values[measure.name] = values
        return outs

    def close(self) -> None:
        self.client.close()
