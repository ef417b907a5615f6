"""Recording rules, mixin style: per-engine and per-GPU rollups at the rule interval.

The names are the catalog's (`ROLLUP_*`, `level:metric:operations`); the expressions are built
here with the one PromQL builder, on the signals' current and older names and with
kvscope.yaml's selectors, like the alerts beside them. Gauges roll up over the group's interval
(`max1m`: the peak between two evaluations is kept); rates and quantiles over five minutes. GPU
gauges drop DCGM's blank sentinels as the diagnosis and the alerts do: a minute holding a blank
reading records nothing rather than a number averaged with 2^47. Each rollup carries the
promtool case that shows its value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alerts import definitions as d
from kvscope import catalog as c
from kvscope.config import Config
from kvscope.promql import Expr, Selector, metric, quantile

GROUP = "kvscope-rollups"
EVAL = "10m"  # when a case reads its rollup: past the rate window, with its series still going
SCRAPE = "25s"  # the gauge cases' scrape interval (see _gauge)


@dataclass(frozen=True)
class Rollup:
    record: c.Signal
    expr: Expr
    series: dict[str, str]  # the case's input series (promtool notation)
    value: float | None  # the rollup at EVAL; None: nothing recorded
    labels: dict[str, str]
    interval: str = "1m"
    title: str = "the rollup's value"


def _gauge(
    record: c.Signal, signal: c.Signal, how: str, sel: Selector, gpu: bool, fx: d.Fixtures, labels: dict[str, str]
) -> list[Rollup]:
    """`how` (max or avg) over the rule interval, per engine or GPU. The case: a reading of 10
    with one of 40 in the minute before EVAL, scraped every 25 s so that no sample lies on the
    minute's edge (Prometheus 2 and 3 differ on whether the left one counts): 550 s, 575 s and
    600 s read 10, 40, 10, so the peak is 40 and the mean 20."""
    window, by = c.ROLLUP_INTERVAL, c.GPU_IDENTITY if gpu else c.ENGINE_IDENTITY
    series = metric(signal, sel)
    value = series.over_time(how, window)
    if gpu:  # a minute with a blank sentinel in it records nothing
        value = value.unless(series.over_time("max", window).ge(c.DCGM_BLANK_FROM))
    expr = value.aggregate(how, by)
    readings = [10.0] * 30  # to 725 s
    readings[23] = 40.0  # 575 s
    expected = {"max": 40.0, "avg": 20.0}[how]
    if signal.unit == "ratio":
        readings, expected = [r / 100 for r in readings], expected / 100
    name = fx.gpu(signal) if gpu else fx.engine(signal)
    out = [Rollup(record, expr, {name: _values(readings)}, expected, labels, SCRAPE)]
    if gpu:
        readings[22] = c.DCGM_BLANK_FROM  # 550 s
        out.append(
            Rollup(record, expr, {name: _values(readings)}, None, labels, SCRAPE, "a blank reading records nothing")
        )
    return out


def _values(readings: list[float]) -> str:
    return " ".join(f"{r:.0f}" if r >= c.DCGM_BLANK_FROM else f"{r:g}" for r in readings)


def _le(bound: float) -> str:
    return repr(float(bound))  # as prometheus_client writes a bucket bound


def _quantile(record: c.Signal, q: float, signals: tuple[c.Signal, ...], sel: Selector, fx: d.Fixtures) -> Rollup:
    """The q-quantile per engine over five minutes. The case: every observation in one bucket
    (lo, hi], where the quantile interpolates to lo + (hi - lo) * q."""
    expr = quantile(q, *signals, window=c.ROLLUP_RATE_WINDOW, by=c.ENGINE_IDENTITY, selector=sel)
    first = signals[0]
    lo, hi = first.buckets[1], first.buckets[2]
    series = {
        fx.engine(first, "_bucket", le=_le(lo)): d.const(0),
        fx.engine(first, "_bucket", le=_le(hi)): d.per_minute(1),
        fx.engine(first, "_bucket", le="+Inf"): d.per_minute(1),
    }
    return Rollup(record, expr, series, lo + (hi - lo) * q, fx.engine_labels)


def rollups(config: Config | None = None) -> list[Rollup]:
    """Every rollup with its case (one rule each; GPU gauges also have a blank-sentinel case)."""
    config = config or Config()
    fx = d.Fixtures(config)
    engine, gpu = config.engine_selector, config.gpu_selector
    engine_labels, gpu_labels = fx.engine_labels, fx.gpu_labels(*c.GPU_IDENTITY)
    out = [
        *_gauge(c.ROLLUP_KV_USAGE_MAX, c.VLLM_KV_CACHE_USAGE, "max", engine, False, fx, engine_labels),
        *_gauge(c.ROLLUP_WAITING_MAX, c.VLLM_REQUESTS_WAITING, "max", engine, False, fx, engine_labels),
        Rollup(
            c.ROLLUP_PREEMPTION_RATE,
            metric(c.VLLM_NUM_PREEMPTIONS, engine).rate(c.ROLLUP_RATE_WINDOW).sum(c.ENGINE_IDENTITY),
            {fx.engine(c.VLLM_NUM_PREEMPTIONS): d.per_minute(0.5)},
            0.5,
            engine_labels,
        ),
    ]
    queue = (c.VLLM_QUEUE_TIME, c.REQUEST_QUEUE_SECONDS)  # vLLM's own first, as the alert reads it
    for record, q, signals in (
        (c.ROLLUP_QUEUE_P50, 0.5, queue),
        (c.ROLLUP_QUEUE_P99, 0.99, queue),
        (c.ROLLUP_TTFT_P50, 0.5, (c.VLLM_TTFT,)),
        (c.ROLLUP_TTFT_P99, 0.99, (c.VLLM_TTFT,)),
        (c.ROLLUP_ITL_P50, 0.5, (c.VLLM_ITL,)),
        (c.ROLLUP_ITL_P99, 0.99, (c.VLLM_ITL,)),
    ):
        out.append(_quantile(record, q, signals, engine, fx))
    for record, signal, how in (
        (c.ROLLUP_GPU_UTIL_AVG, c.DCGM_GPU_UTIL, "avg"),
        (c.ROLLUP_SM_CLOCK_AVG, c.DCGM_SM_CLOCK, "avg"),
        (c.ROLLUP_GPU_TEMP_MAX, c.DCGM_GPU_TEMP, "max"),
        (c.ROLLUP_POWER_AVG, c.DCGM_POWER_USAGE, "avg"),
        (c.ROLLUP_FB_USED_MAX, c.DCGM_FB_USED, "max"),
    ):
        out += _gauge(record, signal, how, gpu, True, fx, gpu_labels)
    return out


def group(config: Config | None = None) -> dict[str, Any]:
    """The rule group: one recording rule per rollup, evaluated every ROLLUP_INTERVAL."""
    seen: dict[str, str] = {}
    for r in rollups(config):
        seen.setdefault(r.record.name, str(r.expr))
    return {
        "name": GROUP,
        "interval": c.ROLLUP_INTERVAL,
        "rules": [{"record": name, "expr": expr} for name, expr in seen.items()],
    }


def tests(config: Config | None = None) -> list[dict[str, Any]]:
    """promtool cases: each rollup's value at EVAL (or no sample, for a blank)."""
    out = []
    for r in rollups(config):
        samples = (
            []
            if r.value is None
            else [{"labels": str(metric(r.record.name, Selector.of(**r.labels))), "value": r.value}]
        )
        out.append(
            {
                "name": f"{r.record.name}: {r.title}",
                "interval": r.interval,
                "input_series": [{"series": k, "values": v} for k, v in r.series.items()],
                "promql_expr_test": [{"expr": r.record.name, "eval_time": EVAL, "exp_samples": samples}],
            }
        )
    return out
