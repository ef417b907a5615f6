"""What a drill reads back from Prometheus: alerts as they fire, live gauges for the progress
display, and the series and totals for the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvscope import catalog as c
from kvscope.prometheus import PrometheusClient, PrometheusError
from kvscope.promql import metric, quantile

_IDENTITY = ("alertname", "severity")

KV_USAGE = metric(c.VLLM_KV_CACHE_USAGE).max()
WAITING = metric(c.VLLM_REQUESTS_WAITING).sum()
RUNNING = metric(c.VLLM_REQUESTS_RUNNING).sum()
PREEMPTIONS = metric(c.VLLM_NUM_PREEMPTIONS).sum()
ADMITTED = metric(c.GATEWAY_REQUESTS).sum()


def preemption_rate(window: str) -> str:
    return str(metric(c.VLLM_NUM_PREEMPTIONS).rate(window).sum())


def ttft_p99(window: str) -> str:
    return str(quantile(0.99, c.VLLM_TTFT, window=window))


def queue_p99(window: str) -> str:
    """p99 queue time over `window` (increase, not rate: the same quantile, fewer round-offs)."""
    buckets = metric(c.VLLM_QUEUE_TIME, suffix="_bucket").increase(window).sum(("le",))
    return str(buckets.fn("histogram_quantile", first=("0.99",)))


@dataclass
class Fired:
    alertname: str
    severity: str
    labels: dict[str, str]
    active_at: str  # when Prometheus first saw the condition (pending)
    firing_at: float  # wall-clock time the drill first saw it firing


@dataclass
class AlertLog:
    """Every alert instance seen firing, with the first time it was seen."""

    fired: dict[tuple[str, ...], Fired] = field(default_factory=dict)
    firing_now: list[str] = field(default_factory=list)

    def poll(self, api: PrometheusClient, now: float) -> list[Fired]:
        """Record what fires now; returns the alerts that fired for the first time."""
        new = []
        firing = []
        for alert in api.alerts():
            if alert.get("state") != "firing":
                continue
            labels = dict(alert.get("labels", {}))
            firing.append(labels.get("alertname", "?"))
            key = tuple(sorted(f"{k}={v}" for k, v in labels.items()))
            if key not in self.fired:
                rest = {k: v for k, v in labels.items() if k not in _IDENTITY}
                fired = Fired(
                    labels.get("alertname", "?"), labels.get("severity", ""), rest, alert.get("activeAt", ""), now
                )
                self.fired[key] = fired
                new.append(fired)
        self.firing_now = sorted(set(firing))
        return new

    def first_firing(self) -> dict[str, float]:
        """alertname -> the first time any instance of it fired."""
        out: dict[str, float] = {}
        for f in self.fired.values():
            out[f.alertname] = min(out.get(f.alertname, math.inf), f.firing_at)
        return out


def instant(api: PrometheusClient, expr: str, at: float | None = None) -> float | None:
    """The single value of `expr`, or None when it has none (or the query failed)."""
    return api.value(expr, at)


@dataclass
class Gauges:
    kv_usage: float | None = None
    waiting: float | None = None
    running: float | None = None
    preemptions: float | None = None


def gauges(api: PrometheusClient) -> Gauges:
    return Gauges(*(api.value(str(e)) for e in (KV_USAGE, WAITING, RUNNING, PREEMPTIONS)))


@dataclass
class Series:
    """Time series for the plots: seconds since the drill's start -> value."""

    kv_usage: list[tuple[float, float]] = field(default_factory=list)
    waiting: list[tuple[float, float]] = field(default_factory=list)
    preemptions_per_s: list[tuple[float, float]] = field(default_factory=list)
    ttft_p99: list[tuple[float, float]] = field(default_factory=list)


def series(api: PrometheusClient, start: float, end: float, step: float, window: str) -> Series:
    def one(expr: str) -> list[tuple[float, float]]:
        try:
            result = api.query_range(expr, start, end, step)
        except PrometheusError:
            return []
        if not result:
            return []
        return [(t - start, v) for t, v in result[0][1] if not math.isnan(v)]

    return Series(one(str(KV_USAGE)), one(str(WAITING)), one(preemption_rate(window)), one(ttft_p99(window)))


def preemptions_between(api: PrometheusClient, start: float, end: float) -> float:
    """Preemptions counted between two times (the counter's growth; 0 without data)."""
    before = api.value(str(PREEMPTIONS), start) or 0.0
    after = api.value(str(PREEMPTIONS), end) or 0.0
    return max(0.0, after - before)


def first_counted(api: PrometheusClient, start: float, end: float, step: float) -> float | None:
    """Seconds from `start` until Prometheus first holds a request admitted after it (the
    traffic's first requests through the gateway, its exporter's collection and the scrape);
    None when it never does by `end`."""
    try:
        result = api.query_range(str(ADMITTED), start, end, step)
    except PrometheusError:
        return None
    points = [(t, v) for t, v in (result[0][1] if result else []) if not math.isnan(v)]
    if not points:
        return None
    floor = points[0][1]
    return next((t - start for t, v in points if v > floor), None)
