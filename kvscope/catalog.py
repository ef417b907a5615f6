"""The signal catalog: every metric name kvscope reads or writes, defined once.

Exporter, serving, dashboards, alerts, diagnosis and docs import these records; no other
module spells a metric name. `name` is the name as written in PromQL (counters with their
`_total` suffix, histograms as the family name without `_bucket/_sum/_count`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


class Source(StrEnum):
    VLLM = "vllm"
    DCGM = "dcgm"
    KVSCOPE = "kvscope"
    RULE = "rule"  # recorded by Prometheus from kvscope's generated rules
    PROMETHEUS = "prometheus"  # written by Prometheus itself for every scrape


@dataclass(frozen=True)
class Signal:
    """One metric: its PromQL name, type, unit, meaning, where it comes from, older names."""

    name: str
    kind: Kind
    unit: str
    help: str
    source: Source
    labels: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # older names for the same series (renamed upstream)
    legacy: bool = False  # removed upstream: read from old deployments, never written
    # bucket bounds: what kvscope writes, or (vLLM) the upstream defaults an SLO must align with
    buckets: tuple[float, ...] = ()

    @property
    def family(self) -> str:
        """The name to register with prometheus_client (it appends `_total` to counters)."""
        if self.kind is Kind.COUNTER and self.name.endswith("_total"):
            return self.name.removesuffix("_total")
        return self.name  # info series are value-1 gauges under their full name, as in vLLM

    @property
    def names(self) -> tuple[str, ...]:
        """The current name first, then every alias (for `A or B` fallbacks)."""
        return (self.name, *self.aliases)

    @property
    def subsystem(self) -> str:
        """The `<subsystem>` part of a `kvscope_<subsystem>_<name>_<unit>` name."""
        if self.source is Source.KVSCOPE:
            return self.name.split("_")[1]
        return self.source.value


VLLM_NAMESPACE = "vllm:"  # every vLLM series starts with it
_VLLM = ("model_name", "engine")
_DCGM = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

# Millisecond-resolution latency buckets: vLLM's phase histograms start at 0.3 s, too coarse
# for fast GPUs and for the CPU demo model.
FINE_LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
)  # fmt: skip


# vLLM 0.32's default bucket bounds (vllm/v1/metrics/buckets.py); `--custom-histogram-buckets`
# can change them, so an SLO threshold is checked against these only as the default.
VLLM_TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
VLLM_REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def _vllm(
    name: str,
    kind: Kind,
    unit: str,
    help_: str,
    *labels: str,
    aliases: tuple[str, ...] = (),
    legacy: bool = False,
    buckets: tuple[float, ...] = (),
) -> Signal:
    return Signal(name, kind, unit, help_, Source.VLLM, (*_VLLM, *labels), aliases, legacy, buckets)


def _dcgm(name: str, kind: Kind, unit: str, help_: str, *labels: str, aliases: tuple[str, ...] = ()) -> Signal:
    return Signal(name, kind, unit, help_, Source.DCGM, (*_DCGM, *labels), aliases)


def _own(name: str, kind: Kind, unit: str, help_: str, *labels: str, buckets: tuple[float, ...] = ()) -> Signal:
    return Signal(name, kind, unit, help_, Source.KVSCOPE, labels, buckets=buckets)


G, C, H, I = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM, Kind.INFO  # noqa: E741

# --- vLLM V1 engine (vllm/v1/metrics/loggers.py), with V0 / pre-rename aliases -------------

VLLM_REQUESTS_RUNNING = _vllm("vllm:num_requests_running", G, "requests", "Requests in model execution batches.")
VLLM_REQUESTS_WAITING = _vllm("vllm:num_requests_waiting", G, "requests", "Requests waiting to be scheduled.")
VLLM_REQUESTS_WAITING_BY_REASON = _vllm(
    "vllm:num_requests_waiting_by_reason",
    G,
    "requests",
    "Waiting requests by reason (capacity: no KV space; deferred).",
    "reason",
)
VLLM_KV_CACHE_USAGE = _vllm(
    "vllm:kv_cache_usage_perc",
    G,
    "ratio",
    "KV-cache pool in use, 0..1 (1 = full).",
    aliases=("vllm:gpu_cache_usage_perc",),
)
VLLM_ENGINE_SLEEP_STATE = _vllm(
    "vllm:engine_sleep_state",
    G,
    "state",
    "Engine sleep state (awake / weights offloaded).",
    "sleep_state",
)
VLLM_CACHE_CONFIG_INFO = _vllm(
    "vllm:cache_config_info",
    G,
    "info",
    "KV-cache configuration as labels (block_size, gpu_memory_utilization, num_gpu_blocks, ...).",
    "block_size",
    "gpu_memory_utilization",
    "cache_dtype",
    "num_gpu_blocks",
    "enable_prefix_caching",
)
VLLM_NUM_PREEMPTIONS = _vllm(
    "vllm:num_preemptions_total",
    C,
    "preemptions",
    "Preemptions: a running request evicted from the KV cache (V1 recomputes it later).",
)
VLLM_PROMPT_TOKENS = _vllm("vllm:prompt_tokens_total", C, "tokens", "Prefill tokens processed.")
VLLM_GENERATION_TOKENS = _vllm("vllm:generation_tokens_total", C, "tokens", "Generation tokens produced.")
VLLM_PROMPT_TOKENS_BY_SOURCE = _vllm(
    "vllm:prompt_tokens_by_source_total",
    C,
    "tokens",
    "Prompt tokens by source (local_compute, local_cache_hit, external_kv_transfer).",
    "source",
)
VLLM_PROMPT_TOKENS_CACHED = _vllm("vllm:prompt_tokens_cached_total", C, "tokens", "Prompt tokens served from a cache.")
VLLM_REQUEST_SUCCESS = _vllm(
    "vllm:request_success_total",
    C,
    "requests",
    "Finished requests by finish reason.",
    "finished_reason",
)
VLLM_PREFIX_CACHE_QUERIES = _vllm(
    "vllm:prefix_cache_queries_total",
    C,
    "tokens",
    "Prefix-cache lookups (tokens).",
    aliases=("vllm:gpu_prefix_cache_queries_total",),
)
VLLM_PREFIX_CACHE_HITS = _vllm(
    "vllm:prefix_cache_hits_total",
    C,
    "tokens",
    "Prefix-cache hits (tokens).",
    aliases=("vllm:gpu_prefix_cache_hits_total",),
)
VLLM_EXTERNAL_PREFIX_CACHE_QUERIES = _vllm(
    "vllm:external_prefix_cache_queries_total",
    C,
    "tokens",
    "External (KV connector) prefix-cache lookups (tokens).",
)
VLLM_EXTERNAL_PREFIX_CACHE_HITS = _vllm(
    "vllm:external_prefix_cache_hits_total",
    C,
    "tokens",
    "External (KV connector) prefix-cache hits (tokens).",
)
VLLM_ADMISSION_REJECTIONS = _vllm(
    "vllm:admission_rejections_total",
    C,
    "requests",
    "Requests the engine refused to admit.",
    "reason",
)
VLLM_SPEC_DECODE_DRAFTS = _vllm("vllm:spec_decode_num_drafts_total", C, "drafts", "Speculative-decoding drafts.")
VLLM_SPEC_DECODE_DRAFT_TOKENS = _vllm("vllm:spec_decode_num_draft_tokens_total", C, "tokens", "Draft tokens proposed.")
VLLM_SPEC_DECODE_ACCEPTED_TOKENS = _vllm(
    "vllm:spec_decode_num_accepted_tokens_total", C, "tokens", "Draft tokens accepted."
)
VLLM_SPEC_DECODE_ACCEPTED_PER_POS = _vllm(
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    C,
    "tokens",
    "Draft tokens accepted per draft position.",
    "position",
)

VLLM_TTFT = _vllm(
    "vllm:time_to_first_token_seconds",
    H,
    "seconds",
    "Time to first token (arrival to first token).",
    buckets=VLLM_TTFT_BUCKETS,
)
VLLM_ITL = _vllm(
    "vllm:inter_token_latency_seconds",
    H,
    "seconds",
    "Latency between consecutive output tokens.",
    aliases=("vllm:time_per_output_token_seconds",),
    buckets=VLLM_ITL_BUCKETS,
)
VLLM_TPOT = _vllm(
    "vllm:request_time_per_output_token_seconds",
    H,
    "seconds",
    "Per-request mean time per output token.",
)
VLLM_E2E_LATENCY = _vllm(
    "vllm:e2e_request_latency_seconds",
    H,
    "seconds",
    "End-to-end request latency.",
    buckets=VLLM_REQUEST_LATENCY_BUCKETS,
)
VLLM_QUEUE_TIME = _vllm(
    "vllm:request_queue_time_seconds",
    H,
    "seconds",
    "Time spent waiting in the queue.",
    buckets=VLLM_REQUEST_LATENCY_BUCKETS,
)
VLLM_INFERENCE_TIME = _vllm(
    "vllm:request_inference_time_seconds",
    H,
    "seconds",
    "Time from first schedule to finish.",
    buckets=VLLM_REQUEST_LATENCY_BUCKETS,
)
VLLM_PREFILL_TIME = _vllm(
    "vllm:request_prefill_time_seconds",
    H,
    "seconds",
    "Prefill phase time (lowest bucket 0.3 s).",
    buckets=VLLM_REQUEST_LATENCY_BUCKETS,
)
VLLM_DECODE_TIME = _vllm(
    "vllm:request_decode_time_seconds",
    H,
    "seconds",
    "Decode phase time (lowest bucket 0.3 s).",
    buckets=VLLM_REQUEST_LATENCY_BUCKETS,
)
VLLM_REQUEST_PROMPT_TOKENS = _vllm("vllm:request_prompt_tokens", H, "tokens", "Prompt length per request.")
VLLM_REQUEST_GENERATION_TOKENS = _vllm("vllm:request_generation_tokens", H, "tokens", "Generated tokens per request.")
VLLM_REQUEST_MAX_TOKENS = _vllm("vllm:request_params_max_tokens", H, "tokens", "The max_tokens parameter per request.")
VLLM_REQUEST_PARAMS_N = _vllm("vllm:request_params_n", H, "sequences", "The n parameter.")
VLLM_REQUEST_MAX_GENERATION_TOKENS = _vllm(
    "vllm:request_max_num_generation_tokens", H, "tokens", "Max generation tokens per request."
)
VLLM_REQUEST_PREFILL_KV_COMPUTED = _vllm(
    "vllm:request_prefill_kv_computed_tokens",
    H,
    "tokens",
    "Prefill tokens computed (not served from cache) per request.",
)
VLLM_REQUEST_PREEMPTIONS = _vllm("vllm:request_num_preemptions", H, "preemptions", "Preemptions per finished request.")
VLLM_ITERATION_TOKENS = _vllm("vllm:iteration_tokens_total", H, "tokens", "Tokens per engine step (a histogram).")

# Removed with the V0 engine (V1 preempts by recompute and never swaps). Read only.
VLLM_REQUESTS_SWAPPED = _vllm(
    "vllm:num_requests_swapped",
    G,
    "requests",
    "V0: requests swapped out to CPU memory.",
    legacy=True,
)
VLLM_CPU_CACHE_USAGE = _vllm(
    "vllm:cpu_cache_usage_perc",
    G,
    "ratio",
    "V0: CPU swap-space KV cache in use, 0..1.",
    legacy=True,
)
VLLM_GPU_PREFIX_CACHE_HIT_RATE = _vllm(
    "vllm:gpu_prefix_cache_hit_rate",
    G,
    "ratio",
    "V0: GPU prefix-cache hit rate, 0..1.",
    legacy=True,
)
VLLM_CPU_PREFIX_CACHE_HIT_RATE = _vllm(
    "vllm:cpu_prefix_cache_hit_rate",
    G,
    "ratio",
    "V0: CPU prefix-cache hit rate, 0..1.",
    legacy=True,
)
VLLM_TIME_IN_QUEUE = _vllm(
    "vllm:time_in_queue_requests",
    H,
    "seconds",
    "V0: time requests spent in the queue.",
    legacy=True,
)
VLLM_AVG_PROMPT_THROUGHPUT = _vllm(
    "vllm:avg_prompt_throughput_toks_per_s",
    G,
    "tokens/s",
    "V0: average prefill throughput.",
    legacy=True,
)
VLLM_AVG_GENERATION_THROUGHPUT = _vllm(
    "vllm:avg_generation_throughput_toks_per_s",
    G,
    "tokens/s",
    "V0: average generation throughput.",
    legacy=True,
)

# --- dcgm-exporter names (default counters + the fields kvscope's NVML backend maps onto) --

DCGM_SM_CLOCK = _dcgm("DCGM_FI_DEV_SM_CLOCK", G, "MHz", "SM clock frequency.")
DCGM_MEM_CLOCK = _dcgm("DCGM_FI_DEV_MEM_CLOCK", G, "MHz", "Memory clock frequency.")
DCGM_APP_SM_CLOCK = _dcgm(
    "DCGM_FI_DEV_APP_SM_CLOCK",
    G,
    "MHz",
    "Application (base) SM clock: the floor without throttling.",
)
DCGM_MAX_SM_CLOCK = _dcgm("DCGM_FI_DEV_MAX_SM_CLOCK", G, "MHz", "Maximum SM clock.")
DCGM_MEMORY_TEMP = _dcgm("DCGM_FI_DEV_MEMORY_TEMP", G, "C", "HBM temperature.")
DCGM_GPU_TEMP = _dcgm("DCGM_FI_DEV_GPU_TEMP", G, "C", "GPU temperature.")
DCGM_SLOWDOWN_TEMP = _dcgm("DCGM_FI_DEV_SLOWDOWN_TEMP", G, "C", "Temperature at which the GPU slows its clocks.")
DCGM_POWER_USAGE = _dcgm("DCGM_FI_DEV_POWER_USAGE", G, "W", "Power draw.")
DCGM_POWER_LIMIT = _dcgm("DCGM_FI_DEV_POWER_MGMT_LIMIT", G, "W", "Enforced power limit.")
DCGM_TOTAL_ENERGY = _dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", C, "mJ", "Energy since the driver loaded.")
DCGM_PCIE_REPLAY = _dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", C, "replays", "PCIe retries (link errors).")
DCGM_GPU_UTIL = _dcgm("DCGM_FI_DEV_GPU_UTIL", G, "percent", "GPU utilisation (time busy).")
DCGM_MEM_COPY_UTIL = _dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", G, "percent", "Memory utilisation.")
DCGM_ENC_UTIL = _dcgm("DCGM_FI_DEV_ENC_UTIL", G, "percent", "Encoder utilisation.")
DCGM_DEC_UTIL = _dcgm("DCGM_FI_DEV_DEC_UTIL", G, "percent", "Decoder utilisation.")
DCGM_XID_ERRORS = _dcgm(
    "DCGM_FI_DEV_XID_ERRORS",
    G,
    "xid",
    "Value of the last XID error (sticky: repeats are invisible; compare changes, not increase).",
    "err_code",
    "err_msg",
    aliases=("DCGM_FI_DEV_XID_ERROR",),
)
DCGM_FB_FREE = _dcgm("DCGM_FI_DEV_FB_FREE", G, "MiB", "Framebuffer memory free.")
DCGM_FB_USED = _dcgm("DCGM_FI_DEV_FB_USED", G, "MiB", "Framebuffer memory used.")
DCGM_FB_RESERVED = _dcgm("DCGM_FI_DEV_FB_RESERVED", G, "MiB", "Framebuffer memory reserved.")
DCGM_NVLINK_BANDWIDTH = _dcgm("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", C, "bytes", "NVLink bandwidth counter, all links.")
DCGM_UNCORRECTABLE_REMAPPED_ROWS = _dcgm(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", C, "rows", "Rows remapped for uncorrectable errors."
)
DCGM_CORRECTABLE_REMAPPED_ROWS = _dcgm(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", C, "rows", "Rows remapped for correctable errors."
)
DCGM_ROW_REMAP_FAILURE = _dcgm(
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", G, "bool", "1 when a row remap failed: the GPU needs service."
)
DCGM_ECC_SBE_TOTAL = _dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", C, "errors", "Single-bit ECC errors (volatile).")
DCGM_ECC_DBE_TOTAL = _dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", C, "errors", "Double-bit ECC errors (volatile).")
DCGM_GR_ENGINE_ACTIVE = _dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", G, "ratio", "Graphics/compute engine active, 0..1.")
DCGM_TENSOR_ACTIVE = _dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", G, "ratio", "Tensor pipes active, 0..1.")
DCGM_DRAM_ACTIVE = _dcgm("DCGM_FI_PROF_DRAM_ACTIVE", G, "ratio", "HBM interface active, 0..1 (decode is bound here).")
DCGM_PCIE_TX_BYTES = _dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", G, "bytes/s", "PCIe bytes sent by the GPU per second.")
DCGM_PCIE_RX_BYTES = _dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", G, "bytes/s", "PCIe bytes received by the GPU per second.")
DCGM_PCIE_LINK_GEN = _dcgm("DCGM_FI_DEV_PCIE_LINK_GEN", G, "generation", "Current PCIe gen.")
DCGM_PCIE_LINK_WIDTH = _dcgm("DCGM_FI_DEV_PCIE_LINK_WIDTH", G, "lanes", "Current PCIe width.")
DCGM_PCIE_MAX_LINK_GEN = _dcgm("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", G, "generation", "Maximum PCIe generation of the link.")
DCGM_PCIE_MAX_LINK_WIDTH = _dcgm("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", G, "lanes", "Maximum PCIe width of the link.")
DCGM_CLOCK_EVENT_REASONS = _dcgm(
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    G,
    "bitmask",
    "Why clocks are held down (NVML clocks-event bitmask).",
    aliases=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
)
DCGM_POWER_VIOLATION = _dcgm("DCGM_FI_DEV_POWER_VIOLATION", C, "ns", "Time throttled by the power cap.")
DCGM_THERMAL_VIOLATION = _dcgm("DCGM_FI_DEV_THERMAL_VIOLATION", C, "ns", "Time throttled by temperature.")
DCGM_EXP_XID_COUNT = _dcgm(
    "DCGM_EXP_XID_ERRORS_COUNT",
    G,
    "errors",
    "XIDs seen in the exporter's window, by XID.",
    "xid",
    "window_size_in_ms",
)
DCGM_EXP_HEALTH = _dcgm(
    "DCGM_EXP_GPU_HEALTH_STATUS",
    G,
    "result",
    "DCGM passive health watch result: 0 pass, 10 warn, 20 fail (dcgm-exporter 4.x).",
    "health_watch",
    "health_error_code",
)
DCGM_EXP_CLOCK_EVENTS = _dcgm(
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    G,
    "events",
    "Clock events in the exporter's window.",
    "clock_event",
)

# --- label values that rules and checks select on ------------------------------------------

# vLLM's finished_reason values: requests that failed, and those that finished as asked.
FINISHED_FAILED = ("abort", "error")
FINISHED_OK = ("stop", "length", "repetition")
# nvmlClocksEventReason* bits (nvml.h; DCGM_FI_DEV_CLOCKS_EVENT_REASONS is the same bitmask) and
# the `reason` label kvscope_gpu_clock_event_active gives each.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# DCGM's blank values (dcgm_structs.h DCGM_INT64_BLANK .. and DCGM_FP64_BLANK): a field the
# driver has no value for reads at or above these; they are never values.
DCGM_BLANK_FLOOR = 140737488355328.0
# The reasons that mean "held down by power or temperature" (the others are by design).
THROTTLE_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)

# --- kvscope's own: serving (stat-logger plugin + gateway) -------------------------------

_REQ = ("model_name",)
_QOS = ("model_name", "tenant", "priority_class")

REQUEST_PREFILL_SECONDS = _own(
    "kvscope_request_prefill_seconds",
    H,
    "seconds",
    "Per-request prefill time (ms buckets).",
    *_REQ,
    buckets=FINE_LATENCY_BUCKETS,
)
REQUEST_DECODE_SECONDS = _own(
    "kvscope_request_decode_seconds",
    H,
    "seconds",
    "Per-request decode time (ms buckets).",
    *_REQ,
    buckets=FINE_LATENCY_BUCKETS,
)
REQUEST_QUEUE_SECONDS = _own(
    "kvscope_request_queue_seconds",
    H,
    "seconds",
    "Per-request time in the engine queue, by tenant and priority class.",
    *_QOS,
    buckets=FINE_LATENCY_BUCKETS,
)
REQUEST_TTFT_SECONDS = _own(
    "kvscope_request_ttft_seconds",
    H,
    "seconds",
    "Time to first token, by tenant and priority class.",
    *_QOS,
    buckets=FINE_LATENCY_BUCKETS,
)
REQUEST_GATEWAY_SECONDS = _own(
    "kvscope_request_gateway_seconds",
    H,
    "seconds",
    "Time a request spends in the gateway before the engine (auth, limits, tokenisation).",
    *_REQ,
    buckets=FINE_LATENCY_BUCKETS,
)
CACHE_PREFIX_HIT_RATIO = _own(
    "kvscope_cache_prefix_hit_ratio",
    G,
    "ratio",
    "Prefix-cache hit rate over a sliding window (hit tokens / queried tokens).",
    *_REQ,
)
CACHE_CAPACITY_TOKENS = _own("kvscope_cache_capacity_tokens", G, "tokens", "KV-cache pool capacity in tokens.", *_REQ)
CACHE_BYTES_PER_TOKEN = _own(
    "kvscope_cache_bytes_per_token",
    G,
    "bytes",
    "KV-cache bytes per token (2 x layers x kv_heads x head_dim x dtype bytes).",
    *_REQ,
)
ENGINE_CONFIG_INFO = _own(
    "kvscope_engine_config_info",
    I,
    "info",
    "Effective engine configuration (profile, block size, budgets, KV dtype, ...).",
    "model_name",
    "profile",
    "setting",
    "value",
)
GATEWAY_REQUESTS = _own(
    "kvscope_gateway_requests_total",
    C,
    "requests",
    "Requests admitted by the gateway.",
    "tenant",
    "tier",
    "priority_class",
)
GATEWAY_REJECTIONS = _own(
    "kvscope_gateway_rejections_total",
    C,
    "requests",
    "Requests refused by the gateway.",
    "reason",
    "tenant",
)
GATEWAY_TOKENS = _own(
    "kvscope_gateway_tokens_total",
    C,
    "tokens",
    "Tokens by tenant (prompt, completion).",
    "tenant",
    "kind",
)
GATEWAY_QUOTA_REMAINING = _own(
    "kvscope_gateway_quota_remaining_tokens",
    G,
    "tokens",
    "Tokens left in the tenant's per-minute bucket.",
    "tenant",
)
GATEWAY_QUOTA_LIMIT = _own(
    "kvscope_gateway_quota_limit_tokens",
    G,
    "tokens",
    "Tenant's per-minute token budget.",
    "tenant",
)
GATEWAY_INFLIGHT = _own("kvscope_gateway_inflight_requests", G, "requests", "Requests in flight, by tenant.", "tenant")
GATEWAY_LANE_WAITING = _own(
    "kvscope_gateway_lane_waiting_requests",
    G,
    "requests",
    "Requests held at the gateway because their QoS class holds its share of the KV pool.",
    "priority_class",
)
GATEWAY_LANE_TOKENS = _own(
    "kvscope_gateway_lane_tokens",
    G,
    "tokens",
    "KV tokens (prompt + max_tokens) of a QoS class: in use by its requests in the engine, and its capacity.",
    "priority_class",
    "kind",
)
GATEWAY_LANE_WAIT_SECONDS = _own(
    "kvscope_gateway_lane_wait_seconds",
    H,
    "seconds",
    "Time requests of a QoS class waited at the gateway for their class's KV share.",
    "priority_class",
    buckets=FINE_LATENCY_BUCKETS,
)

# --- kvscope's own: exporter ---------------------------------------------------------------

EXPORTER_COLLECTOR_DURATION = _own(
    "kvscope_exporter_collector_duration_seconds",
    G,
    "seconds",
    "Time the collector took on the last collection.",
    "collector",
)
EXPORTER_COLLECTOR_SUCCESS = _own(
    "kvscope_exporter_collector_success",
    G,
    "bool",
    "1 when the collector's last collection succeeded.",
    "collector",
)
EXPORTER_PARSE_ERRORS = _own(
    "kvscope_exporter_parse_errors_total",
    C,
    "pages",
    "Scraped pages that could not be parsed.",
    "target",
)
ENGINE_MEMORY_BUDGET = _own(
    "kvscope_engine_gpu_memory_budget_ratio",
    G,
    "ratio",
    "Share of each GPU's memory the engine was configured to take (vLLM's gpu_memory_utilization, read "
    "from vllm:cache_config_info), as a number alerts can compare with.",
    "target",
    "model_name",
    "engine",
)
TARGET_UP = _own("kvscope_target_up", G, "bool", "1 when the scraped target answered.", "target")
TARGET_SCRAPE_SECONDS = _own(
    "kvscope_target_scrape_duration_seconds", G, "seconds", "Time to scrape the target.", "target"
)
GPU_BACKEND_INFO = _own("kvscope_gpu_backend_info", I, "info", "The GPU telemetry backend in use.", "backend")
GPU_XID_ERRORS = _own(
    "kvscope_gpu_xid_errors_total",
    C,
    "errors",
    "XID errors counted one by one (repeats too).",
    "gpu",
    "UUID",
    "xid",
)
GPU_XID_LAST_SECONDS = _own(
    "kvscope_gpu_xid_last_seconds",
    G,
    "seconds",
    "Unix time of the last XID of this code.",
    "gpu",
    "UUID",
    "xid",
)
GPU_XID_INFO = _own(
    "kvscope_gpu_xid_info",
    I,
    "info",
    "XID catalog: meaning, action and bucket of a code.",
    "xid",
    "meaning",
    "action",
    "bucket",
)
GPU_CLOCK_EVENT_ACTIVE = _own(
    "kvscope_gpu_clock_event_active",
    G,
    "bool",
    "1 while this clocks-event reason is active.",
    "gpu",
    "UUID",
    "reason",
)
GPU_PCIE_LINK_CAPACITY = _own(
    "kvscope_gpu_pcie_link_capacity_bytes_per_second",
    G,
    "bytes/s",
    "Capacity of the PCIe link per direction at its current generation and width.",
    "gpu",
    "UUID",
)
GPU_PCIE_LINK_MAX_CAPACITY = _own(
    "kvscope_gpu_pcie_link_max_capacity_bytes_per_second",
    G,
    "bytes/s",
    "Capacity of the PCIe link per direction at its maximum generation and width.",
    "gpu",
    "UUID",
)
GPU_TOPOLOGY_LEVEL = _own(
    "kvscope_gpu_topology_level",
    G,
    "level",
    "Common ancestor of a GPU pair: 0 same board, 10 single switch, 20 multiple switches, "
    "30 host bridge, 40 NUMA node, 50 across NUMA (system); NVLink pairs have level label nvlink.",
    "gpu",
    "peer_gpu",
    "level",
)
GPU_NUMA_NODE = _own("kvscope_gpu_numa_node", G, "node", "NUMA node of the GPU.", "gpu", "UUID")
GPU_ENGINE_NUMA_NODES = _own(
    "kvscope_gpu_engine_numa_nodes",
    G,
    "nodes",
    "NUMA nodes spanned by one engine's GPUs (> 1: tensor-parallel traffic crosses sockets).",
    "pid",
    "gpus",
)
GPU_PROCESS_INFO = _own(
    "kvscope_gpu_process_info",
    I,
    "info",
    "A process using a GPU (join on gpu or pid).",
    "gpu",
    "UUID",
    "pid",
    "process_name",
    "engine",
)
GPU_PROCESS_MEMORY = _own(
    "kvscope_gpu_process_memory_bytes",
    G,
    "bytes",
    "GPU memory used by a process.",
    "gpu",
    "UUID",
    "pid",
)
GPU_FAULT_ACTIVE = _own(
    "kvscope_gpu_fault_active",
    G,
    "bool",
    "Emulated GPU only: 1 while an injected fault is active.",
    "gpu",
    "fault",
)
HOST_MEMORY_AVAILABLE = _own(
    "kvscope_host_memory_available_bytes", G, "bytes", "Host memory available (KV offload uses it)."
)
HOST_MEMORY_TOTAL = _own("kvscope_host_memory_total_bytes", G, "bytes", "Host memory in total.")
HOST_LOAD1 = _own("kvscope_host_load1", G, "load", "One-minute load average.")
HOST_CPUS = _own("kvscope_host_cpus", G, "cpus", "Logical CPUs.")

# --- written by Prometheus itself -----------------------------------------------------------

SCRAPE_UP = Signal(
    "up", G, "bool", "1 when Prometheus' last scrape of the target succeeded.", Source.PROMETHEUS, ("job", "instance")
)

PROCESS_START_TIME = Signal(
    "process_start_time_seconds",
    G,
    "seconds",
    "Start time of the process (prometheus_client's process collector, on vLLM's page): restarts.",
    Source.VLLM,
    _VLLM,
)

ALERTS = Signal(
    "ALERTS",
    G,
    "bool",
    "Prometheus' own series of pending and firing alerts, one per alert and label set.",
    Source.PROMETHEUS,
    ("alertname", "alertstate"),
)

# The annotation every kvscope alert rule carries: the diagnosis incidents that account for it
# (space-separated vocabulary ids), written by `kvscope alerts build`, read by `kvscope diagnose`.
ALERT_EXPLAINED_BY = "explained_by"

# --- recording rules (alerts/): SLO error ratios over the multi-window burn-rate windows -------

SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
SLO_ERROR_RATIO = {
    w: Signal(
        f"slo:sli_error:ratio_rate{w}",
        G,
        "ratio",
        f"Share of SLO-bad events over {w}, per SLO.",
        Source.RULE,
        ("slo", "namespace", "model_name"),
    )
    for w in SLO_WINDOWS
}
SLO_OBJECTIVE = Signal(
    "slo:objective:ratio", G, "ratio", "The SLO's objective (0.99 = 99 % good).", Source.RULE, ("slo",)
)
SLO_BUDGET_REMAINING = Signal(
    "slo:period_error_budget_remaining:ratio",
    G,
    "ratio",
    "Share of the 30-day error budget left.",
    Source.RULE,
    ("slo", "namespace", "model_name"),
)

del G, C, H, I


def all_signals() -> tuple[Signal, ...]:
    """Every catalog entry, in definition order (including the SLO recording rules)."""
    out: list[Signal] = []
    for v in globals().values():
        if isinstance(v, Signal):
            out.append(v)
        elif isinstance(v, dict) and v and all(isinstance(x, Signal) for x in v.values()):
            out.extend(v.values())
    return tuple(out)
