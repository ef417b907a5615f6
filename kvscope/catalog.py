"""The signal catalog: every metric name kvscope reads or writes, defined once.

Exporter, serving, dashboards, alerts, diagnosis and docs import these records; no other
module spells a metric name. `name` is the name as written in PromQL (counters with their
`_total` suffix, histograms as the family name without `_bucket/_sum/_count`).
"""

from __future__ import annotations

import functools
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
class Rescaled:
    """Another name of a measurement in another unit: `value * factor` is in the signal's unit."""

    name: str
    unit: str
    factor: float
    release: str  # the exporter release that first writes it by default


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
    # what makes the source write it at all (a flag, a connector, a model kind); "" = always
    condition: str = ""
    # the same measurement under a name in another unit (dcgm-exporter 4.9's base units): read
    # as `name * factor` in this signal's unit, never as an alias
    rescaled: tuple[Rescaled, ...] = ()

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
    def every_name(self) -> tuple[str, ...]:
        """Every name the measurement has had, in any unit (for recognising a series)."""
        return (*self.names, *(r.name for r in self.rescaled))

    def scale_of(self, name: str) -> float | None:
        """The factor that turns a series of `name` into this signal's unit (None: not its name)."""
        if name in self.names:
            return 1.0
        return next((r.factor for r in self.rescaled if r.name == name), None)

    @property
    def subsystem(self) -> str:
        """The `<subsystem>` part of a `kvscope_<subsystem>_<name>_<unit>` name."""
        if self.source is Source.KVSCOPE:
            return self.name.split("_")[1]
        return self.source.value


VLLM_NAMESPACE = "vllm:"  # every vLLM series starts with it
_VLLM = ("model_name", "engine")
# dcgm-exporter renamed `Hostname` to `hostname` (NVIDIA/dcgm-exporter PR #655, merged 2026-05-12;
# first released in 4.6.0-4.8.3 (release PR #711, 2026-07-14), whose changelist says "Rename the
# Hostname label to hostname"; the later notes seen (4.8.4, 4.9.0, 4.10.0) do not revert it).
# kvscope writes the current spelling by default (`kvscope export --hostname-label`); readers
# must accept both.
DCGM_HOST_LABELS = ("hostname", "Hostname")  # current first, then the one before 4.6.0-4.8.3
# MIG instances add these after modelName, before the host label (dcgm-exporter's template).
DCGM_MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
_DCGM = ("gpu", "UUID", "pci_bus_id", "device", "modelName", DCGM_HOST_LABELS[0])

# Millisecond-resolution latency buckets: vLLM's default phase histograms start at 0.3 s, too
# coarse for fast GPUs and for the CPU demo model; the tuned profile passes these to vLLM
# (--custom-histogram-buckets) and kvscope's own per-tenant histograms use them.
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
VLLM_KV_RESIDENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1200.0, 1800.0,
)  # fmt: skip
# Prompt lengths in tokens, 1-2-5 steps as vLLM's own token histograms (build_1_2_5_buckets), to 1M.
PROMPT_TOKEN_BUCKETS: tuple[float, ...] = tuple(float(m * 10**e) for e in range(7) for m in (1, 2, 5))
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
    condition: str = "",
) -> Signal:
    return Signal(name, kind, unit, help_, Source.VLLM, (*_VLLM, *labels), aliases, legacy, buckets, condition)


def _dcgm(
    name: str,
    kind: Kind,
    unit: str,
    help_: str,
    *labels: str,
    aliases: tuple[str, ...] = (),
    rescaled: tuple[Rescaled, ...] = (),
) -> Signal:
    return Signal(name, kind, unit, help_, Source.DCGM, (*_DCGM, *labels), aliases, rescaled=rescaled)


def _in(name: str, unit: str, factor: float, release: str = "4.9.0") -> tuple[Rescaled, ...]:
    return (Rescaled(name, unit, factor, release),)


MIB = float(1 << 20)


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
    condition="a KV connector",
)
VLLM_EXTERNAL_PREFIX_CACHE_HITS = _vllm(
    "vllm:external_prefix_cache_hits_total",
    C,
    "tokens",
    "External (KV connector) prefix-cache hits (tokens).",
    condition="a KV connector",
)
VLLM_ADMISSION_REJECTIONS = Signal(
    "vllm:admission_rejections_total",
    C,
    "requests",
    "Requests the API server refused because its queue cap was reached (--max-num-queued-reqs / "
    "--max-num-queued-tokens); the client got an error. No engine label.",
    Source.VLLM,
    ("model_name", "reason"),
    condition="--max-num-queued-reqs or --max-num-queued-tokens",
)
VLLM_CORRUPTED_REQUESTS = _vllm(
    "vllm:corrupted_requests_total",
    C,
    "requests",
    "Requests whose logits held NaNs (only with VLLM_COMPUTE_NANS_IN_LOGITS=1): wrong output was served.",
    condition="VLLM_COMPUTE_NANS_IN_LOGITS=1",
)
VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE = _vllm(
    "vllm:prompt_tokens_cached_by_source_total",
    C,
    "tokens",
    "Prefix-cache hit tokens by the tier that supplied them (device, host, disk, p2p, external_unspecified).",
    "source",
)
VLLM_REQUESTS_KV_FETCH_BY_STAGE = _vllm(
    "vllm:num_requests_kv_fetch_by_stage",
    G,
    "requests",
    "Waiting requests by async KV-load stage (waiting_to_start, in_progress, completed_waiting); KV consumers only.",
    "stage",
    condition="a KV consumer (P/D decode side, offload loads)",
)
VLLM_MM_CACHE_QUERIES = _vllm(
    "vllm:mm_cache_queries_total", C, "items", "Multi-modal cache lookups (items).", condition="a multimodal model"
)
VLLM_MM_CACHE_HITS = _vllm(
    "vllm:mm_cache_hits_total", C, "items", "Multi-modal cache hits (items).", condition="a multimodal model"
)
VLLM_LORA_REQUESTS_INFO = Signal(
    "vllm:lora_requests_info",
    G,
    "timestamp",
    "LoRA adapters running and waiting, as labels (value: wall-clock time of the update).",
    Source.VLLM,
    ("model_name", "max_lora", "running_lora_adapters", "waiting_lora_adapters"),
    condition="LoRA adapters",
)
# MFU estimates (--enable-mfu-metrics; vllm/v1/metrics/perf.py): analytic, from the model's shape
# per scheduled step, not hardware counters. Their names end in _total in vLLM's own code.
VLLM_ESTIMATED_FLOPS = _vllm(
    "vllm:estimated_flops_per_gpu_total",
    C,
    "FLOP",
    "Estimated floating-point operations per GPU (MFU: rate / the GPU's peak).",
    condition="--enable-mfu-metrics",
)
VLLM_ESTIMATED_READ_BYTES = _vllm(
    "vllm:estimated_read_bytes_per_gpu_total",
    C,
    "bytes",
    "Estimated bytes read from GPU memory per GPU (HBM traffic against the GPU's bandwidth).",
    condition="--enable-mfu-metrics",
)
VLLM_ESTIMATED_WRITE_BYTES = _vllm(
    "vllm:estimated_write_bytes_per_gpu_total",
    C,
    "bytes",
    "Estimated bytes written to GPU memory per GPU.",
    condition="--enable-mfu-metrics",
)
VLLM_SPEC_DECODE_DRAFTS = _vllm(
    "vllm:spec_decode_num_drafts_total", C, "drafts", "Speculative-decoding drafts.", condition="speculative decoding"
)
VLLM_SPEC_DECODE_DRAFT_TOKENS = _vllm(
    "vllm:spec_decode_num_draft_tokens_total", C, "tokens", "Draft tokens proposed.", condition="speculative decoding"
)
VLLM_SPEC_DECODE_ACCEPTED_TOKENS = _vllm(
    "vllm:spec_decode_num_accepted_tokens_total",
    C,
    "tokens",
    "Draft tokens accepted.",
    condition="speculative decoding",
)
VLLM_SPEC_DECODE_ACCEPTED_PER_POS = _vllm(
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    C,
    "tokens",
    "Draft tokens accepted per draft position.",
    "position",
    condition="speculative decoding",
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
    "Prefill phase time (default lowest bucket 0.3 s; the tuned profile sets ms edges).",
    buckets=VLLM_REQUEST_LATENCY_BUCKETS,
)
VLLM_DECODE_TIME = _vllm(
    "vllm:request_decode_time_seconds",
    H,
    "seconds",
    "Decode phase time (default lowest bucket 0.3 s; the tuned profile sets ms edges).",
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

# KV-cache residency (--kv-cache-metrics, sampled by --kv-cache-metrics-sample, default 1 %).
VLLM_KV_BLOCK_LIFETIME = _vllm(
    "vllm:kv_block_lifetime_seconds",
    H,
    "seconds",
    "KV block lifetime from allocation to eviction (short: the pool is too small).",
    buckets=VLLM_KV_RESIDENCY_BUCKETS,
    condition="--kv-cache-metrics",
)
VLLM_KV_BLOCK_IDLE_BEFORE_EVICT = _vllm(
    "vllm:kv_block_idle_before_evict_seconds",
    H,
    "seconds",
    "Idle time of a KV block before it was evicted (short: evicted while still warm).",
    buckets=VLLM_KV_RESIDENCY_BUCKETS,
    condition="--kv-cache-metrics",
)
VLLM_KV_BLOCK_REUSE_GAP = _vllm(
    "vllm:kv_block_reuse_gap_seconds",
    H,
    "seconds",
    "Time between consecutive accesses of a KV block (the prefix cache's reuse distance).",
    buckets=VLLM_KV_RESIDENCY_BUCKETS,
    condition="--kv-cache-metrics",
)

# KV connectors (only when configured): NIXL (P/D disaggregation) and the offloading connector.
VLLM_NIXL_XFER_TIME = _vllm(
    "vllm:nixl_xfer_time_seconds", H, "seconds", "NIXL KV transfer duration.", condition="the NIXL KV connector"
)
VLLM_NIXL_BYTES = _vllm(
    "vllm:nixl_bytes_transferred", H, "bytes", "Bytes per NIXL KV transfer.", condition="the NIXL KV connector"
)
VLLM_NIXL_FAILED_TRANSFERS = _vllm(
    "vllm:nixl_num_failed_transfers_total",
    C,
    "transfers",
    "Failed NIXL KV transfers, including handshake and notification failures.",
    condition="the NIXL KV connector",
)
VLLM_NIXL_EXPIRED_REQUESTS = _vllm(
    "vllm:nixl_num_kv_expired_reqs_total",
    C,
    "requests",
    "Requests whose KV lease expired before the decode side fetched it (prefill instance).",
    condition="the NIXL KV connector",
)
VLLM_NIXL_NOTIFICATIONS_AFTER_EXPIRY = _vllm(
    "vllm:nixl_num_notifications_after_expiry_total",
    C,
    "notifications",
    "Completion notifications for expired requests: the KV blocks may have been reused mid-transfer.",
    condition="the NIXL KV connector",
)
VLLM_KV_OFFLOAD_LOAD_BYTES = _vllm(
    "vllm:kv_offload_load_bytes_total",
    C,
    "bytes",
    "Bytes loaded from offload storage to the GPU.",
    condition="the offloading KV connector",
)
VLLM_KV_OFFLOAD_STORE_BYTES = _vllm(
    "vllm:kv_offload_store_bytes_total",
    C,
    "bytes",
    "Bytes stored from the GPU to offload storage.",
    condition="the offloading KV connector",
)
VLLM_KV_OFFLOAD_LOAD_TIME = _vllm(
    "vllm:kv_offload_load_time_total",
    C,
    "seconds",
    "Time spent loading from offload storage.",
    condition="the offloading KV connector",
)
VLLM_KV_OFFLOAD_STORE_TIME = _vllm(
    "vllm:kv_offload_store_time_total",
    C,
    "seconds",
    "Time spent storing to offload storage.",
    condition="the offloading KV connector",
)
VLLM_KV_OFFLOAD_ALLOCATION_FAILURES = _vllm(
    "vllm:kv_offload_allocation_failure_total",
    C,
    "failures",
    "KV offload store allocations that failed (the offload tier is full).",
    condition="the offloading KV connector",
)
VLLM_KV_OFFLOAD_CPU_USAGE = _vllm(
    "vllm:kv_offload_cpu_cache_usage_perc",
    G,
    "ratio",
    "CPU offload tier in use, 0..1.",
    condition="the offloading KV connector (CPU tier)",
)


# Registered by vLLM 0.32 but read by no kvscope consumer: catalogued so that the exporter
# passes them through knowingly and a vLLM upgrade that adds a name fails
# tests/unit/test_catalog.py until it is placed. (KVCR tiering names come from the external
# `kvcr` package and are not known here.)
_PASSED_CONDITIONS = {  # name prefix -> what makes vLLM register it (the longest prefix wins)
    "vllm:watermark_": "watermark_config",
    "vllm:diffusion_": "a diffusion language model",
    "vllm:nixl_": "the NIXL KV connector",
    "vllm:kv_offload_": "the offloading KV connector",
    "vllm:simple_kv_offload_": "SimpleCPUOffloadConnector",
    "vllm:hisparse_": "the HiSparse KV connector",
    "vllm:mooncake_": "the Mooncake store KV connector",
    "vllm:hf3fs_": "the HF3FS KV connector",
    "vllm:sleep_mode_": "sleep mode (dev routes)",
    "vllm:rl_weight_": "RL weight updates",
    "vllm:tool_call_parser_": "a tool-call parser",
    "vllm:websocket_": "the realtime API",
}


def _passed(name: str, kind: Kind, unit: str, help_: str, *labels: str, base: tuple[str, ...] = _VLLM) -> Signal:
    prefix = max((p for p in _PASSED_CONDITIONS if name.startswith(p)), key=len)
    return Signal(name, kind, unit, help_, Source.VLLM, (*base, *labels), condition=_PASSED_CONDITIONS[prefix])


VLLM_PASSED_THROUGH = {
    s.name: s
    for s in (
        _passed("vllm:watermark_requests_total", C, "requests", "Finished requests by watermark status.", "status"),
        _passed("vllm:diffusion_num_denoising_steps_total", C, "steps", "Diffusion-LM denoising steps."),
        _passed("vllm:diffusion_num_canvas_positions_total", C, "positions", "Diffusion-LM canvas positions."),
        _passed("vllm:diffusion_num_committed_tokens_total", C, "tokens", "Diffusion-LM committed tokens."),
        _passed("vllm:nixl_post_time_seconds", H, "seconds", "NIXL transfer post time."),
        _passed("vllm:nixl_num_descriptors", H, "descriptors", "Descriptors per NIXL transfer."),
        _passed(
            "vllm:nixl_num_failed_notifications_total",
            C,
            "notifications",
            "Failed NIXL notifications (also counted in the failed transfers).",
        ),
        _passed("vllm:kv_offload_load_size", H, "bytes", "Size of each KV offload load."),
        _passed("vllm:kv_offload_store_size", H, "bytes", "Size of each KV offload store."),
        _passed("vllm:kv_offload_lookup_sync_delay_seconds", H, "seconds", "Time in one offload lookup call."),
        _passed("vllm:kv_offload_lookup_async_delay_seconds", H, "seconds", "Deferred offload lookup delay."),
        _passed(
            "vllm:kv_offload_total_bytes_total",
            C,
            "bytes",
            "Deprecated in 0.32 (use the load/store bytes): bytes offloaded, by direction.",
            "transfer_type",
        ),
        _passed(
            "vllm:kv_offload_total_time_total",
            C,
            "seconds",
            "Deprecated in 0.32 (use the load/store time): offload time, by direction.",
            "transfer_type",
        ),
        _passed(
            "vllm:kv_offload_size",
            H,
            "bytes",
            "Deprecated in 0.32 (use the load/store size): transfer size, by direction.",
            "transfer_type",
        ),
        _passed("vllm:kv_offload_stores_skipped_total", C, "stores", "CPU-tier stores skipped."),
        _passed("vllm:kv_offload_cpu_cache_read_usage_perc", G, "ratio", "CPU offload tier read share in use."),
        _passed("vllm:kv_offload_cpu_cache_write_usage_perc", G, "ratio", "CPU offload tier write share in use."),
        _passed("vllm:kv_offload_cpu_allocation_size", H, "bytes", "CPU offload tier allocation size."),
        *(
            _passed(f"vllm:kv_offload_tiering_{n}", k, u, h, *extra)
            for n, k, u, h, extra in (
                ("chunk_hits_total", C, "chunks", "Tiered offload chunk hits.", ("tier",)),
                ("chunk_queries_total", C, "chunks", "Tiered offload chunk lookups.", ("tier",)),
                ("read_bytes_total", C, "bytes", "Tiered offload bytes read.", ("tier",)),
                ("read_time_total", C, "seconds", "Tiered offload read time.", ("tier",)),
                ("write_bytes_total", C, "bytes", "Tiered offload bytes written.", ("tier",)),
                ("write_time_total", C, "seconds", "Tiered offload write time.", ("tier",)),
                ("primary_read_usage_perc", G, "ratio", "Primary tier read share in use.", ()),
                ("primary_write_usage_perc", G, "ratio", "Primary tier write share in use.", ()),
                ("backpressure_stores_dropped_total", C, "stores", "Stores dropped by backpressure.", ()),
                ("backpressure_blocks_dropped_total", C, "blocks", "Blocks dropped by backpressure.", ()),
                ("backpressure_store_latency_ema", G, "seconds", "Store latency moving average.", ()),
                ("active_cascade_jobs", G, "jobs", "Cascade jobs in flight.", ()),
                ("active_promotion_jobs", G, "jobs", "Promotion jobs in flight.", ()),
                ("cascade_job_failures_total", C, "jobs", "Failed cascade jobs.", ()),
                ("promotion_job_failures_total", C, "jobs", "Failed promotion jobs.", ()),
                ("promotion_allocation_failures_total", C, "failures", "Failed promotion allocations.", ()),
                ("lookup_sync_delay_seconds", H, "seconds", "Blocking time of a tier lookup.", ("tier",)),
                ("lookup_async_delay_seconds", H, "seconds", "Deferred tier lookup delay.", ("tier",)),
            )
        ),
        _passed("vllm:simple_kv_offload_save_outcomes_total", C, "stores", "Simple CPU offload stores.", "outcome"),
        _passed("vllm:simple_kv_offload_load_blocks_total", C, "blocks", "Blocks restored from the offload pool."),
        _passed("vllm:simple_kv_offload_used_blocks", G, "blocks", "Offload-pool blocks pinned."),
        _passed("vllm:simple_kv_offload_pending_store_blocks", G, "blocks", "Offload blocks in pending stores."),
        _passed(
            "vllm:simple_kv_offload_info",
            G,
            "info",
            "Simple CPU offload facts as labels.",
            "backend",
            "page_cache",
            "lazy_offload",
            "capacity_blocks",
        ),
        _passed("vllm:hisparse_cache_hits_total", C, "blocks", "HiSparse hot-buffer hits."),
        _passed("vllm:hisparse_cache_misses_total", C, "blocks", "HiSparse hot-buffer misses."),
        _passed("vllm:hisparse_host_cache_usage_perc", G, "ratio", "HiSparse host KV cache in use."),
        _passed("vllm:hisparse_host_to_device_bytes_total", C, "bytes", "HiSparse host-to-device bytes."),
        _passed("vllm:hisparse_pending_page_transfers", G, "transfers", "HiSparse page transfers in flight."),
        _passed("vllm:hisparse_host_block_lifetime_seconds", H, "seconds", "HiSparse host block lifetime."),
        _passed("vllm:hisparse_host_block_idle_before_evict_seconds", H, "seconds", "HiSparse idle before evict."),
        _passed("vllm:hisparse_host_block_reuse_gap_seconds", H, "seconds", "HiSparse host block reuse gap."),
        _passed("vllm:mooncake_store_operation_total", C, "operations", "Mooncake store operations."),
        _passed("vllm:mooncake_store_operation_bytes_total", C, "bytes", "Mooncake store bytes."),
        _passed("vllm:mooncake_store_operation_keys_total", C, "keys", "Mooncake store keys touched."),
        _passed("vllm:mooncake_store_operation_failed_keys_total", C, "keys", "Mooncake store failed keys."),
        _passed("vllm:mooncake_store_operation_time_seconds", H, "seconds", "Mooncake store operation time."),
        _passed("vllm:hf3fs_load_duration_seconds", H, "seconds", "HF3FS KV load duration."),
        _passed("vllm:hf3fs_save_duration_seconds", H, "seconds", "HF3FS KV save duration."),
        _passed("vllm:hf3fs_num_failed_load_total", C, "loads", "Failed HF3FS KV loads."),
        _passed("vllm:hf3fs_num_failed_save_total", C, "saves", "Failed HF3FS KV saves."),
        _passed("vllm:sleep_mode_operation_duration_seconds", H, "seconds", "Sleep-mode operation time.", base=()),
        _passed("vllm:sleep_mode_operations_in_flight", G, "operations", "Sleep-mode operations.", base=()),
        _passed(
            "vllm:rl_weight_update_operation_duration_seconds",
            H,
            "seconds",
            "RL weight-transfer operation time.",
            base=(),
        ),
        _passed("vllm:rl_weight_update_operations_in_flight", G, "operations", "RL weight transfers.", base=()),
        _passed(
            "vllm:tool_call_parser_invocations_total",
            C,
            "invocations",
            "Tool-call parser invocations.",
            "mode",
            "outcome",
            "request_type",
            base=("model_name",),
        ),
        _passed("vllm:websocket_connections_total", C, "connections", "Realtime WebSocket connections.", base=()),
        _passed("vllm:websocket_connections_active", G, "connections", "Open realtime WebSockets.", base=()),
        _passed("vllm:websocket_connection_duration_seconds", H, "seconds", "WebSocket connection time.", base=()),
    )
}

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

DCGM_SM_CLOCK = _dcgm(
    "DCGM_FI_DEV_SM_CLOCK", G, "MHz", "SM clock frequency.", rescaled=_in("DCGM_FI_DEV_SM_CLOCK_HERTZ", "Hz", 1e-6)
)
DCGM_MEM_CLOCK = _dcgm(
    "DCGM_FI_DEV_MEM_CLOCK",
    G,
    "MHz",
    "Memory clock frequency.",
    rescaled=_in("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "Hz", 1e-6),
)
DCGM_APP_SM_CLOCK = _dcgm(
    "DCGM_FI_DEV_APP_SM_CLOCK",
    G,
    "MHz",
    "Application (base) SM clock: the floor without throttling.",
)
DCGM_MAX_SM_CLOCK = _dcgm("DCGM_FI_DEV_MAX_SM_CLOCK", G, "MHz", "Maximum SM clock.")
DCGM_MEMORY_TEMP = _dcgm(
    "DCGM_FI_DEV_MEMORY_TEMP", G, "C", "HBM temperature.", aliases=("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",)
)
DCGM_GPU_TEMP = _dcgm("DCGM_FI_DEV_GPU_TEMP", G, "C", "GPU temperature.", aliases=("DCGM_FI_DEV_GPU_TEMP_CELSIUS",))
DCGM_SLOWDOWN_TEMP = _dcgm("DCGM_FI_DEV_SLOWDOWN_TEMP", G, "C", "Temperature at which the GPU slows its clocks.")
DCGM_POWER_USAGE = _dcgm("DCGM_FI_DEV_POWER_USAGE", G, "W", "Power draw.", aliases=("DCGM_FI_DEV_BOARD_POWER_WATTS",))
DCGM_POWER_LIMIT = _dcgm("DCGM_FI_DEV_POWER_MGMT_LIMIT", G, "W", "Enforced power limit.")
DCGM_TOTAL_ENERGY = _dcgm(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    C,
    "mJ",
    "Energy since the driver loaded.",
    rescaled=_in("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "J", 1000.0),
)
DCGM_PCIE_REPLAY = _dcgm(
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    C,
    "replays",
    "PCIe retries (link errors).",
    aliases=("DCGM_FI_DEV_PCIE_REPLAY_TOTAL",),
)
DCGM_GPU_UTIL = _dcgm(
    "DCGM_FI_DEV_GPU_UTIL",
    G,
    "percent",
    "GPU utilisation (time busy).",
    rescaled=_in("DCGM_FI_DEV_GPU_UTIL_RATIO", "ratio", 100.0),
)
DCGM_MEM_COPY_UTIL = _dcgm(
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    G,
    "percent",
    "Memory utilisation.",
    rescaled=_in("DCGM_FI_DEV_MEMORY_UTIL_RATIO", "ratio", 100.0),
)
DCGM_ENC_UTIL = _dcgm(
    "DCGM_FI_DEV_ENC_UTIL",
    G,
    "percent",
    "Encoder utilisation.",
    rescaled=_in("DCGM_FI_DEV_ENC_UTIL_RATIO", "ratio", 100.0),
)
DCGM_DEC_UTIL = _dcgm(
    "DCGM_FI_DEV_DEC_UTIL",
    G,
    "percent",
    "Decoder utilisation.",
    rescaled=_in("DCGM_FI_DEV_DEC_UTIL_RATIO", "ratio", 100.0),
)
DCGM_XID_ERRORS = _dcgm(
    "DCGM_FI_DEV_XID_ERRORS",
    G,
    "xid",
    "Value of the last XID error (sticky: repeats are invisible; compare changes, not increase).",
    "err_code",
    "err_msg",
    aliases=("DCGM_FI_DEV_XID_ERROR",),
)
DCGM_FB_FREE = _dcgm(
    "DCGM_FI_DEV_FB_FREE",
    G,
    "MiB",
    "Framebuffer memory free.",
    rescaled=_in("DCGM_FI_DEV_FB_FREE_BYTES", "bytes", 1 / MIB),
)
DCGM_FB_USED = _dcgm(
    "DCGM_FI_DEV_FB_USED",
    G,
    "MiB",
    "Framebuffer memory used.",
    rescaled=_in("DCGM_FI_DEV_FB_USED_BYTES", "bytes", 1 / MIB),
)
DCGM_FB_RESERVED = _dcgm(
    "DCGM_FI_DEV_FB_RESERVED",
    G,
    "MiB",
    "Framebuffer memory reserved.",
    rescaled=_in("DCGM_FI_DEV_FB_RESERVED_BYTES", "bytes", 1 / MIB),
)
DCGM_FB_CAPACITY = _dcgm(
    "DCGM_FI_DEV_FB_CAPACITY_BYTES", G, "bytes", "Framebuffer capacity (collected by default from 4.9.0)."
)
DCGM_NVLINK_BANDWIDTH = _dcgm("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", C, "bytes", "NVLink bandwidth counter, all links.")
# 4.9.0 writes NVLink as a rate (B/s, a gauge) where 4.8 wrote a counter: another kind, so another
# signal; panels read `rate(counter) or gauge`. The scale is from one secondary source (not exact
# 1e6 per it): read as bytes per second as named.
DCGM_NVLINK_THROUGHPUT = _dcgm(
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", G, "bytes/s", "NVLink throughput, all links (4.9.0)."
)
DCGM_UNCORRECTABLE_REMAPPED_ROWS = _dcgm(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    C,
    "rows",
    "Rows remapped for uncorrectable errors.",
    aliases=("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",),
)
DCGM_CORRECTABLE_REMAPPED_ROWS = _dcgm(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    C,
    "rows",
    "Rows remapped for correctable errors.",
    aliases=("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",),
)
DCGM_ROW_REMAP_FAILURE = _dcgm(
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    G,
    "bool",
    "1 when a row remap failed: the GPU needs service.",
    aliases=("DCGM_FI_DEV_ROW_REMAP_FAILED",),
)
DCGM_ECC_SBE_TOTAL = _dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", C, "errors", "Single-bit ECC errors (volatile).")
DCGM_ECC_DBE_TOTAL = _dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", C, "errors", "Double-bit ECC errors (volatile).")
DCGM_GR_ENGINE_ACTIVE = _dcgm(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    G,
    "ratio",
    "Graphics/compute engine active, 0..1.",
    aliases=("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",),
)
DCGM_TENSOR_ACTIVE = _dcgm(
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    G,
    "ratio",
    "Tensor pipes active, 0..1.",
    aliases=("DCGM_FI_PROF_TENSOR_UTIL_RATIO",),
)
DCGM_DRAM_ACTIVE = _dcgm(
    "DCGM_FI_PROF_DRAM_ACTIVE",
    G,
    "ratio",
    "HBM interface active, 0..1 (decode is bound here).",
    aliases=("DCGM_FI_PROF_DRAM_UTIL_RATIO",),
)
DCGM_PCIE_TX_BYTES = _dcgm(
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    G,
    "bytes/s",
    "PCIe bytes sent by the GPU per second.",
    aliases=("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",),
)
DCGM_PCIE_RX_BYTES = _dcgm(
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    G,
    "bytes/s",
    "PCIe bytes received by the GPU per second.",
    aliases=("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",),
)
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
DCGM_EXP_P2P_STATUS = _dcgm(
    "DCGM_EXP_P2P_STATUS",
    G,
    "status",
    "Peer-to-peer status to each peer GPU (link_status OK, ...NotSupported, Unknown).",
    "peer_gpu",
    "link_status",
)
DCGM_VGPU_LICENSE_STATUS = _dcgm("DCGM_FI_DEV_VGPU_LICENSE_STATUS", G, "status", "vGPU licence status.")
DCGM_SYNC_BOOST_VIOLATION = _dcgm("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", C, "ns", "Time held by sync boost.")
DCGM_BOARD_LIMIT_VIOLATION = _dcgm("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", C, "ns", "Time held by the board limit.")
DCGM_LOW_UTIL_VIOLATION = _dcgm("DCGM_FI_DEV_LOW_UTIL_VIOLATION", C, "ns", "Time clocked down for low use.")
DCGM_RELIABILITY_VIOLATION = _dcgm("DCGM_FI_DEV_RELIABILITY_VIOLATION", C, "ns", "Time held for reliability.")
DCGM_ECC_SBE_AGG = _dcgm("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", C, "errors", "Single-bit ECC errors (persistent).")
DCGM_ECC_DBE_AGG = _dcgm("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", C, "errors", "Double-bit ECC errors (persistent).")
DCGM_RETIRED_SBE = _dcgm("DCGM_FI_DEV_RETIRED_SBE", C, "pages", "Pages retired for single-bit errors (pre-Ampere).")
DCGM_RETIRED_DBE = _dcgm("DCGM_FI_DEV_RETIRED_DBE", C, "pages", "Pages retired for double-bit errors (pre-Ampere).")
DCGM_RETIRED_PENDING = _dcgm("DCGM_FI_DEV_RETIRED_PENDING", C, "pages", "Pages pending retirement.")
DCGM_NVLINK_CRC_FLIT_ERRORS = _dcgm(
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", C, "errors", "NVLink flow-control CRC errors."
)
DCGM_NVLINK_CRC_DATA_ERRORS = _dcgm(
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", C, "errors", "NVLink data CRC errors."
)
DCGM_NVLINK_REPLAY_ERRORS = _dcgm("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", C, "errors", "NVLink retries.")
DCGM_NVLINK_RECOVERY_ERRORS = _dcgm(
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", C, "errors", "NVLink recovery errors."
)
DCGM_NVLINK_BANDWIDTH_L0 = _dcgm("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", C, "bytes", "NVLink link 0 data, rx and tx.")
DCGM_SM_ACTIVE = _dcgm("DCGM_FI_PROF_SM_ACTIVE", G, "ratio", "Cycles an SM has at least one warp, 0..1.")
DCGM_SM_OCCUPANCY = _dcgm("DCGM_FI_PROF_SM_OCCUPANCY", G, "ratio", "Warps resident on an SM, share of its maximum.")
DCGM_FP64_ACTIVE = _dcgm("DCGM_FI_PROF_PIPE_FP64_ACTIVE", G, "ratio", "FP64 pipes active, 0..1.")
DCGM_FP32_ACTIVE = _dcgm("DCGM_FI_PROF_PIPE_FP32_ACTIVE", G, "ratio", "FP32 pipes active, 0..1.")
DCGM_FP16_ACTIVE = _dcgm("DCGM_FI_PROF_PIPE_FP16_ACTIVE", G, "ratio", "FP16 pipes active, 0..1.")
DCGM_PCIE_TX_THROUGHPUT = _dcgm(
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", C, "KB", "PCIe bytes sent, in KB (older default lists; NVML)."
)
DCGM_PCIE_RX_THROUGHPUT = _dcgm(
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", C, "KB", "PCIe bytes received, in KB (older default lists; NVML)."
)

# DCGM 4.7 added canonical field names in base units (..._CELSIUS, _WATTS, _TOTAL, _HERTZ,
# _BYTES, _RATIO); dcgm-exporter's lists still configure the names above. Same-unit canonical names
# are aliases here; the rescaled ones (Hz for MHz, bytes for MiB, ratios for percent) are not, since
# a query would mix units: a fleet that configures them needs catalog entries of their own.
# dcgm-exporter's field lists, as shipped in etc/default-counters.csv and etc/dcp-metrics-included.csv
# (NVIDIA/dcgm-exporter main d5e5f510, 2026-05-12 = 4.5.3-4.8.2; the 4.6.0-4.8.3 release keeps the
# same lists): "enabled" lines are uncommented in both files, "opt_in" lines are commented out
# there (a user turns them on), "exporter" are dcgm-exporter's own computed fields.
# DCGM_FI_DRIVER_VERSION is a label, not a series. tests/unit/test_catalog_upstream.py checks these
# against the CSV files when DCGM_EXPORTER_ETC points at a dcgm-exporter checkout's etc/.
DCGM_EXPORTER_RELEASE = "4.6.0-4.8.3 (main d5e5f510)"
DCGM_EXPORTER_FIELDS: dict[str, tuple[Signal, ...]] = {
    "enabled": (
        DCGM_SM_CLOCK, DCGM_MEM_CLOCK, DCGM_MEMORY_TEMP, DCGM_GPU_TEMP, DCGM_POWER_USAGE, DCGM_TOTAL_ENERGY,
        DCGM_PCIE_REPLAY, DCGM_GPU_UTIL, DCGM_MEM_COPY_UTIL, DCGM_ENC_UTIL, DCGM_DEC_UTIL, DCGM_XID_ERRORS,
        DCGM_FB_FREE, DCGM_FB_USED, DCGM_FB_RESERVED, DCGM_NVLINK_BANDWIDTH, DCGM_VGPU_LICENSE_STATUS,
        DCGM_UNCORRECTABLE_REMAPPED_ROWS, DCGM_CORRECTABLE_REMAPPED_ROWS, DCGM_ROW_REMAP_FAILURE,
        DCGM_GR_ENGINE_ACTIVE, DCGM_TENSOR_ACTIVE, DCGM_DRAM_ACTIVE, DCGM_PCIE_TX_BYTES, DCGM_PCIE_RX_BYTES,
    ),
    "opt_in": (
        DCGM_POWER_VIOLATION, DCGM_THERMAL_VIOLATION, DCGM_SYNC_BOOST_VIOLATION, DCGM_BOARD_LIMIT_VIOLATION,
        DCGM_LOW_UTIL_VIOLATION, DCGM_RELIABILITY_VIOLATION, DCGM_ECC_SBE_TOTAL, DCGM_ECC_DBE_TOTAL,
        DCGM_ECC_SBE_AGG, DCGM_ECC_DBE_AGG, DCGM_RETIRED_SBE, DCGM_RETIRED_DBE, DCGM_RETIRED_PENDING,
        DCGM_NVLINK_CRC_FLIT_ERRORS, DCGM_NVLINK_CRC_DATA_ERRORS, DCGM_NVLINK_REPLAY_ERRORS,
        DCGM_NVLINK_RECOVERY_ERRORS, DCGM_NVLINK_BANDWIDTH_L0, DCGM_SM_ACTIVE, DCGM_SM_OCCUPANCY,
        DCGM_FP64_ACTIVE, DCGM_FP32_ACTIVE, DCGM_FP16_ACTIVE, DCGM_PCIE_TX_THROUGHPUT, DCGM_PCIE_RX_THROUGHPUT,
    ),
    "exporter": (DCGM_EXP_CLOCK_EVENTS, DCGM_EXP_XID_COUNT, DCGM_EXP_HEALTH, DCGM_EXP_P2P_STATUS),
}  # fmt: skip


@dataclass(frozen=True)
class Rename:
    """A default field dcgm-exporter renamed after 4.8: its new name, the release, the source."""

    new: str
    release: str
    source: str  # A: 4.9.0 notes, B: 4.10.0 page, C: go-dcgm dcgm_fields.h, D: a DCGM 4.7 field guide


# The 4.8 default field -> what 4.9.0 / 4.10.0 write instead (../shared/reference: the 4.9.0 release
# notes; go-dcgm's deprecated-alias block and base-unit field IDs 1600-1612; a secondary DCGM 4.7
# field guide for the five marked D only). A rename in another unit is that signal's `rescaled`
# entry (read with its factor); a same-unit one is an alias. The 4.9 CSV itself could not be read
# here (no copy of a 4.9 tree is reachable): docs/metrics.md shows the table with each source.
DCGM_EXPORTER_RENAMES: dict[str, Rename] = {
    DCGM_SM_CLOCK.name: Rename("DCGM_FI_DEV_SM_CLOCK_HERTZ", "4.9.0", "C (1603), A"),
    DCGM_MEM_CLOCK.name: Rename("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "4.9.0", "C (1604), A"),
    DCGM_TOTAL_ENERGY.name: Rename("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "4.9.0", "C (1611), A"),
    DCGM_GPU_UTIL.name: Rename("DCGM_FI_DEV_GPU_UTIL_RATIO", "4.9.0", "C name, D"),
    DCGM_MEM_COPY_UTIL.name: Rename("DCGM_FI_DEV_MEMORY_UTIL_RATIO", "4.9.0", "D"),
    DCGM_ENC_UTIL.name: Rename("DCGM_FI_DEV_ENC_UTIL_RATIO", "4.9.0", "D"),
    DCGM_DEC_UTIL.name: Rename("DCGM_FI_DEV_DEC_UTIL_RATIO", "4.9.0", "D"),
    DCGM_FB_FREE.name: Rename("DCGM_FI_DEV_FB_FREE_BYTES", "4.9.0", "D"),
    DCGM_FB_USED.name: Rename("DCGM_FI_DEV_FB_USED_BYTES", "4.9.0", "D"),
    DCGM_FB_RESERVED.name: Rename("DCGM_FI_DEV_FB_RESERVED_BYTES", "4.9.0", "D"),
    DCGM_NVLINK_BANDWIDTH.name: Rename(DCGM_NVLINK_THROUGHPUT.name, "4.9.0", "D (a gauge in B/s, not a counter)"),
    DCGM_GPU_TEMP.name: Rename("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "4.9.0", "C alias"),
    DCGM_MEMORY_TEMP.name: Rename("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "4.9.0", "C alias"),
    DCGM_POWER_USAGE.name: Rename("DCGM_FI_DEV_BOARD_POWER_WATTS", "4.9.0", "C alias"),
    DCGM_PCIE_REPLAY.name: Rename("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "4.9.0", "C alias"),
    DCGM_XID_ERRORS.name: Rename("DCGM_FI_DEV_XID_ERROR", "4.9.0", "C alias"),
    DCGM_UNCORRECTABLE_REMAPPED_ROWS.name: Rename("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "4.9.0", "C alias"),
    DCGM_CORRECTABLE_REMAPPED_ROWS.name: Rename("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "4.9.0", "C alias"),
    DCGM_ROW_REMAP_FAILURE.name: Rename("DCGM_FI_DEV_ROW_REMAP_FAILED", "4.9.0", "C alias"),
    DCGM_GR_ENGINE_ACTIVE.name: Rename("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "4.9.0", "C alias"),
    DCGM_TENSOR_ACTIVE.name: Rename("DCGM_FI_PROF_TENSOR_UTIL_RATIO", "4.9.0", "C alias"),
    DCGM_DRAM_ACTIVE.name: Rename("DCGM_FI_PROF_DRAM_UTIL_RATIO", "4.9.0", "C alias"),
    DCGM_PCIE_TX_BYTES.name: Rename("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "4.10.0", "B"),
    DCGM_PCIE_RX_BYTES.name: Rename("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", "4.10.0", "B"),
}
# the driver label 4.9.0 writes (4.8: DCGM_FI_DRIVER_VERSION); a label, read by nothing here
DCGM_DRIVER_LABELS = ("DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION")

# --- label values that rules and checks select on ------------------------------------------

# dcgmHealthResult values of DCGM_EXP_GPU_HEALTH_STATUS (go-dcgm HealthResult constants).
DCGM_HEALTH_RESULT = {"pass": 0, "warn": 10, "fail": 20}
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
# DCGM's blank values (dcgm_structs.h): DCGM_INT64_BLANK (0x7ffffffffffffff0) and its siblings
# (NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED, one apart), DCGM_FP64_BLANK (2^47) and its four
# siblings. A field the driver has no value for reads one of these; they are never readings, and
# nothing a GPU measures reaches the lowest of them in any unit DCGM uses (2^47 bytes is 128 TiB,
# 2^47 Hz 140 THz, 2^47 mJ 4,000 years of a GPU's energy). The one definition: at or above
# DCGM_BLANK_FROM is no reading. The exporter drops them, the diagnosis drops them
# (diagnosis/measures.usable), and the rules compare `< DCGM_BLANK_FROM` (alerts/definitions.py).
DCGM_FP64_BLANK = 140737488355328.0
DCGM_FP64_BLANK_LAST = DCGM_FP64_BLANK + 4
DCGM_INT64_BLANK_FIRST = 0x7FFFFFFFFFFFFFF0 - 1  # an int: the page may hold it exactly
DCGM_BLANK_FROM = DCGM_FP64_BLANK


def is_dcgm_blank(value: float) -> bool:
    """A DCGM blank sentinel (no reading): at or above the lowest of dcgm_structs.h's blanks."""
    return value >= DCGM_BLANK_FROM


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

# Prefill and decode times are vLLM's own (request_prefill/decode_time_seconds): the tuned profile
# gives them millisecond edges with --custom-histogram-buckets; kvscope keeps histograms only where
# vLLM has none (per tenant and priority class, the gateway's own time).
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
GATEWAY_ADMITTED_PROMPT_TOKENS = _own(
    "kvscope_gateway_admitted_prompt_tokens",
    H,
    "tokens",
    "Prompt length of each request the gateway admitted, counted as it arrives (vLLM's own "
    "request_prompt_tokens is written when a request ends, late and short-biased under saturation).",
    *_REQ,
    buckets=PROMPT_TOKEN_BUCKETS,
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
GATEWAY_QUOTA_BACKEND_ERRORS = _own(
    "kvscope_gateway_quota_backend_errors_total",
    C,
    "errors",
    "Quota calls to the shared backend (Redis) that failed, by reason (timeout, connection, auth, error); "
    "each one was admitted or refused as quota_fail says.",
    "reason",
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
DISCOVERY_TARGETS = _own(
    "kvscope_discovery_targets",
    G,
    "targets",
    "vLLM targets the exporter found on its own at its last discovery, by method (procfs, kubernetes, kubelet).",
    "method",
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
GPU_XID_ESCALATED = _own(
    "kvscope_gpu_xid_escalated",
    G,
    "bool",
    "1 while an XID repeated on this GPU often enough within the window to escalate its action.",
    "gpu",
    "UUID",
    "xid",
    "action",
    "window",
)
GPU_XID_SOURCE_UP = _own(
    "kvscope_gpu_xid_source_up",
    G,
    "bool",
    "1 while this XID source (nvml events, kmsg kernel log) is being read.",
    "source",
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
GPU_PEAK_FLOPS = _own(
    "kvscope_gpu_peak_flops",
    G,
    "FLOP/s",
    "The GPU model's dense BF16 tensor peak (datasheet; kvscope.yaml gpu_models): MFU's denominator.",
    "gpu",
    "UUID",
)
GPU_MEMORY_BANDWIDTH = _own(
    "kvscope_gpu_memory_bandwidth_bytes",
    G,
    "bytes/s",
    "The GPU model's memory bandwidth (datasheet; kvscope.yaml gpu_models): the roofline's slope.",
    "gpu",
    "UUID",
)
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


def _per_slo_window(name: str, unit: str, help_text: str) -> dict[str, Signal]:
    """One recorded series per SLO window: `name` and `help_text` take the window as {w}."""
    return {
        w: Signal(
            name.format(w=w), Kind.GAUGE, unit, help_text.format(w=w), Source.RULE, ("slo", "namespace", "model_name")
        )
        for w in SLO_WINDOWS
    }


SLO_ERROR_RATIO = _per_slo_window("slo:sli_error:ratio_rate{w}", "ratio", "Share of SLO-bad events over {w}, per SLO.")
SLO_EVENTS = _per_slo_window(
    "slo:sli_events:increase{w}",
    "count",
    "SLO events (requests, or output tokens for ITL) counted over {w}, per SLO: a burn-rate alert needs "
    "enough of them in its long window for its ratio to mean anything.",
)
SLO_COVERAGE = _per_slo_window(
    "slo:sli_window_coverage:ratio{w}",
    "ratio",
    "Share of the {w} window the SLO's series fill (1: scraped for all of it): a ticket's ratio is "
    "diluted by it, since a few minutes of data say little of what days will do.",
)
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

# --- recording rules (alerts/rollups.py): per-engine and per-GPU rollups, mixin style ---------
# `level:metric:operations` (the metric's colons become underscores), grouped by the labels that
# identify an engine or a GPU, whichever of them the data carries (the diagnosis keys on the same)

ENGINE_IDENTITY = ("namespace", "pod", "instance", "target", "model_name", "engine")
# MIG instances are their own devices (GPU_I_ID); dcgm-exporter's Kubernetes mapping puts the pod
# using a GPU on its series; kvscope export --gpu emulated marks GPUs that make no claim on HBM
GPU_IDENTITY = (
    "Hostname",
    "hostname",
    "instance",
    "gpu",
    "UUID",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "modelName",
    "pod",
    "namespace",
    "emulated",
)
ROLLUP_INTERVAL = "1m"  # the rollups' group interval; the gauge rollups span it, so no peak falls between
ROLLUP_RATE_WINDOW = "5m"  # rates and quantiles: 4 scrapes at 15 s at least, as rate() wants


def _rollup(of: Signal, operation: str, help_: str, level: str = "instance", unit: str = "") -> Signal:
    """A rollup of `of` (its unit unless another is given)."""
    labels = ENGINE_IDENTITY if level == "instance" else GPU_IDENTITY
    name = f"{level}:{of.name.replace(':', '_').removesuffix('_total')}:{operation}"
    return Signal(name, Kind.GAUGE, unit or of.unit, help_, Source.RULE, labels)


_R, _W = ROLLUP_INTERVAL, ROLLUP_RATE_WINDOW
ROLLUP_KV_USAGE_MAX = _rollup(VLLM_KV_CACHE_USAGE, f"max{_R}", f"Peak KV-cache usage over {_R}, per engine.")
ROLLUP_WAITING_MAX = _rollup(VLLM_REQUESTS_WAITING, f"max{_R}", f"Peak waiting requests over {_R}.")
ROLLUP_PREEMPTION_RATE = _rollup(VLLM_NUM_PREEMPTIONS, f"rate{_W}", f"Preemptions per second over {_W}.", unit="1/s")
ROLLUP_QUEUE_P50 = _rollup(VLLM_QUEUE_TIME, f"p50_{_W}", f"Median time in queue over {_W}, per engine.")
ROLLUP_QUEUE_P99 = _rollup(VLLM_QUEUE_TIME, f"p99_{_W}", f"p99 time in queue over {_W}, per engine.")
ROLLUP_TTFT_P50 = _rollup(VLLM_TTFT, f"p50_{_W}", f"Median time to first token over {_W}, per engine.")
ROLLUP_TTFT_P99 = _rollup(VLLM_TTFT, f"p99_{_W}", f"p99 time to first token over {_W}, per engine.")
ROLLUP_ITL_P50 = _rollup(VLLM_ITL, f"p50_{_W}", f"Median inter-token latency over {_W}, per engine.")
ROLLUP_ITL_P99 = _rollup(VLLM_ITL, f"p99_{_W}", f"p99 inter-token latency over {_W}, per engine.")
ROLLUP_GPU_UTIL_AVG = _rollup(DCGM_GPU_UTIL, f"avg{_R}", f"Mean GPU utilisation over {_R}.", "gpu")
ROLLUP_SM_CLOCK_AVG = _rollup(DCGM_SM_CLOCK, f"avg{_R}", f"Mean SM clock over {_R}.", "gpu")
ROLLUP_GPU_TEMP_MAX = _rollup(DCGM_GPU_TEMP, f"max{_R}", f"Peak GPU temperature over {_R}.", "gpu")
ROLLUP_POWER_AVG = _rollup(DCGM_POWER_USAGE, f"avg{_R}", f"Mean power draw over {_R}.", "gpu")
ROLLUP_FB_USED_MAX = _rollup(DCGM_FB_USED, f"max{_R}", f"Peak framebuffer used over {_R}.", "gpu")
del _R, _W

del G, C, H, I


def all_signals() -> tuple[Signal, ...]:
    """Every catalog entry, in definition order (including the SLO recording rules)."""
    out: list[Signal] = []
    for v in list(globals().values()):  # a snapshot: never iterate a module's live namespace
        if isinstance(v, Signal):
            out.append(v)
        elif isinstance(v, dict) and v and all(isinstance(x, Signal) for x in v.values()):
            out.extend(v.values())
    return tuple(out)


def measurement_of(name: str) -> str:
    """The catalog's own name for a series under any name it has had (a dcgm-exporter 4.9 name
    in base units included); a name the catalog does not know is its own."""
    return _measurements().get(name, name)


@functools.cache
def _measurements() -> dict[str, str]:
    return {other: s.name for s in all_signals() for other in s.every_name}


DCGM_SHAPES = ("4.8", "4.9", "4.10")  # the default field names of dcgm-exporter 4.6-4.8, 4.9.x, 4.10.x


def dcgm_shape(name: str, shape: str) -> tuple[str, float]:
    """How dcgm-exporter `shape` writes the 4.8 field `name`: (its name, the factor that turns a
    4.8 value into that name's unit). NVLink's counter has no one-sample equivalent: kept."""
    if shape not in DCGM_SHAPES:
        raise ValueError(f"dcgm-exporter names: one of {', '.join(DCGM_SHAPES)}, not {shape!r}")
    rename = DCGM_EXPORTER_RENAMES.get(name)
    if rename is None or shape == "4.8" or name == DCGM_NVLINK_BANDWIDTH.name:
        return name, 1.0
    if rename.release == "4.10.0" and shape == "4.9":
        return name, 1.0
    signal = next(s for s in all_signals() if s.name == name)
    factor = signal.scale_of(rename.new)
    return rename.new, 1.0 / factor if factor else 1.0


# --- OpenTelemetry GenAI metrics (pushed over OTLP by kvscope serve, not scraped) -------------
# open-telemetry/semantic-conventions v1.41.0, docs/gen-ai/gen-ai-metrics.md (status Development:
# names, units and buckets may change; this is the version followed, docs/metrics.md says so).
GENAI_SEMCONV_VERSION = "1.41.0"
GENAI_PROVIDER = "vllm"  # gen_ai.provider.name: the engine that serves (no well-known value for it)


@dataclass(frozen=True)
class OtelHistogram:
    """One OpenTelemetry histogram: its name, unit (UCUM), explicit bucket bounds and meaning."""

    name: str
    unit: str
    buckets: tuple[float, ...]
    help: str


GENAI_REQUEST_DURATION = OtelHistogram(
    "gen_ai.server.request.duration",
    "s",
    (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
    "Generative AI server request duration such as time-to-last byte or last output token.",
)
GENAI_TIME_TO_FIRST_TOKEN = OtelHistogram(
    "gen_ai.server.time_to_first_token",
    "s",
    (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
    "Time to generate first token for successful responses.",
)
GENAI_TIME_PER_OUTPUT_TOKEN = OtelHistogram(
    "gen_ai.server.time_per_output_token",
    "s",
    (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
    "Time per output token generated after the first token for successful responses.",
)
GENAI_TOKEN_USAGE = OtelHistogram(
    "gen_ai.client.token.usage",
    "{token}",
    (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864),
    "Number of input and output tokens used (billable: what vLLM ran).",
)
GENAI_METRICS = (GENAI_REQUEST_DURATION, GENAI_TIME_TO_FIRST_TOKEN, GENAI_TIME_PER_OUTPUT_TOKEN, GENAI_TOKEN_USAGE)
