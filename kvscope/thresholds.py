"""The thresholds table: every number an alert, a dashboard line or a diagnosis check uses.

Changed here, it changes the alert rule, the dashboard's red line and the diagnosis together.
Sources: the seeds' incident reviews (000: KV cache avalanche; 002: alert set; 004: funnel of
latency losses) and what vLLM's own numbers mean.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

DEFAULT = "default"


@dataclass(frozen=True)
class Threshold:
    """A named limit: value, unit, how long it must hold (`for_`), and why it is set there."""

    key: str
    value: float
    unit: str
    why: str
    for_: str = ""  # Prometheus duration the condition must hold before it counts

    @property
    def bounds(self) -> tuple[float, float]:
        """The values a user may set: ratios in (0, 1], percentages in (0, 100], else > 0."""
        return {"ratio": (0.0, 1.0), "percent": (0.0, 100.0)}.get(self.unit, (0.0, float("inf")))


KV_USAGE_WARNING = Threshold(
    "kv_usage_warning",
    0.85,
    "ratio",
    "KV pool nearly full: the next burst of long prompts starts preemptions.",
    for_="5m",
)
KV_USAGE_CRITICAL = Threshold(
    "kv_usage_critical",
    0.90,
    "ratio",
    "Seed 000 triage step 1: KV usage above 90 % is where the avalanche began.",
    for_="2m",
)
PREEMPTION_RATE = Threshold(
    "preemption_rate",
    0.05,
    "preemptions/s",
    "Sustained preemptions: requests recompute their prefill, TTFT and throughput suffer.",
    for_="5m",
)
QUEUE_BACKLOG = Threshold(
    "queue_backlog",
    100,
    "requests",
    "Seed 002 VLLMQueueBacklog: more than 100 waiting requests means capacity is short.",
    for_="3m",
)
QUEUE_TIME_P99 = Threshold(
    "queue_time_p99",
    1.0,
    "seconds",
    "Requests wait over a second before the engine schedules them.",
    for_="5m",
)
TTFT_P99 = Threshold(
    "ttft_p99",
    3.0,
    "seconds",
    "Seed 002 TTFTHigh: p99 time to first token above 3 s.",
    for_="5m",
)
TTFT_TAIL_RATIO = Threshold(
    "ttft_tail_ratio",
    10.0,
    "times",
    "p99 TTFT this many times the median: a few requests block the rest (head-of-line).",
)
TTFT_TAIL_FLOOR = Threshold(
    "ttft_tail_floor",
    0.25,
    "seconds",
    "A p99 TTFT below this is not a head-of-line problem however it compares to the median.",
)
QUEUE_GROWTH = Threshold(
    "queue_growth",
    0.01,
    "requests/s",
    "Waiting requests growing faster than this over the window: arrivals outrun service.",
)
THROUGHPUT_FLAT = Threshold(
    "throughput_flat",
    0.8,
    "ratio",
    "Recent throughput at least this share of the window's: it stopped rising with the load.",
)
ITL_P99 = Threshold("itl_p99", 0.2, "seconds", "Inter-token latency p99 above 200 ms: decode is the limit.")
ITL_STALL_RATIO = Threshold(
    "itl_stall_ratio",
    5.0,
    "times",
    "p99 inter-token latency this many times the median: decode steps stall behind long prefills "
    "(with a long-prompt tail, head-of-line blocking even when everything queues).",
)
LONG_PROMPT_TOKENS = Threshold(
    "long_prompt_tokens",
    4096,
    "tokens",
    "Prompts this long monopolise a prefill step (seed 000: 2 % very long prompts).",
)
PREFIX_HIT_FLOOR = Threshold(
    "prefix_hit_floor",
    0.75,
    "ratio",
    "Seed 004: when the KV-cache hit rate falls below 75 %, look at the cache first.",
    for_="10m",
)
PREFIX_HIT_DROP = Threshold(
    "prefix_hit_drop",
    0.5,
    "ratio",
    "Hit rate fell to less than half of what it was before: shared prefixes stopped sharing.",
)
ERROR_RATIO = Threshold(
    "error_ratio",
    0.05,
    "ratio",
    "More than 5 % of requests finish with an error or abort.",
    for_="5m",
)
GPU_UTIL_FLOOR = Threshold(
    "gpu_util_floor",
    20,
    "percent",
    "Seed 002 GPUUtilLow: below 20 % for 10 minutes the GPU is paid for and idle.",
    for_="10m",
)
IDLE_SPARE_MACHINES = Threshold(
    "idle_spare_machines",
    1,
    "count",
    "Whole machines idle beside busy ones that are warm spares (N+1 redundancy), not a cost finding; "
    "more are idle capacity, whatever the fleet's size (a count, not a share: busy machines added "
    "beside them change nothing). Half the fleet's GPUs idle is idle capacity at any size.",
)
GPU_UTIL_BUSY = Threshold("gpu_util_busy", 80, "percent", "GPU busy: saturation, not idleness, limits throughput.")
GPU_MEMORY_FULL = Threshold(
    "gpu_memory_full",
    0.95,
    "ratio",
    "Seed 002 GPUMemoryFull: framebuffer above 95 %, one allocation from CUDA OOM.",
    for_="2m",
)
GPU_MEMORY_NEAR_OOM = Threshold(
    "gpu_memory_near_oom",
    0.03,
    "ratio",
    "Less than this share of the card left free: one allocation from OOM.",
)
GPU_MEMORY_GROWTH = Threshold(
    "gpu_memory_growth",
    0.5,
    "MiB/s",
    "Framebuffer use growing this fast for the whole window: a leak (vLLM's own use is flat).",
)
GPU_MEMORY_OVER_BUDGET = Threshold(
    "gpu_memory_over_budget",
    0.03,
    "ratio",
    "Memory used above the engine's gpu_memory_utilization by more than this share of the "
    "card: a leak or a co-located process (vLLM reserves its share up front, so 90 % is normal).",
    for_="5m",
)
GPU_TEMP_HIGH = Threshold("gpu_temp_high", 85, "C", "GPU core temperature where H100/H200 start to slow their clocks.")
POWER_AT_LIMIT = Threshold(
    "power_at_limit", 0.97, "ratio", "Power draw at the enforced limit: clocks are being capped."
)
CLOCK_BELOW_BASE = Threshold(
    "clock_below_base",
    0.9,
    "ratio",
    "SM clock under 90 % of the base (application) clock while busy: throttled.",
    for_="5m",
)
CLOCK_BELOW_MAX = Threshold(
    "clock_below_max",
    0.7,
    "ratio",
    "SM clock under 70 % of the GPU's maximum while busy and at its power limit or slowdown "
    "temperature: held down, not trimmed (power management under full load takes a few hundred MHz "
    "off the boost clock; seed 004's incident was 1.4 -> 1.1 GHz). Default counters carry no base "
    "clock, so this is the check that works on them.",
    for_="5m",
)
GPU_TEMP_MARGIN = Threshold(
    "gpu_temp_margin",
    2,
    "C",
    "Within this many degrees of the model's slowdown temperature (datasheet, or "
    "the exported slowdown temperature where there is one) the GPU is about to, or does, slow its clocks.",
)
PCIE_ACHIEVABLE_SHARE = Threshold(
    "pcie_achievable_share",
    0.82,
    "ratio",
    "The share of a link's nominal rate that transfers reach: TLP headers, flow control and DLLPs "
    "take the rest (Gen4 x16 moves about 26 of its 31.5 GB/s with 256-byte payloads). "
    "pcie_saturation is measured against this, not the nominal rate no link reaches.",
)
PCIE_SATURATION = Threshold(
    "pcie_saturation",
    0.8,
    "ratio",
    "PCIe traffic above 80 % of what the link achieves (seed 002: host-device copies stalled).",
    for_="5m",
)
PCIE_REPLAY_RATE = Threshold(
    "pcie_replay_rate", 1.0, "replays/s", "PCIe replays: the link is retrying, often degraded."
)
DRAM_ACTIVE_HIGH = Threshold(
    "dram_active_high", 0.7, "ratio", "HBM busy this share of the time: decode is bandwidth-bound."
)
THROTTLE_SHARE = Threshold(
    "throttle_share",
    0.3,
    "ratio",
    "A power or thermal clock-event reason active this share of the window.",
)
IMBALANCE_IDLE_KV = Threshold(
    "imbalance_idle_kv",
    0.2,
    "ratio",
    "A sibling engine of one model is idle: nothing waiting and its KV pool under this share, while "
    "another is saturated; the fix is balancing (vLLM's DP load balancing, the router), not capacity.",
)
CHANGE_RATIO = Threshold(
    "change_ratio",
    1.3,
    "factor",
    "A load signal (request rate, prompt or output length) moved by this factor against the baseline "
    "window: a change worth naming as an incident's trigger (seed 000: prompts 1.8x longer).",
)
CHANGE_HIT_POINTS = Threshold(
    "change_hit_points",
    0.2,
    "ratio",
    "The prefix-cache hit rate moved by this many points against the baseline window.",
)
GATEWAY_OVERHEAD_SHARE = Threshold(
    "gateway_overhead_share",
    0.2,
    "ratio",
    "Seed 004: over 20 % of latency spent before the engine (protocol, auth, tokenisation).",
)
ADMISSION_REJECTION_RATE = Threshold(
    "admission_rejection_rate",
    0.01,
    "requests/s",
    "vLLM's API server refuses requests once its queue cap (--max-num-queued-reqs / -tokens) is reached: "
    "every refusal is a client error, so a sustained trickle pages.",
    for_="2m",
)
KV_TRANSFER_FAILURE_RATE = Threshold(
    "kv_transfer_failure_rate",
    0.01,
    "failures/s",
    "KV transfers (NIXL, offload) failing: the request recomputes its prefill or fails.",
    for_="5m",
)
TARGET_DOWN_FOR = Threshold("target_down", 0.5, "bool", "A scrape target or exporter has not answered.", for_="2m")
ENGINE_STALL = Threshold(
    "engine_stall",
    1,
    "requests",
    "Requests in flight (running or waiting) while the engine prefills and generates nothing: a hang "
    "its /health does not see (vllm-project/vllm#53130; gonka-ai/gonka#1421: 5-22 minutes in production).",
    for_="5m",
)
# speculative decoding (vllm-project/vllm#8439: turned on, it decoded 11 % slower than off;
# #56797: acceptance 2.82 of a golden 3.51 at k=5, lower on production traffic). Judged against the
# engine's own time before: per-token time up by this much while the step time is not ...
SPEC_TPOT_RISE = Threshold(
    "spec_tpot_rise",
    1.5,
    "times",
    "Per-token time this much above its baseline while the engine's steps are not slower: each step "
    "yields fewer tokens, its drafts are rejected.",
)
SPEC_STEP_FLAT = Threshold(
    "spec_step_flat",
    1.25,
    "times",
    "Inter-token (step) time at most this much above its baseline for a per-token rise to be the drafts'.",
)
SPEC_ACCEPT_FALL = Threshold(
    "spec_accept_fall",
    0.6,
    "ratio",
    "Draft-token acceptance at most this share of its baseline: the drafts stopped matching the traffic.",
)


def all_thresholds() -> tuple[Threshold, ...]:
    """Every threshold's default, in definition order."""
    return tuple(v for v in list(globals().values()) if isinstance(v, Threshold))


class Thresholds:
    """The effective table: the defaults above with a user's overrides (kvscope.yaml).

    Looked up by the default record, so a key is never typed twice:
    `limits[t.KV_USAGE_CRITICAL].value`, or `limits.value(t.KV_USAGE_CRITICAL)`.
    """

    def __init__(self, overrides: Mapping[str, tuple[float, str | None]] | None = None, source: str = DEFAULT) -> None:
        known = {t.key: t for t in all_thresholds()}
        self._table = dict(known)
        self._sources = dict.fromkeys(known, DEFAULT)
        for key, (value, for_) in (overrides or {}).items():
            if key not in known:
                raise KeyError(key)
            self._table[key] = replace(known[key], value=value, for_=known[key].for_ if for_ is None else for_)
            self._sources[key] = source

    def __getitem__(self, default: Threshold) -> Threshold:
        return self._table[default.key]

    def value(self, default: Threshold) -> float:
        return self._table[default.key].value

    def source(self, default: Threshold) -> str:
        """Where the effective value came from: "default" or the config file."""
        return self._sources[default.key]

    def __iter__(self) -> Iterator[Threshold]:
        return iter(self._table.values())


DEFAULTS = Thresholds()
