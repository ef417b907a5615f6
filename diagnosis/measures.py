"""What the diagnosis measures: named quantities per engine instance or per GPU.

Each measure is defined once and computed two ways: as PromQL (the Prometheus source, with a
window and a selector) and from two snapshots of /metrics pages (the scrape source). Names
come from the catalog, with legacy vLLM names as fallbacks, so plain vLLM + dcgm-exporter and
kvscope's exporter both work. Quantiles are per instance, never pooled across a fleet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

from kvscope import catalog
from kvscope.catalog import Signal
from kvscope.promql import ANY, Selector


class Entity(StrEnum):
    ENGINE = "engine"
    GPU = "gpu"


# Labels that identify an engine instance or a GPU, whichever of them the data carries (the
# catalog's: the recording rules group by the same)
ENTITY_LABELS: dict[Entity, tuple[str, ...]] = {
    Entity.ENGINE: catalog.ENGINE_IDENTITY,
    Entity.GPU: catalog.GPU_IDENTITY,
}


class Kind(StrEnum):
    GAUGE_MAX = "gauge_max"  # max over the window
    GAUGE_AVG = "gauge_avg"  # average over the window
    GAUGE_MIN = "gauge_min"
    GAUGE_LAST = "gauge_last"  # the value at the end of the window
    DERIV = "deriv"  # slope per second over the window
    RATE = "rate"  # counter rate per second over the window
    RATE_RECENT = "rate_recent"  # counter rate over the last 5 minutes
    COUNT_RATE = "count_rate"  # a histogram's observations per second over the window
    INCREASE = "increase"  # counter increase over the window
    RATIO = "ratio"  # increase(numerator) / increase(denominator) over the window
    RATIO_RECENT = "ratio_recent"  # ... over the last 5 minutes
    RATIO_BEFORE = "ratio_before"  # ... over the window before the last 5 minutes
    QUANTILE = "quantile"  # histogram quantile over the window
    MEAN = "mean"  # histogram sum / count over the window
    CHANGED = "changed"  # a sticky gauge changed or appeared in the window (1) or not (0)
    RESETS = "resets"  # counter resets in the window (restarts)


@dataclass(frozen=True)
class Measure:
    name: str
    entity: Entity
    kind: Kind
    signals: tuple[Signal, ...]  # tried in order: current name first, fallbacks after
    quantile: float | None = None
    matchers: Selector = ANY  # extra label matchers (failed requests, throttle reasons)
    denominator: tuple[Signal, ...] = ()  # for ratios
    denominator_matchers: Selector = ANY
    by: tuple[str, ...] = ()  # extra grouping labels (e.g. xid)
    help: str = ""

    @property
    def names(self) -> list[str]:
        return [n for s in self.signals for n in s.names]


def _m(name: str, entity: Entity, kind: Kind, *signals: Signal, **kw: object) -> Measure:
    return Measure(name, entity, kind, signals, **kw)  # type: ignore[arg-type]


E, G = Entity.ENGINE, Entity.GPU
c = catalog

MEASURES: tuple[Measure, ...] = (
    # step 1: KV cache
    _m("kv_usage_max", E, Kind.GAUGE_MAX, c.VLLM_KV_CACHE_USAGE, help="peak KV-cache usage"),
    _m("kv_usage_avg", E, Kind.GAUGE_AVG, c.VLLM_KV_CACHE_USAGE, help="mean KV-cache usage"),
    _m("kv_usage_last", E, Kind.GAUGE_LAST, c.VLLM_KV_CACHE_USAGE, help="KV-cache usage at the end"),
    # step 2: queue
    _m("waiting_max", E, Kind.GAUGE_MAX, c.VLLM_REQUESTS_WAITING, help="peak waiting requests"),
    _m(
        "waiting_slope",
        E,
        Kind.DERIV,
        c.VLLM_REQUESTS_WAITING,
        help="waiting requests added per second",
    ),
    _m("running_max", E, Kind.GAUGE_MAX, c.VLLM_REQUESTS_RUNNING, help="peak running requests"),
    _m(
        "queue_p99",
        E,
        Kind.QUANTILE,
        c.REQUEST_QUEUE_SECONDS,
        c.VLLM_QUEUE_TIME,
        c.VLLM_TIME_IN_QUEUE,
        quantile=0.99,
        help="p99 time in queue",
    ),
    # step 4: preemption / swap
    _m("preemption_rate", E, Kind.RATE, c.VLLM_NUM_PREEMPTIONS, help="preemptions per second"),
    _m("swapped_max", E, Kind.GAUGE_MAX, c.VLLM_REQUESTS_SWAPPED, help="peak swapped requests (V0)"),
    # latency
    _m("ttft_p50", E, Kind.QUANTILE, c.VLLM_TTFT, quantile=0.5, help="median TTFT"),
    _m("ttft_p99", E, Kind.QUANTILE, c.VLLM_TTFT, quantile=0.99, help="p99 TTFT"),
    _m("itl_p50", E, Kind.QUANTILE, c.VLLM_ITL, quantile=0.5, help="median inter-token latency"),
    _m("itl_p99", E, Kind.QUANTILE, c.VLLM_ITL, quantile=0.99, help="p99 inter-token latency"),
    _m("e2e_mean", E, Kind.MEAN, c.VLLM_E2E_LATENCY, help="mean end-to-end latency"),
    _m(
        "prefill_p99",
        E,
        Kind.QUANTILE,
        c.VLLM_PREFILL_TIME,
        quantile=0.99,
        help="p99 prefill time",
    ),
    _m(
        "prompt_p50",
        E,
        Kind.QUANTILE,
        c.VLLM_REQUEST_PROMPT_TOKENS,
        quantile=0.5,
        help="median prompt length",
    ),
    _m(
        "prompt_p99",
        E,
        Kind.QUANTILE,
        c.VLLM_REQUEST_PROMPT_TOKENS,
        quantile=0.99,
        help="p99 prompt length",
    ),
    _m(
        "prompt_mean",
        E,
        Kind.MEAN,
        c.VLLM_REQUEST_PROMPT_TOKENS,
        help="mean prompt length",
    ),
    _m(
        "output_mean",
        E,
        Kind.MEAN,
        c.VLLM_REQUEST_GENERATION_TOKENS,
        help="mean output length",
    ),
    _m(
        "rejection_rate",
        E,
        Kind.RATE,
        c.VLLM_ADMISSION_REJECTIONS,
        help="requests the engine refused to admit per second (a capped queue)",
    ),
    _m(
        "start_time",
        E,
        Kind.GAUGE_MAX,
        c.PROCESS_START_TIME,
        help="the engine process's start time (unix seconds)",
    ),
    _m(
        "restarts",
        E,
        Kind.RESETS,
        c.VLLM_PROMPT_TOKENS,
        help="counter resets in the window (engine restarts)",
    ),
    _m(
        "prefix_hit",
        E,
        Kind.RATIO,
        c.VLLM_PREFIX_CACHE_HITS,
        denominator=(c.VLLM_PREFIX_CACHE_QUERIES,),
        help="prefix-cache hit rate over the window",
    ),
    _m("gateway_mean", E, Kind.MEAN, c.REQUEST_GATEWAY_SECONDS, help="mean time in the gateway"),
    _m(
        "held_max",
        E,
        Kind.GAUGE_MAX,
        c.GATEWAY_LANE_WAITING,
        help="peak requests held at the gateway for their class's KV share (kvscope serve)",
    ),
    # throughput and errors
    _m("generation_tps", E, Kind.RATE, c.VLLM_GENERATION_TOKENS, help="generated tokens per second"),
    _m(
        "generation_tps_recent",
        E,
        Kind.RATE_RECENT,
        c.VLLM_GENERATION_TOKENS,
        help="generated tokens per second, last 5 min",
    ),
    # progress at the end of the window: an engine that answers but makes none (engine_stall)
    _m(
        "prompt_tps_recent",
        E,
        Kind.RATE_RECENT,
        c.VLLM_PROMPT_TOKENS,
        help="prompt tokens per second, last 5 min",
    ),
    _m(
        "aborted_recent",
        E,
        Kind.RATE_RECENT,
        c.VLLM_REQUEST_SUCCESS,
        matchers=Selector.of(finished_reason="abort"),
        help="requests aborted per second, last 5 min",
    ),
    _m("running_last", E, Kind.GAUGE_LAST, c.VLLM_REQUESTS_RUNNING, help="running requests at the end"),
    _m("waiting_last", E, Kind.GAUGE_LAST, c.VLLM_REQUESTS_WAITING, help="waiting requests at the end"),
    # per-token truth: vLLM's inter-token histogram is per engine step; with speculative decoding a
    # step yields 1 + accepted tokens, so the per-output-token time is what a user waits per token
    _m("tpot_p50", E, Kind.QUANTILE, c.VLLM_TPOT, quantile=0.5, help="median time per output token"),
    _m(
        "spec_draft_tps",
        E,
        Kind.RATE,
        c.VLLM_SPEC_DECODE_DRAFT_TOKENS,
        help="speculative draft tokens proposed per second",
    ),
    _m(
        "spec_accept",
        E,
        Kind.RATIO,
        c.VLLM_SPEC_DECODE_ACCEPTED_TOKENS,
        denominator=(c.VLLM_SPEC_DECODE_DRAFT_TOKENS,),
        help="share of draft tokens accepted",
    ),
    # KV transfers between engines or tiers (NIXL, offloading)
    _m(
        "kv_transfer_failures",
        E,
        Kind.RATE,
        c.VLLM_NIXL_FAILED_TRANSFERS,
        c.VLLM_KV_OFFLOAD_ALLOCATION_FAILURES,
        help="failed KV transfers per second (NIXL, else offload allocations)",
    ),
    _m(
        "kv_transfer_p99",
        E,
        Kind.QUANTILE,
        c.VLLM_NIXL_XFER_TIME,
        quantile=0.99,
        help="p99 NIXL KV transfer time",
    ),
    _m("request_rate", E, Kind.RATE, c.VLLM_REQUEST_SUCCESS, help="finished requests per second"),
    # what arrives, counted by kvscope serve at admission (vLLM counts a request when it ends)
    _m(
        "arrival_rate",
        E,
        Kind.COUNT_RATE,
        c.GATEWAY_ADMITTED_PROMPT_TOKENS,
        help="requests admitted per second (kvscope serve)",
    ),
    _m(
        "arrival_prompt_mean",
        E,
        Kind.MEAN,
        c.GATEWAY_ADMITTED_PROMPT_TOKENS,
        help="mean prompt length of the requests admitted (kvscope serve)",
    ),
    _m(
        "arrival_prompt_p99",
        E,
        Kind.QUANTILE,
        c.GATEWAY_ADMITTED_PROMPT_TOKENS,
        quantile=0.99,
        help="p99 prompt length of the requests admitted (kvscope serve)",
    ),
    # prefix cache
    _m(
        "prefix_hit_recent",
        E,
        Kind.RATIO_RECENT,
        c.VLLM_PREFIX_CACHE_HITS,
        denominator=(c.VLLM_PREFIX_CACHE_QUERIES,),
        help="prefix-cache hit rate, last 5 min",
    ),
    _m(
        "prefix_hit_before",
        E,
        Kind.RATIO_BEFORE,
        c.VLLM_PREFIX_CACHE_HITS,
        denominator=(c.VLLM_PREFIX_CACHE_QUERIES,),
        help="prefix-cache hit rate before the last 5 min",
    ),
    _m(
        "prefix_queries_recent",
        E,
        Kind.RATE_RECENT,
        c.VLLM_PREFIX_CACHE_QUERIES,
        help="prefix-cache lookups per second, last 5 min",
    ),
    # engine configuration
    _m(
        "cache_config",
        E,
        Kind.GAUGE_LAST,
        c.VLLM_CACHE_CONFIG_INFO,
        by=("gpu_memory_utilization", "num_gpu_blocks", "block_size", "cache_dtype"),
        help="the engine's KV-cache configuration (as labels)",
    ),
    _m(
        "kv_capacity_tokens",
        E,
        Kind.GAUGE_LAST,
        c.CACHE_CAPACITY_TOKENS,
        help="KV capacity (tokens)",
    ),
    # step 3: GPU memory and utilisation
    _m("gpu_util_avg", G, Kind.GAUGE_AVG, c.DCGM_GPU_UTIL, help="mean GPU utilisation (%)"),
    _m(
        "gr_active_avg",
        G,
        Kind.GAUGE_AVG,
        c.DCGM_GR_ENGINE_ACTIVE,
        help="mean graphics-engine activity, 0 to 1: the utilisation where GPU_UTIL is absent, as on MIG",
    ),
    _m("fb_used_max", G, Kind.GAUGE_MAX, c.DCGM_FB_USED, help="peak framebuffer used (MiB)"),
    _m("fb_used_slope", G, Kind.DERIV, c.DCGM_FB_USED, help="framebuffer growth (MiB/s)"),
    _m("fb_free_min", G, Kind.GAUGE_MIN, c.DCGM_FB_FREE, help="lowest framebuffer free (MiB)"),
    _m("fb_reserved", G, Kind.GAUGE_LAST, c.DCGM_FB_RESERVED, help="framebuffer reserved (MiB)"),
    # hardware faults
    _m(
        "xid_increase",
        G,
        Kind.INCREASE,
        c.GPU_XID_ERRORS,
        by=("xid",),
        help="XIDs counted in the window",
    ),
    _m(
        "xid_changed",
        G,
        Kind.CHANGED,
        c.DCGM_XID_ERRORS,
        help="sticky last-XID gauge changed in window",
    ),
    _m(
        "xid_window_max",
        G,
        Kind.GAUGE_MAX,
        c.DCGM_EXP_XID_COUNT,
        by=("xid",),
        help="XIDs in dcgm-exporter's count window (its windowed XID count), the most in the window",
    ),
    _m(
        "health_status",
        G,
        Kind.GAUGE_MAX,
        c.DCGM_EXP_HEALTH,
        by=("health_watch", "health_error_code"),
        help="DCGM health watch result (0 pass, 10 warn, 20 fail)",
    ),
    _m("xid_last", G, Kind.GAUGE_LAST, c.DCGM_XID_ERRORS, help="last XID (dcgm-exporter)"),
    _m(
        "row_remap_failure",
        G,
        Kind.GAUGE_MAX,
        c.DCGM_ROW_REMAP_FAILURE,
        help="row remap failed (1)",
    ),
    # throttling
    _m("sm_clock_avg", G, Kind.GAUGE_AVG, c.DCGM_SM_CLOCK, help="mean SM clock (MHz)"),
    _m("app_sm_clock", G, Kind.GAUGE_LAST, c.DCGM_APP_SM_CLOCK, help="base (application) SM clock"),
    _m("power_avg", G, Kind.GAUGE_AVG, c.DCGM_POWER_USAGE, help="mean power (W)"),
    _m("power_limit", G, Kind.GAUGE_LAST, c.DCGM_POWER_LIMIT, help="enforced power limit (W)"),
    _m("max_sm_clock", G, Kind.GAUGE_LAST, c.DCGM_MAX_SM_CLOCK, help="maximum SM clock (MHz)"),
    _m(
        "clock_reasons",
        G,
        Kind.GAUGE_LAST,
        c.DCGM_CLOCK_EVENT_REASONS,
        help="clock-event reasons now (NVML bitmask)",
    ),
    _m(
        "clock_events",
        G,
        Kind.GAUGE_MAX,
        c.DCGM_EXP_CLOCK_EVENTS,
        by=("clock_event",),
        help="clock events in dcgm-exporter's count window, by reason",
    ),
    _m(
        "power_violation",
        G,
        Kind.RATE,
        c.DCGM_POWER_VIOLATION,
        help="time throttled by the power cap (ns per s)",
    ),
    _m(
        "thermal_violation",
        G,
        Kind.RATE,
        c.DCGM_THERMAL_VIOLATION,
        help="time throttled by temperature (ns per s)",
    ),
    _m("temp_max", G, Kind.GAUGE_MAX, c.DCGM_GPU_TEMP, help="peak GPU temperature (C)"),
    _m("slowdown_temp", G, Kind.GAUGE_LAST, c.DCGM_SLOWDOWN_TEMP, help="slowdown temperature (C)"),
    _m(
        "throttle_active",
        G,
        Kind.GAUGE_AVG,
        c.GPU_CLOCK_EVENT_ACTIVE,
        matchers=Selector.any_of("reason", catalog.THROTTLE_REASONS),
        by=("reason",),
        help="share of the window a throttle reason was active",
    ),
    # PCIe
    _m("pcie_tx_avg", G, Kind.GAUGE_AVG, c.DCGM_PCIE_TX_BYTES, help="mean PCIe TX (B/s)"),
    _m("pcie_rx_avg", G, Kind.GAUGE_AVG, c.DCGM_PCIE_RX_BYTES, help="mean PCIe RX (B/s)"),
    # the best the link trained to: an idle GPU lowers its link to save power and raises it for
    # work, so the lowest reading is an idle moment's, not the link's (tests/scenarios/reality4.py)
    _m("pcie_gen", G, Kind.GAUGE_MAX, c.DCGM_PCIE_LINK_GEN, help="highest PCIe generation"),
    _m("pcie_width", G, Kind.GAUGE_MAX, c.DCGM_PCIE_LINK_WIDTH, help="highest PCIe width"),
    _m("pcie_max_gen", G, Kind.GAUGE_LAST, c.DCGM_PCIE_MAX_LINK_GEN, help="maximum PCIe generation"),
    _m("pcie_max_width", G, Kind.GAUGE_LAST, c.DCGM_PCIE_MAX_LINK_WIDTH, help="maximum PCIe width"),
    _m("pcie_capacity", G, Kind.GAUGE_MAX, c.GPU_PCIE_LINK_CAPACITY, help="PCIe capacity at its best (B/s)"),
    _m("pcie_replay_rate", G, Kind.RATE, c.DCGM_PCIE_REPLAY, help="PCIe replays per second"),
    _m("dram_active_avg", G, Kind.GAUGE_AVG, c.DCGM_DRAM_ACTIVE, help="mean HBM activity (0..1)"),
)
del E, G, c

BY_NAME: dict[str, Measure] = {m.name: m for m in MEASURES}

# Without any of these the diagnosis cannot say anything: exit 3, naming them. Each check
# runs on what it needs, so a GPU node without vLLM, or a page without a KV gauge, still counts.
REQUIRED: tuple[str, ...] = (
    "kv_usage_max",
    "waiting_max",
    "running_max",
    "gpu_util_avg",
    "gr_active_avg",
    "fb_used_max",
    "temp_max",
    "sm_clock_avg",
    "xid_last",
)

# The load and configuration compared with the baseline before the window (`changes`).
BASELINE: tuple[str, ...] = (
    "xid_changed",
    "itl_p50",
    "tpot_p50",
    "spec_accept",
    "request_rate",
    "arrival_rate",
    "arrival_prompt_mean",
    "arrival_prompt_p99",
    "waiting_slope",
    "prompt_mean",
    "prompt_p99",
    "output_mean",
    "prefix_hit",
    "start_time",
    "cache_config",
)


@dataclass(slots=True)
class Value:
    """One measure for one entity: the value, the labels that identify the entity, how it was got."""

    value: float
    labels: dict[str, str]
    query: str


@dataclass
class Measurements:
    """Everything fetched for one diagnosis: measure name -> values per entity."""

    values: dict[str, list[Value]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # measure -> why it could not be fetched
    baseline: dict[str, list[Value]] = field(default_factory=dict)  # BASELINE measures, the window before
    notes: list[str] = field(default_factory=list)  # values dropped (DCGM blanks, NaN, negative)
    sources: list[dict[str, str]] = field(default_factory=list)  # {source, status, detail}
    onsets: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)  # (id, scopes) -> time
    ended: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)  # recovered: when
    # seconds the window and the baseline span (None: not known, e.g. a bundle from before it)
    spans: tuple[float, float] | None = None

    def get(self, name: str) -> list[Value]:
        return self.values.get(name, [])

    def entities(self, name: str) -> dict[tuple[tuple[str, str], ...], Value]:
        return {entity_key(v.labels, BY_NAME[name].entity): v for v in self.get(name)}

    def has(self, name: str) -> bool:
        return bool(self.values.get(name))


GAUGES = frozenset({Kind.GAUGE_MAX, Kind.GAUGE_AVG, Kind.GAUGE_MIN, Kind.GAUGE_LAST})
SHARES = frozenset({Kind.RATIO, Kind.RATIO_RECENT, Kind.RATIO_BEFORE})  # increase(part) / increase(whole)
# what a reading in a unit can be at most (a share of one, a percentage); a hair of rounding over
BOUNDS = {"ratio": 1.0, "percent": 100.0}
ROUNDING = 1e-6


def unusable(measure: Measure, value: float) -> str | None:
    """Why a number cannot be read (None: it can): not finite; for a GPU reading (gauges and
    counters, not slopes) negative or one of DCGM's blank sentinels (a field the driver has no
    value for reads at or above 2^47); for a ratio or a percentage, or a share of two counters,
    outside what it can be (a KV usage of 1.7, a utilisation of -4)."""
    if not math.isfinite(value):
        return "not a number"
    if measure.entity is Entity.GPU and measure.kind is not Kind.DERIV:
        if catalog.is_dcgm_blank(value):
            return "a DCGM blank sentinel"
        if value < 0:
            return "negative"
    top = 1.0 if measure.kind in SHARES else None
    if measure.kind in GAUGES and not measure.denominator and measure.signals:
        top = BOUNDS.get(measure.signals[0].unit)
    if top is not None and not -ROUNDING <= value <= top * (1 + ROUNDING):
        return f"impossible: {value:g} outside 0..{top:g}"
    return None


def usable(measure: Measure, value: float) -> bool:
    """A number the checks may read (`unusable` says why not)."""
    return unusable(measure, value) is None


class _Reading(Protocol):
    @property
    def value(self) -> float: ...


V = TypeVar("V", bound=_Reading)


def readable(measure: Measure, values: Sequence[V]) -> tuple[list[V], str | None]:
    """The values (anything with a float `.value`) the checks may read, and the note for those
    dropped (`dropped_note`), each judged once."""
    kept, reasons = [], []
    for v in values:
        why = unusable(measure, v.value)
        if why is None:
            kept.append(v)
        else:
            reasons.append(why)
    return kept, _note(measure, reasons)


def dropped_note(measure: Measure, values: Sequence[float]) -> str | None:
    """One note for the values of a measure that cannot be read, with why (None: all can)."""
    return _note(measure, [why for v in values if (why := unusable(measure, v)) is not None])


def _note(measure: Measure, reasons: list[str]) -> str | None:
    if not reasons:
        return None
    said = "; ".join(dict.fromkeys(reasons))
    return f"{measure.name}: {len(reasons)} value(s) dropped ({said})"


def entity_key(labels: dict[str, str], entity: Entity) -> tuple[tuple[str, str], ...]:
    """The identifying labels of an entity, in a stable order (missing ones left out)."""
    return tuple([(k, v) for k in ENTITY_LABELS[entity] if (v := labels.get(k))])


Fetch = Callable[[Sequence[Measure]], Measurements]
