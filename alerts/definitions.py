"""The alert rules, as data: expressions built with the one PromQL builder from catalog names,
limits from the effective thresholds (kvscope.yaml), so the alert, the dashboard's red line and
the diagnosis move together.

Conventions (monitoring-mixins): CamelCase names prefixed by component, a `severity` label,
a static `summary`, a templated `description` that ends with the `kvscope diagnose` command to
run, and a `runbook_url` into docs/runbooks.md. Every alert carries promtool cases derived
from its threshold: one where it fires (and, with `for:`, not before), one just below its
threshold where it stays silent. The seeds' set (seed 002 section 6: GPUMemoryFull, GPUUtilLow,
GPUXIDError, VLLMQueueBacklog, TTFTHigh) is here under kvscope's names, with the seed's numbers.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.config import Config
from kvscope.durations import parse_duration
from kvscope.promql import Expr, Matcher, Selector, le, metric, quantile, regex_any
from kvscope.thresholds import Threshold
from kvscope.xid_catalog import CATALOG, Bucket, codes

ENGINE = ("namespace", "pod", "instance", "target", "model_name")
# both host spellings (dcgm-exporter renamed Hostname to hostname): grouping by an absent label
# is a no-op, so one rule serves old and new exporters
GPU_BY = ("instance", *c.DCGM_HOST_LABELS, "gpu")
# the node in a description: whichever host label is set, else the scrape target (kvscope's own
# GPU series carry no host label)
HOST = "{{ or " + " ".join(f"$labels.{label}" for label in (*c.DCGM_HOST_LABELS, "instance")) + " }}"
# what slows requests down: the incidents a latency or queue alert can be a symptom of
LATENCY = (
    "engine_stall",
    "kv_transfer_failure",
    "spec_decode_inefficient",
    "kv_cache_exhaustion",
    "prefill_head_of_line",
    "capacity_saturation",
    "load_imbalance",
    "prefix_cache_miss",
    "gpu_hardware_fault",
    "gpu_memory_pressure",
    "thermal_power_throttling",
    "pcie_bottleneck",
    "decode_bandwidth_bound",
    "gateway_overhead",
)
# This repository's home, and its docs/runbooks.md as of the release that generated the rules: a
# runbook_url opens the section written with that very rule (main may have moved on). A fork or a
# mirror sets kvscope.yaml's deploy.runbook_base (or --runbook-base).
REPOSITORY = "https://github.com/kvscope/kvscope"
try:
    VERSION = importlib.metadata.version("kvscope")
except importlib.metadata.PackageNotFoundError:  # run from a bare source tree
    VERSION = "0.0.0"
RUNBOOK_BASE = f"{REPOSITORY}/blob/v{VERSION}/docs/runbooks.md"

# The test fixtures: one engine and one GPU, labelled as real exporters label them.
E_LABELS = {"namespace": "prod", "pod": "vllm-0", "instance": "10.0.0.1:8000", "model_name": "m"}
G_LABELS = {"instance": "node-1:9400", c.DCGM_HOST_LABELS[0]: "node-1", "gpu": "3", "UUID": "GPU-3"}


@dataclass(frozen=True)
class Case:
    """A promtool test: input series (selector -> values), when the alert is checked, what it holds."""

    series: dict[str, str]
    at: str
    labels: dict[str, str] = field(default_factory=dict)  # labels the alert carries beyond name/severity
    value: float | None = None  # the alert's $value at `at` (None: the case expects no alert)
    interval: str = "1m"  # promtool's step between input samples
    lead: int = 0  # minutes by which the condition holds (rate windows fill, a drop begins)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str
    summary: str
    description: str  # Go template: {{ $labels.x }}, {{ $value | printf "%.3g" }}, ...
    fires: Case
    silent: Case
    for_: str = "0m"
    diagnose_scope: str = "namespace"  # label the diagnose command narrows to ("" = none)
    group: str = "kvscope-engine"
    more: tuple[Case, ...] = ()  # further cases: fire (value set) or stay silent (value None)
    # the diagnosis incidents that account for the alert (annotation `explained_by`, read
    # back by `kvscope diagnose` from Prometheus' rules API); () = about the monitoring itself
    explained_by: tuple[str, ...] = ()

    @property
    def anchor(self) -> str:
        return self.name.lower()

    @property
    def cases(self) -> tuple[Case, ...]:
        return (self.fires, *self.more, self.silent)


class Fixtures:
    """Series names for the cases, labelled as the user's selectors require."""

    def __init__(self, config: Config) -> None:
        self.engine_selector, self.gpu_selector = config.engine_selector, config.gpu_selector
        self.engine_extra = _required_labels(self.engine_selector)
        self.gpu_extra = _required_labels(self.gpu_selector)

    def engine(self, signal: c.Signal, suffix: str = "", **extra: str) -> str:
        return _series(signal, {**E_LABELS, **self.engine_extra, **extra}, suffix)

    def gpu(self, signal: c.Signal, suffix: str = "", **extra: str) -> str:
        return _series(signal, {**G_LABELS, **self.gpu_extra, **extra}, suffix)

    @property
    def engine_labels(self) -> dict[str, str]:
        """What an engine alert (grouped by the engine's labels) carries."""
        return {k: v for k, v in {**E_LABELS, **self.engine_extra}.items() if k in ENGINE}

    def gpu_labels(self, *keep: str) -> dict[str, str]:
        """What an alert that keeps every label of the GPU's series carries (or only `keep`)."""
        labels = {**G_LABELS, **self.gpu_extra}
        return {k: v for k, v in labels.items() if not keep or k in keep}


def _series(signal: c.Signal, labels: Mapping[str, str], suffix: str = "") -> str:
    return str(metric(signal.name, Selector.of(**labels), suffix))  # the current name only


def _required_labels(selector: Selector) -> dict[str, str]:
    """Label values that satisfy a selector's positive matchers (for the test series)."""
    out = {}
    for m in selector.matchers:
        if m.op == "=":
            out[m.name] = m.value
        elif m.op == "=~":
            value = example_match(m.value)
            if value is None:
                raise ValueError(f"selector {m}: no example value matches it for the generated tests")
            out[m.name] = value
    return out


def example_match(pattern: str) -> str | None:
    """A short string the regular expression matches in full, or None (e.g. `vllm-.*` -> `vllm-`)."""
    import re._parser as sre  # the parser of Python's own `re`: the tree of a pattern

    def build(items: list) -> str:
        out = []
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                out.append(chr(arg))
            elif name == "ANY":
                out.append("a")
            elif name == "IN":
                out.append(_first_in(arg))
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                low, _, sub = arg
                out.append(build(list(sub)) * low)
            elif name == "SUBPATTERN":
                out.append(build(list(arg[-1])))
            elif name == "BRANCH":
                out.append(build(list(arg[1][0])))
            elif name == "CATEGORY":
                out.append(_CATEGORY.get(str(arg), "a"))
            elif name == "AT":
                continue
            else:
                raise ValueError(name)
        return "".join(out)

    try:
        candidate = build(list(sre.parse(pattern)))
    except (ValueError, re.error, TypeError, IndexError):
        return None
    return candidate if re.fullmatch(pattern, candidate) else None


_CATEGORY = {"CATEGORY_DIGIT": "0", "CATEGORY_WORD": "a", "CATEGORY_SPACE": " ", "CATEGORY_NOT_DIGIT": "a"}


def _first_in(items: list) -> str:
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            return chr(arg)
        if name == "RANGE":
            return chr(arg[0])
        if name == "CATEGORY":
            return _CATEGORY.get(str(arg), "a")
    return "a"


# --- numbers for the cases ------------------------------------------------------------------


def _above(limit: Threshold) -> float:
    """A value clearly over a threshold, within its bounds."""
    high = limit.bounds[1]
    return min(limit.value * 1.2, (limit.value + high) / 2 if math.isfinite(high) else math.inf)


def _below(limit: Threshold) -> float:
    return limit.value * 0.8


def _minutes(text: str) -> int:
    return int(parse_duration(text) // 60)


POINTS = 150  # samples per generated series: enough for a lead, a `for:` of up to an hour, and more


# a DCGM blank sentinel held for a case's whole series, written exactly (const rounds to 12 digits)
BLANK = f"{int(c.DCGM_BLANK_FROM)}x{POINTS}"


def const(value: float, points: int = POINTS) -> str:
    return f"{value:.12g}x{points}"


def per_minute(rate: float, points: int = POINTS) -> str:
    """A counter growing `rate` per second, sampled every minute."""
    return f"0+{rate * 60:.12g}x{points}"


def _bucket_around(signal: c.Signal, limit: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """(fires, silent) buckets of a histogram: all observations in a bucket wholly above the limit
    (p99 > limit), or wholly at or below it (p99 <= limit)."""
    bounds = (0.0, *signal.buckets)
    pairs = list(itertools.pairwise(bounds))
    above = next(((lo, hi) for lo, hi in pairs if lo >= limit), None)
    below = next(((lo, hi) for lo, hi in reversed(pairs) if hi <= limit), None)
    if above is None or below is None:
        raise ValueError(f"{signal.name}: no bucket bound on both sides of {limit:g}")
    return above, below


def _le(bound: float) -> str:
    """A bucket bound as prometheus_client writes it (5.0, 0.25, +Inf)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _histogram_case(fx: Fixtures, signal: c.Signal, limit: float, fires: bool) -> tuple[dict[str, str], float]:
    """Bucket series whose p99 is over (fires) or under the limit, and that p99."""
    above, below = _bucket_around(signal, limit)
    lo, hi = above if fires else below
    series = {
        fx.engine(signal, "_bucket", le=_le(hi)): per_minute(1 / 6),
        fx.engine(signal, "_bucket", le="+Inf"): per_minute(1 / 6),
    }
    if lo > 0:
        series[fx.engine(signal, "_bucket", le=_le(lo))] = const(0)
    return series, lo + (hi - lo) * 0.99


# --- expressions ------------------------------------------------------------------------------


def _engine_alerts(config: Config) -> list[Alert]:
    lim, fx, sel = config.thresholds, Fixtures(config), config.engine_selector
    kv = metric(c.VLLM_KV_CACHE_USAGE, sel).max(ENGINE)
    preempt = metric(c.VLLM_NUM_PREEMPTIONS, sel).rate("5m").sum(ENGINE)
    swapped = metric(c.VLLM_REQUESTS_SWAPPED, sel).max(ENGINE)
    waiting = metric(c.VLLM_REQUESTS_WAITING, sel).max(ENGINE)
    queue_p99 = quantile(0.99, c.VLLM_QUEUE_TIME, c.REQUEST_QUEUE_SECONDS, window="5m", by=ENGINE, selector=sel)
    ttft_p99 = quantile(0.99, c.VLLM_TTFT, window="5m", by=ENGINE, selector=sel)

    def hit_ratio(span: str) -> Expr:
        hits = metric(c.VLLM_PREFIX_CACHE_HITS, sel).rate(span).sum(ENGINE)
        return hits / metric(c.VLLM_PREFIX_CACHE_QUERIES, sel).rate(span).sum(ENGINE)

    failed = sel & Selector.any_of("finished_reason", c.FINISHED_FAILED)
    errors = metric(c.VLLM_REQUEST_SUCCESS, failed).rate("5m").sum(ENGINE) / metric(c.VLLM_REQUEST_SUCCESS, sel).rate(
        "5m"
    ).sum(ENGINE)

    kv_warn, kv_crit = lim[t.KV_USAGE_WARNING], lim[t.KV_USAGE_CRITICAL]
    pre, backlog = lim[t.PREEMPTION_RATE], lim[t.QUEUE_BACKLOG]
    queue_limit, ttft_limit = lim[t.QUEUE_TIME_P99], lim[t.TTFT_P99]
    floor, error_limit = lim[t.PREFIX_HIT_FLOOR], lim[t.ERROR_RATIO]
    queue_fire, queue_fire_p99 = _histogram_case(fx, c.VLLM_QUEUE_TIME, queue_limit.value, True)
    queue_quiet, _ = _histogram_case(fx, c.VLLM_QUEUE_TIME, queue_limit.value, False)
    ttft_fire, ttft_fire_p99 = _histogram_case(fx, c.VLLM_TTFT, ttft_limit.value, True)
    ttft_quiet, _ = _histogram_case(fx, c.VLLM_TTFT, ttft_limit.value, False)
    hits, queries = c.VLLM_PREFIX_CACHE_HITS, c.VLLM_PREFIX_CACHE_QUERIES
    low_hit = floor.value / 2
    good_hit = min(1.0, (floor.value + 1) / 2)
    success = c.VLLM_REQUEST_SUCCESS
    bad_share, ok_share = min(0.9, error_limit.value * 2), error_limit.value * 0.8
    kv_full = _above(kv_crit)
    return [
        Alert(
            "VLLMKVCacheNearlyFull",
            str(kv.ge(kv_warn.value)),
            "warning",
            "vLLM KV cache nearly full.",
            "KV-cache usage of {{ $labels.instance }} is {{ $value | humanizePercentage }}: "
            "the next burst of long prompts starts preemptions.",
            explained_by=("kv_cache_exhaustion", "load_imbalance"),
            fires=Case(
                {fx.engine(c.VLLM_KV_CACHE_USAGE): const(_above(kv_warn))}, "5m", fx.engine_labels, _above(kv_warn)
            ),
            silent=Case({fx.engine(c.VLLM_KV_CACHE_USAGE): const(_below(kv_warn))}, "5m"),
            for_=kv_warn.for_,
        ),
        Alert(
            "VLLMKVCacheExhausted",
            str(kv.ge(kv_crit.value).and_(preempt.gt(0).or_(swapped.gt(0)))),
            "critical",
            "vLLM KV cache exhausted: requests are being preempted.",
            "KV-cache usage of {{ $labels.instance }} is {{ $value | humanizePercentage }} and "
            "requests are preempted (or swapped): they recompute their prefill and the queue grows (seed 000).",
            explained_by=("kv_cache_exhaustion", "load_imbalance"),
            fires=Case(
                {
                    fx.engine(c.VLLM_KV_CACHE_USAGE): const(kv_full),
                    fx.engine(c.VLLM_NUM_PREEMPTIONS): per_minute(0.05),
                },
                "4m",
                fx.engine_labels,
                kv_full,
                lead=5,
            ),
            silent=Case(
                {fx.engine(c.VLLM_KV_CACHE_USAGE): const(kv_full), fx.engine(c.VLLM_NUM_PREEMPTIONS): const(0)}, "4m"
            ),
            for_=kv_crit.for_,
        ),
        Alert(
            "VLLMPreemptionsHigh",
            str(preempt.gt(pre.value)),
            "warning",
            "vLLM is preempting requests.",
            '{{ $labels.instance }} preempts {{ $value | printf "%.3g" }} requests per second: '
            "the KV pool is too small for the running set.",
            explained_by=("kv_cache_exhaustion", "load_imbalance"),
            fires=Case(
                {fx.engine(c.VLLM_NUM_PREEMPTIONS): per_minute(2 * pre.value)},
                "10m",
                fx.engine_labels,
                2 * pre.value,
                lead=5,
            ),
            silent=Case({fx.engine(c.VLLM_NUM_PREEMPTIONS): per_minute(0.8 * pre.value)}, "10m"),
            for_=pre.for_,
        ),
        Alert(
            "VLLMQueueBacklog",
            str(waiting.gt(backlog.value)),
            "warning",
            "vLLM queue backlog: more load than capacity.",
            '{{ $labels.instance }} has {{ $value | printf "%.3g" }} requests waiting (seed 002: add capacity).',
            explained_by=LATENCY,
            fires=Case(
                {fx.engine(c.VLLM_REQUESTS_WAITING): const(math.ceil(1.5 * backlog.value))},
                "3m",
                fx.engine_labels,
                math.ceil(1.5 * backlog.value),
            ),
            silent=Case({fx.engine(c.VLLM_REQUESTS_WAITING): const(backlog.value)}, "3m"),
            for_=backlog.for_,
        ),
        Alert(
            "VLLMQueueTimeHigh",
            str(queue_p99.gt(queue_limit.value)),
            "warning",
            "vLLM requests wait long in the queue.",
            'p99 time in queue on {{ $labels.instance }} is {{ $value | printf "%.3g" }} s.',
            explained_by=LATENCY,
            fires=Case(queue_fire, "10m", fx.engine_labels, queue_fire_p99, lead=5),
            silent=Case(queue_quiet, "10m"),
            for_=queue_limit.for_,
        ),
        Alert(
            "VLLMTTFTHigh",
            str(ttft_p99.gt(ttft_limit.value)),
            "warning",
            "vLLM time to first token is high.",
            'p99 TTFT on {{ $labels.instance }} is {{ $value | printf "%.3g" }} s (seed 002: above 3 s users leave).',
            explained_by=LATENCY,
            fires=Case(ttft_fire, "10m", fx.engine_labels, ttft_fire_p99, lead=5),
            silent=Case(ttft_quiet, "10m"),
            for_=ttft_limit.for_,
        ),
        Alert(
            "VLLMPrefixCacheHitRateDrop",
            # "it was healthy at some point in the hour before": a plain [1h] ratio would be
            # diluted by the drop itself and resolve the alert while the drop goes on.
            str(
                hit_ratio("10m")
                .lt(floor.value)
                .and_(hit_ratio("10m").range("1h", "1m").offset("10m").over_time("max").ge(floor.value))
            ),
            "warning",
            "vLLM prefix-cache hit rate dropped.",
            "The prefix-cache hit rate of {{ $labels.instance }} fell to {{ $value | humanizePercentage }} "
            f"(it was above {floor.value:.0%} the hour before): shared prefixes stopped being shared (seed 004).",
            explained_by=("prefix_cache_miss",),
            fires=Case(
                {
                    fx.engine(hits): f"0+{100 * good_hit:.12g}x60 {6000 * good_hit:.12g}+{100 * low_hit:.12g}x90",
                    fx.engine(queries): "0+100x150",
                },
                "80m",
                fx.engine_labels,
                low_hit,
                lead=70,
            ),
            silent=Case(
                {
                    fx.engine(hits): f"0+{100 * good_hit:.12g}x60 {6000 * good_hit:.12g}+{100 * good_hit:.12g}x90",
                    fx.engine(queries): "0+100x150",
                },
                "80m",
            ),
            for_=floor.for_,
        ),
        Alert(
            "VLLMErrorRatioHigh",
            str(errors.gt(error_limit.value)),
            "warning",
            "vLLM requests are failing.",
            "{{ $value | humanizePercentage }} of requests on {{ $labels.instance }} end in an abort or error.",
            explained_by=("gpu_hardware_fault", "gpu_memory_pressure", "kv_cache_exhaustion", "capacity_saturation"),
            fires=Case(
                {
                    fx.engine(success, finished_reason="length"): per_minute(100 * (1 - bad_share) / 60),
                    fx.engine(success, finished_reason="error"): per_minute(100 * bad_share / 60),
                },
                "10m",
                fx.engine_labels,
                bad_share,
                lead=5,
            ),
            silent=Case(
                {
                    fx.engine(success, finished_reason="length"): per_minute(100 * (1 - ok_share) / 60),
                    fx.engine(success, finished_reason="error"): per_minute(100 * ok_share / 60),
                },
                "10m",
            ),
            for_=error_limit.for_,
        ),
        Alert(
            "KvscopeTargetDown",
            str(metric(c.TARGET_UP).eq(0)),
            "warning",
            "A vLLM target of kvscope export does not answer.",
            "kvscope export on {{ $labels.instance }} cannot scrape {{ $labels.target }}: its engine metrics are gone.",
            explained_by=(),
            fires=Case(
                {_series(c.TARGET_UP, {"instance": "node-1:9400", "target": "http://10.0.0.1:8000/metrics"}): const(0)},
                "2m",
                {"instance": "node-1:9400", "target": "http://10.0.0.1:8000/metrics"},
                0,
            ),
            silent=Case(
                {_series(c.TARGET_UP, {"instance": "node-1:9400", "target": "http://10.0.0.1:8000/metrics"}): const(1)},
                "2m",
            ),
            for_=lim[t.TARGET_DOWN_FOR].for_,
            diagnose_scope="",
        ),
        Alert(
            "KvscopeCollectorFailing",
            str(metric(c.EXPORTER_COLLECTOR_SUCCESS).eq(0)),
            "warning",
            "A kvscope export collector is failing.",
            "The {{ $labels.collector }} collector of kvscope export on {{ $labels.instance }} fails: "
            "its series are missing.",
            explained_by=(),
            fires=Case(
                {_series(c.EXPORTER_COLLECTOR_SUCCESS, {"instance": "node-1:9400", "collector": "nvml"}): const(0)},
                "5m",
                {"instance": "node-1:9400", "collector": "nvml"},
                0,
            ),
            silent=Case(
                {_series(c.EXPORTER_COLLECTOR_SUCCESS, {"instance": "node-1:9400", "collector": "nvml"}): const(1)},
                "5m",
            ),
            for_="5m",
            diagnose_scope="",
        ),
    ]


def _hot(reading: Callable[..., Expr], sel: Selector, config: Config) -> Expr:
    """A GPU within the margin of its slowdown temperature, defined as the diagnosis defines it
    (diagnosis/checks/throttling.py): the slowdown temperature the GPU exports, else its model's
    (kvscope/gpu_models.py with kvscope.yaml's overrides), else `gpu_temp_high`."""
    margin, default = config.thresholds[t.GPU_TEMP_MARGIN].value, config.thresholds[t.GPU_TEMP_HIGH].value
    temp, exported = reading(c.DCGM_GPU_TEMP), reading(c.DCGM_SLOWDOWN_TEMP)
    by_slowdown: dict[float, list[str]] = {}
    for model in config.gpu_models.table.values():
        if model.slowdown_temp:
            by_slowdown.setdefault(model.slowdown_temp, []).extend((model.name, *model.names))

    def named(names: Sequence[str], op: Literal["=~", "!~"] = "=~") -> Selector:
        # NVML's name as the table compares it (gpu_models.nvml_key): case folded, a MIG suffix
        return Selector((*sel.matchers, Matcher("modelName", op, f"(?i)({regex_any(names)})( MIG .*)?")))

    table = [reading(c.DCGM_GPU_TEMP, named(names)).ge(slowdown - margin) for slowdown, names in by_slowdown.items()]
    known = [n for names in by_slowdown.values() for n in names]
    unknown = reading(c.DCGM_GPU_TEMP, named(known, "!~") if known else sel).ge(default)
    fallback = unknown
    for branch in table:
        fallback = branch.or_(fallback)
    return temp.ge(exported - margin).or_(fallback.unless(exported))


def _gpu_alerts(config: Config) -> list[Alert]:
    lim, fx, sel = config.thresholds, Fixtures(config), config.gpu_selector
    xid = c.GPU_XID_ERRORS
    full, over, floor = lim[t.GPU_MEMORY_FULL], lim[t.GPU_MEMORY_OVER_BUDGET], lim[t.GPU_UTIL_FLOOR]
    throttle, temp_limit = lim[t.THROTTLE_SHARE], lim[t.GPU_TEMP_HIGH]
    saturation, replays = lim[t.PCIE_SATURATION], lim[t.PCIE_REPLAY_RATE]
    achievable = lim[t.PCIE_ACHIEVABLE_SHARE].value  # the diagnosis measures against the same rate

    def reading(signal: c.Signal, selector: Selector = sel) -> Expr:
        """A DCGM gauge without its blank sentinels (catalog.DCGM_BLANK_FROM: the diagnosis drops
        the same values), so a page of blanks never pages."""
        return metric(signal, selector).lt(c.DCGM_BLANK_FROM)

    def xid_count(matcher: Matcher) -> Expr:
        # a code's first XID creates its series at 1: counted from zero, not as no increase
        return metric(xid, Selector((*sel.matchers, matcher))).increase_from_zero("5m").sum((*GPU_BY, "xid")).gt(0)

    def xid_alert(name: str, bucket: Bucket, severity: str, what: str, code: int, unknown: int | None = None) -> Alert:
        expr = xid_count(Matcher("xid", "=~", regex_any(codes(bucket))))
        if unknown is not None:  # XIDs the catalog does not know need a reset, as the diagnosis says
            expr = expr.or_(xid_count(Matcher("xid", "!~", regex_any(CATALOG))))

        def case(code: int, values: str, fires: bool) -> Case:
            series = {fx.gpu(xid, xid=str(code)): values}
            return (
                Case(series, "4m", {**fx.gpu_labels(*GPU_BY), "xid": str(code)}, 1.0) if fires else Case(series, "4m")
            )

        return Alert(
            name,
            str(expr),
            severity,
            f"GPU XID error: {what}.",
            "GPU {{ $labels.gpu }} on " + HOST + " reported XID {{ $labels.xid }} "
            f'({what}) {{{{ $value | printf "%.3g" }}}} time(s) in 5 minutes; '
            "see the XID table on the GPU fleet dashboard.",
            explained_by=("gpu_hardware_fault",),
            fires=case(code, "0 0 0 1 1 1", True),
            silent=case(code, "0 0 0 0 0 0", False),
            # an unknown code's series does not exist until its first XID (the exporter pre-creates
            # the catalogued codes' at 0): it appears at 1
            more=() if unknown is None else (case(unknown, "_ _ _ 1 1 1", True),),
            diagnose_scope="",
            group="kvscope-gpu",
        )

    used, free, reserved = (reading(s) for s in (c.DCGM_FB_USED, c.DCGM_FB_FREE, c.DCGM_FB_RESERVED))
    # FB_RESERVED is missing from older dcgm-exporter counter lists: count it as 0 there
    share = (used / (used + free + reserved.or_(used * 0))).max(GPU_BY)
    budget = metric(c.ENGINE_MEMORY_BUDGET, sel).max(("instance",))  # written by kvscope export, as the GPU series
    memory = share.gt(budget + over.value, on=("instance",), group_left=()).or_(
        share.gt(full.value).unless(budget, on=("instance",))
    )
    # busy in percent, as the diagnosis reads it (Context.util): the utilisation gauge, else the
    # graphics engine's activity; on a MIG instance the gauge is not supported (dcgm-exporter 3.x
    # writes 0 there) and only the activity counts
    mig_id = c.DCGM_MIG_LABELS[1]
    util = reading(c.DCGM_GPU_UTIL, sel.where(mig_id, "=", "")).or_(reading(c.DCGM_GR_ENGINE_ACTIVE) * 100)
    throttled = (
        metric(c.GPU_CLOCK_EVENT_ACTIVE, sel & Selector.any_of("reason", c.THROTTLE_REASONS))
        .over_time("avg", "5m")
        .max(("instance", "gpu"))
        .gt(throttle.value)
        .and_(util.max(("instance", "gpu")).gt(floor.value), on=("instance", "gpu"))
    )
    tx, rx = (reading(s) for s in (c.DCGM_PCIE_TX_BYTES, c.DCGM_PCIE_RX_BYTES))
    cap = metric(c.GPU_PCIE_LINK_CAPACITY, sel)

    def pcie_share(direction: Expr) -> Expr:
        reach = cap.max(("instance", "gpu")) * achievable
        return direction.max(("instance", "gpu")).binop("/", reach, on=("instance", "gpu"))

    pcie = pcie_share(tx).gt(saturation.value).or_(pcie_share(rx).gt(saturation.value))
    sticky, raw_sticky = reading(c.DCGM_XID_ERRORS), metric(c.DCGM_XID_ERRORS, sel)  # offset and changes: raw

    # a link that never reached its best over 5 minutes while the GPU worked: an idle GPU lowers
    # its link to save power and trains it back up for work (nvidia-smi; tests/scenarios/reality4.py),
    # so neither an idle reading nor an idle moment of a working GPU says anything of the link; the
    # diagnosis reads the same (diagnosis/checks/pcie.py)
    def best(signal: c.Signal) -> Expr:
        return metric(signal, sel).over_time("max", "5m").lt(c.DCGM_BLANK_FROM)

    degraded = (
        best(c.DCGM_PCIE_LINK_GEN)
        .lt(reading(c.DCGM_PCIE_MAX_LINK_GEN))
        .or_(best(c.DCGM_PCIE_LINK_WIDTH).lt(reading(c.DCGM_PCIE_MAX_LINK_WIDTH)))
        .and_(util.max(("instance", "gpu")).over_time("max", "5m").ge(floor.value), on=("instance", "gpu"))
    )
    busy = {fx.gpu(c.DCGM_GPU_UTIL): const(min(100.0, 2 * floor.value + 50))}
    hot = _hot(reading, sel, config)
    mig = {c.DCGM_MIG_LABELS[0]: "3g.40gb", mig_id: "1"}  # a MIG instance's labels, for the cases
    margin, models = lim[t.GPU_TEMP_MARGIN].value, config.gpu_models
    t4, h100 = models["T4"], models["H100"]
    t4_hot, h100_hot = (t4.slowdown_temp or 0) - margin, (h100.slowdown_temp or 0) - margin
    card = 81000.0
    hot_use, ok_use = _memory_case(full.value, card)
    cap_value = 63e9
    over_share, under_share = min(0.99, (saturation.value + 1) / 2), saturation.value * 0.9
    return [
        Alert(
            "GPUMemoryFull",
            str(memory),
            "critical",
            "GPU memory used beyond the engine's budget: near OOM.",
            "GPU {{ $labels.gpu }} on " + HOST + " is {{ $value | humanizePercentage }} full: vLLM reserves "
            "its share up front, so this is more than the engine took (a leak or another process); CUDA OOM is near.",
            explained_by=("gpu_memory_pressure",),
            fires=Case(
                {fx.gpu(c.DCGM_FB_USED): const(hot_use), fx.gpu(c.DCGM_FB_FREE): const(card - hot_use)},
                "2m",
                fx.gpu_labels(*GPU_BY),
                hot_use / card,
            ),
            silent=Case({fx.gpu(c.DCGM_FB_USED): const(ok_use), fx.gpu(c.DCGM_FB_FREE): const(card - ok_use)}, "2m"),
            more=(
                _budget_case(fx, over.value, card),
                # a page of DCGM blanks (a field the driver could not read) is no reading
                Case({fx.gpu(c.DCGM_FB_USED): BLANK, fx.gpu(c.DCGM_FB_FREE): const(card - ok_use)}, "2m"),
            ),
            for_=full.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUUtilLow",
            str(util.lt(floor.value)),
            "info",
            "GPU mostly idle.",
            "GPU {{ $labels.gpu }} on " + HOST + " has been "
            '{{ $value | printf "%.3g" }} % busy for 10 minutes '
            "(seed 002: consolidate or scale down).",
            explained_by=("gpu_underutilized",),
            fires=Case({fx.gpu(c.DCGM_GPU_UTIL): const(floor.value / 2)}, "10m", fx.gpu_labels(), floor.value / 2),
            silent=Case({fx.gpu(c.DCGM_GPU_UTIL): const(floor.value)}, "10m"),
            more=(
                Case(
                    {fx.gpu(c.DCGM_GPU_UTIL, **mig): const(0), fx.gpu(c.DCGM_GR_ENGINE_ACTIVE, **mig): const(0.33)},
                    "10m",
                ),
                Case(
                    {fx.gpu(c.DCGM_GPU_UTIL, **mig): const(0), fx.gpu(c.DCGM_GR_ENGINE_ACTIVE, **mig): const(0.05)},
                    "10m",
                    {**fx.gpu_labels(), **mig},
                    5.0,
                ),
            ),
            for_=floor.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        xid_alert("GPUXidAppLevel", Bucket.APP, "warning", "an application fault; restart the app", 13),
        xid_alert("GPUXidResetRequired", Bucket.RESET_GPU, "critical", "the GPU needs a reset", 48, unknown=999),
        xid_alert("GPUXidDrainNode", Bucket.DRAIN_NODE, "critical", "drain the node", 79),
        Alert(
            "GPUXIDReported",
            str(
                sticky.max(GPU_BY)
                .gt(0)
                .unless(raw_sticky.offset("5m").max(GPU_BY))
                .or_(raw_sticky.changes("5m").max(GPU_BY).gt(0).and_(sticky.max(GPU_BY)))
            ),
            "critical",
            "GPU XID error reported by dcgm-exporter.",
            "dcgm-exporter's last-XID value on GPU {{ $labels.gpu }} of " + HOST + " changed in the last "
            "5 minutes (seed 002: XIDs are hardware faults). The gauge is sticky, so only changes count.",
            explained_by=("gpu_hardware_fault",),
            fires=Case({fx.gpu(c.DCGM_XID_ERRORS): "0 0 0 79 79 79"}, "4m", fx.gpu_labels(*GPU_BY), 79),
            silent=Case({fx.gpu(c.DCGM_XID_ERRORS): "79 79 79 79 79 79 79 79 79 79"}, "9m"),
            more=(Case({fx.gpu(c.DCGM_XID_ERRORS): f"0 0 0 {BLANK}"}, "4m"),),  # a blank is no XID
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPURowRemapFailure",
            str(metric(c.DCGM_ROW_REMAP_FAILURE, sel).gt(0)),
            "critical",
            "GPU row remap failed.",
            "GPU {{ $labels.gpu }} on " + HOST + " failed to remap a row of HBM: reset the GPU and contact support.",
            explained_by=("gpu_hardware_fault",),
            fires=Case({fx.gpu(c.DCGM_ROW_REMAP_FAILURE): "0 1 1"}, "2m", fx.gpu_labels(), 1),
            silent=Case({fx.gpu(c.DCGM_ROW_REMAP_FAILURE): "0 0 0"}, "2m"),
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUThrottled",
            str(throttled),
            "warning",
            "GPU clocks held down by power or temperature.",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} was throttled {{ $value | humanizePercentage }} of the "
            "last 5 minutes while busy: latency follows the clock.",
            explained_by=("thermal_power_throttling",),
            fires=Case(
                {
                    fx.gpu(c.GPU_CLOCK_EVENT_ACTIVE, reason="sw_thermal_slowdown"): const(1),
                    fx.gpu(c.DCGM_GPU_UTIL): const(min(100.0, 2 * floor.value + 50)),
                },
                "10m",
                {"instance": "node-1:9400", "gpu": "3"},
                1,
            ),
            silent=Case(
                {
                    fx.gpu(c.GPU_CLOCK_EVENT_ACTIVE, reason="sw_thermal_slowdown"): const(1),
                    fx.gpu(c.DCGM_GPU_UTIL): const(floor.value / 4),
                },
                "10m",
            ),
            for_=lim[t.CLOCK_BELOW_BASE].for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUTemperatureHigh",
            str(hot),
            "warning",
            "GPU running hot.",
            "GPU {{ $labels.gpu }} on " + HOST + ' is at {{ $value | printf "%.3g" }} C: it slows its clocks '
            "near its slowdown temperature.",
            explained_by=("thermal_power_throttling",),
            fires=Case(
                {fx.gpu(c.DCGM_GPU_TEMP): const(temp_limit.value + 5)}, "5m", fx.gpu_labels(), temp_limit.value + 5
            ),
            # the model's slowdown point less the margin, as the diagnosis judges it: a T4 (93 C)
            # below 91 C is not hot, an H100 (87 C) at 85 C is; an exported slowdown temperature
            # wins over the table; a page of DCGM blanks is no reading
            more=(
                Case({fx.gpu(c.DCGM_GPU_TEMP, modelName=t4.name): const(t4_hot - 1)}, "5m"),
                Case(
                    {fx.gpu(c.DCGM_GPU_TEMP, modelName=t4.name): const(t4_hot)},
                    "5m",
                    {**fx.gpu_labels(), "modelName": t4.name},
                    t4_hot,
                ),
                Case(
                    {fx.gpu(c.DCGM_GPU_TEMP, modelName=h100.name): const(h100_hot)},
                    "5m",
                    {**fx.gpu_labels(), "modelName": h100.name},
                    h100_hot,
                ),
                Case(
                    {
                        fx.gpu(c.DCGM_GPU_TEMP, modelName=h100.name): const(h100_hot),
                        fx.gpu(c.DCGM_SLOWDOWN_TEMP, modelName=h100.name): const(h100_hot + 10),
                    },
                    "5m",
                ),
                Case({fx.gpu(c.DCGM_GPU_TEMP): BLANK}, "5m"),
                Case({fx.gpu(c.DCGM_GPU_TEMP): f"{c.DCGM_INT64_BLANK_FIRST + 1}x{POINTS}"}, "5m"),
            ),
            silent=Case({fx.gpu(c.DCGM_GPU_TEMP): const(temp_limit.value - 1)}, "5m"),
            for_="5m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUPCIeLinkDegraded",
            str(degraded),
            "warning",
            "GPU PCIe link degraded.",
            "GPU {{ $labels.gpu }} on " + HOST + " runs its PCIe link below its generation or width while it "
            "works: reseat or replace the card or riser (an idle GPU lowers its link on purpose).",
            explained_by=("pcie_bottleneck",),
            fires=Case({**_link(fx, 3, 16), **busy}, "5m", fx.gpu_labels(), 3),
            silent=Case({**_link(fx, 5, 16), **busy}, "5m"),
            more=(
                Case({**_link(fx, 5, 16), **busy, fx.gpu(c.DCGM_PCIE_MAX_LINK_GEN): BLANK}, "5m"),
                Case({**_link(fx, 1, 16), fx.gpu(c.DCGM_GPU_UTIL): const(0)}, "5m"),  # idle: power saving
                Case(  # at work two minutes in four at its best, idle between at Gen1 x8
                    {
                        **_link(fx, 5, 16),
                        fx.gpu(c.DCGM_PCIE_LINK_GEN): "5 5 1 1 " * (POINTS // 4),
                        fx.gpu(c.DCGM_PCIE_LINK_WIDTH): "16 16 8 8 " * (POINTS // 4),
                        fx.gpu(c.DCGM_GPU_UTIL): "70 70 0 0 " * (POINTS // 4),
                    },
                    "10m",
                ),
                Case({**_link(fx, 5, 8), **busy}, "5m", fx.gpu_labels(), 8),  # a riser trained at x8
            ),
            for_="5m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUPCIeSaturated",
            str(pcie),
            "warning",
            "GPU PCIe link saturated.",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} moves {{ $value | humanizePercentage }} "
            "of what its PCIe link achieves (seed 002: host-device copies stall the engine).",
            explained_by=("pcie_bottleneck",),
            fires=Case(
                _pcie(fx, over_share * achievable * cap_value, cap_value),
                "5m",
                {"instance": "node-1:9400", "gpu": "3"},
                over_share,
            ),
            silent=Case(_pcie(fx, under_share * achievable * cap_value, cap_value), "5m"),
            for_=saturation.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUPCIeReplays",
            str(metric(c.DCGM_PCIE_REPLAY, sel).rate("5m").gt(replays.value)),
            "warning",
            "GPU PCIe link is retrying.",
            "GPU {{ $labels.gpu }} on " + HOST + ' replays {{ $value | printf "%.3g" }} PCIe packets per '
            "second: the link is failing.",
            explained_by=("pcie_bottleneck",),
            fires=Case(
                {fx.gpu(c.DCGM_PCIE_REPLAY): per_minute(2 * replays.value)},
                "10m",
                fx.gpu_labels(),
                2 * replays.value,
                lead=5,
            ),
            silent=Case({fx.gpu(c.DCGM_PCIE_REPLAY): per_minute(replays.value / 2)}, "10m"),
            for_="5m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
    ]


def _memory_case(full: float, card: float) -> tuple[float, float]:
    """Framebuffer MiB used over and under `full` of a card (no engine budget known)."""
    return round(card * min(0.995, (full + 1) / 2)), round(card * full * 0.98)


def _budget_case(fx: Fixtures, over: float, card: float) -> Case:
    """An engine given 80 % of the card, its GPU at 80 % + the margin + 2 %: over its budget
    though far from full (the exporter joins the engine's budget on `instance`)."""
    budget = 0.8
    used = round(card * (budget + over + 0.02))
    budget_series = _series(
        c.ENGINE_MEMORY_BUDGET,
        {
            "instance": G_LABELS["instance"],
            "target": "http://127.0.0.1:8000/metrics",
            "model_name": "m",
            **fx.gpu_extra,
        },
    )
    series = {
        fx.gpu(c.DCGM_FB_USED): const(used),
        fx.gpu(c.DCGM_FB_FREE): const(card - used),
        budget_series: const(budget),
    }
    return Case(series, "3m", fx.gpu_labels(*GPU_BY), used / card)


def _link(fx: Fixtures, gen: int, width: int) -> dict[str, str]:
    return {
        fx.gpu(c.DCGM_PCIE_LINK_GEN): const(gen),
        fx.gpu(c.DCGM_PCIE_MAX_LINK_GEN): const(5),
        fx.gpu(c.DCGM_PCIE_LINK_WIDTH): const(width),
        fx.gpu(c.DCGM_PCIE_MAX_LINK_WIDTH): const(16),
    }


def _pcie(fx: Fixtures, rx: float, capacity: float) -> dict[str, str]:
    return {
        fx.gpu(c.DCGM_PCIE_TX_BYTES): const(rx / 4),
        fx.gpu(c.DCGM_PCIE_RX_BYTES): const(rx),
        _series(
            c.GPU_PCIE_LINK_CAPACITY, {"instance": "node-1:9400", "gpu": "3", "UUID": "GPU-3", **fx.gpu_extra}
        ): const(capacity),
    }


# --- SLOs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slo:
    """A service-level objective over vLLM's own counters, with its error budget's period."""

    name: str
    objective: float
    good: Callable[[str], Expr]  # good events per second over a window
    total: Callable[[str], Expr]  # all events per second over a window
    events: Callable[[str], Expr]  # all events over a window (increase: a drill's clock scales it)
    samples: Callable[[str], Expr]  # the scrapes of its counters over a window (the oldest series')
    description: str
    histogram: c.Signal | None = None  # the histogram whose bucket `bound` separates good from bad
    bound: float | None = None

    def bad_ratio(self, window: str) -> Expr:
        """The share of bad events over `window`."""
        return 1 - self.good(window) / self.total(window)


SLO_BY = ("namespace", "model_name")


def slos(config: Config) -> list[Slo]:
    slo, sel = config.slo, config.engine_selector

    def rate_of(selector: Selector, signal: c.Signal, suffix: str = "") -> Callable[[str], Expr]:
        return lambda window: metric(signal, selector, suffix).rate(window).sum(SLO_BY)

    def count_of(selector: Selector, signal: c.Signal, suffix: str = "") -> Callable[[str], Expr]:
        return lambda window: metric(signal, selector, suffix).increase(window).sum(SLO_BY)

    def scrapes_of(signal: c.Signal, suffix: str = "") -> Callable[[str], Expr]:
        return lambda window: metric(signal, sel, suffix).over_time("count", window).max(SLO_BY)

    def within(signal: c.Signal, bound: float) -> Callable[[str], Expr]:
        return rate_of(Selector((*sel.matchers, le(bound))), signal, "_bucket")

    ok = sel & Selector.any_of("finished_reason", c.FINISHED_OK)
    return [
        Slo(
            "ttft",
            slo.ttft.objective,
            within(c.VLLM_TTFT, slo.ttft.seconds),
            rate_of(sel, c.VLLM_TTFT, "_count"),
            count_of(sel, c.VLLM_TTFT, "_count"),
            scrapes_of(c.VLLM_TTFT, "_count"),
            f"{slo.ttft.objective:.2%} of requests get their first token within {slo.ttft.seconds:g} s",
            c.VLLM_TTFT,
            slo.ttft.seconds,
        ),
        Slo(
            "itl",
            slo.itl.objective,
            within(c.VLLM_ITL, slo.itl.seconds),
            rate_of(sel, c.VLLM_ITL, "_count"),
            count_of(sel, c.VLLM_ITL, "_count"),
            scrapes_of(c.VLLM_ITL, "_count"),
            f"{slo.itl.objective:.2%} of output tokens follow the previous one within {slo.itl.seconds:g} s",
            c.VLLM_ITL,
            slo.itl.seconds,
        ),
        Slo(
            "errors",
            slo.errors.objective,
            rate_of(ok, c.VLLM_REQUEST_SUCCESS),
            rate_of(sel, c.VLLM_REQUEST_SUCCESS),
            count_of(sel, c.VLLM_REQUEST_SUCCESS),
            scrapes_of(c.VLLM_REQUEST_SUCCESS),
            f"{slo.errors.objective:.2%} of requests finish without abort or error",
        ),
    ]


def engine_alerts(config: Config | None = None) -> list[Alert]:
    return _engine_alerts(config or Config())


def gpu_alerts(config: Config | None = None) -> list[Alert]:
    return _gpu_alerts(config or Config())


def case_minutes(alert: Alert) -> int:
    """The `for:` of an alert in whole minutes (for the "not before" check)."""
    return _minutes(alert.for_) if alert.for_ not in ("", "0m", "0s") else 0


def windows(config: Config, severity: str) -> Sequence[tuple[str, str, float]]:
    """(long, short, factor) burn-rate window pairs of a severity."""
    return [(w.long, w.short, w.factor) for w in config.slo.windows if w.severity == severity]
