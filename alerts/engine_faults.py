"""Alerts on what vLLM 0.32 counts and older versions did not: requests refused at admission,
requests served with NaN logits, failing KV transfers; and on DCGM's health watches
(dcgm-exporter 4.x). Built like the rules in alerts/definitions.py, with their promtool cases."""

from __future__ import annotations

from alerts.definitions import ENGINE, GPU_BY, HOST, LATENCY, Alert, Case, Fixtures, per_minute
from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.config import Config
from kvscope.promql import Expr, Selector, metric


def _rate_over(signal: c.Signal, config: Config, window: str = "5m") -> Expr:
    return metric(signal, config.engine_selector).rate(window).sum(ENGINE)


def engine_alerts(config: Config) -> list[Alert]:
    lim, fx, sel = config.thresholds, Fixtures(config), config.engine_selector
    refused, failing = lim[t.ADMISSION_REJECTION_RATE], lim[t.KV_TRANSFER_FAILURE_RATE]
    corrupted = metric(c.VLLM_CORRUPTED_REQUESTS, sel).increase_from_zero("10m").sum(ENGINE)
    transfers = (c.VLLM_NIXL_FAILED_TRANSFERS, c.VLLM_KV_OFFLOAD_ALLOCATION_FAILURES)
    transfer_expr = _rate_over(transfers[0], config).gt(failing.value)
    for signal in transfers[1:]:
        transfer_expr = transfer_expr.or_(_rate_over(signal, config).gt(failing.value))
    reason = {"reason": "max_num_queued_reqs"}
    stall = lim[t.ENGINE_STALL]
    rank = (*ENGINE, "engine")  # per data-parallel engine: one hung rank beside healthy ones
    in_flight = metric(c.VLLM_REQUESTS_RUNNING, sel).sum(rank) + metric(c.VLLM_REQUESTS_WAITING, sel).sum(rank)
    # as the check (diagnosis/checks/progress.py): an engine that aborted requests lately is not
    # hung (a hung engine core processes no abort); its gauges hold the last step's counts
    aborted = metric(c.VLLM_REQUEST_SUCCESS, sel & Selector.of(finished_reason="abort")).rate("5m").sum(rank)
    no_progress = (
        in_flight.ge(stall.value)
        .and_(metric(c.VLLM_GENERATION_TOKENS, sel).rate("5m").sum(rank).eq(0))
        .and_(metric(c.VLLM_PROMPT_TOKENS, sel).rate("5m").sum(rank).eq(0))
        .unless(aborted.gt(0))
    )
    frozen = {fx.engine(c.VLLM_GENERATION_TOKENS): "500x20", fx.engine(c.VLLM_PROMPT_TOKENS): "9000x20"}
    return [
        Alert(
            "VLLMEngineStalled",
            str(no_progress),
            "critical",
            "vLLM makes no progress with requests in flight.",
            '{{ $labels.instance }} has {{ $value | printf "%.0f" }} requests running or waiting and has '
            "prefilled and generated nothing for 10 minutes (a 5-minute rate, held 5 minutes) while it still "
            "answers its scrape: a hang (NCCL, a deadlocked worker, a KV load that never returns) that /health "
            "does not see (an engine that aborted requests in those minutes is left out: its gauges can stay stale "
            "after a mass abort, vllm-project/vllm#22545).",
            explained_by=("engine_stall", "gpu_hardware_fault"),
            fires=Case(
                {**frozen, fx.engine(c.VLLM_REQUESTS_RUNNING): "2x20", fx.engine(c.VLLM_REQUESTS_WAITING): "3x20"},
                "12m",
                fx.engine_labels,
                5.0,
                lead=5,
            ),
            more=(
                Case(  # waiting alone: admission itself is stuck
                    {**frozen, fx.engine(c.VLLM_REQUESTS_RUNNING): "0x20", fx.engine(c.VLLM_REQUESTS_WAITING): "4x20"},
                    "12m",
                    fx.engine_labels,
                    4.0,
                    lead=5,
                ),
                Case(  # every client gave up at once: aborted, idle, the gauges stale
                    {
                        **frozen,
                        fx.engine(c.VLLM_REQUESTS_RUNNING): "2x20",
                        fx.engine(c.VLLM_REQUESTS_WAITING): "3x20",
                        fx.engine(c.VLLM_REQUEST_SUCCESS, finished_reason="abort"): per_minute(0.5),
                    },
                    "12m",
                ),
            ),
            silent=Case(  # a slow engine still makes progress
                {
                    fx.engine(c.VLLM_GENERATION_TOKENS): per_minute(0.5),
                    fx.engine(c.VLLM_PROMPT_TOKENS): "9000x20",
                    fx.engine(c.VLLM_REQUESTS_RUNNING): "2x20",
                    fx.engine(c.VLLM_REQUESTS_WAITING): "3x20",
                },
                "12m",
            ),
            for_=stall.for_,
        ),
        Alert(
            "VLLMAdmissionRejections",
            str(_rate_over(c.VLLM_ADMISSION_REJECTIONS, config).gt(refused.value)),
            "critical",
            "vLLM is refusing requests at admission.",
            '{{ $labels.instance }} refuses {{ $value | printf "%.3g" }} requests per second: its queue cap '
            "(--max-num-queued-reqs / --max-num-queued-tokens) is reached and clients get errors.",
            explained_by=LATENCY,
            fires=Case(
                {fx.engine(c.VLLM_ADMISSION_REJECTIONS, **reason): per_minute(2 * refused.value)},
                "10m",
                fx.engine_labels,
                2 * refused.value,
                lead=5,
            ),
            silent=Case({fx.engine(c.VLLM_ADMISSION_REJECTIONS, **reason): per_minute(0.5 * refused.value)}, "10m"),
            for_=refused.for_,
        ),
        Alert(
            "VLLMCorruptedRequests",
            str(corrupted.gt(0)),
            "critical",
            "vLLM served requests with NaN logits.",
            "{{ $labels.instance }} finished requests whose logits held NaNs in the last 10 minutes: their output "
            "is wrong (a numerical fault: quantisation, a kernel, or the GPU).",
            explained_by=("gpu_hardware_fault",),
            fires=Case({fx.engine(c.VLLM_CORRUPTED_REQUESTS): "0 0 0 1 1 1"}, "4m", fx.engine_labels, 1.0),
            silent=Case({fx.engine(c.VLLM_CORRUPTED_REQUESTS): "0 0 0 0 0 0"}, "4m"),
        ),
        Alert(
            "VLLMKVTransferFailures",
            str(transfer_expr),
            "warning",
            "vLLM KV transfers are failing.",
            '{{ $labels.instance }} fails {{ $value | printf "%.3g" }} KV transfers per second (NIXL, or offload '
            "allocations): those requests recompute their prefill or fail.",
            explained_by=("kv_transfer_failure", "kv_cache_exhaustion", "capacity_saturation", "pcie_bottleneck"),
            fires=Case(
                {fx.engine(c.VLLM_KV_OFFLOAD_ALLOCATION_FAILURES): per_minute(2 * failing.value)},
                "12m",
                fx.engine_labels,
                2 * failing.value,
                lead=5,
            ),
            more=(
                Case(
                    {fx.engine(c.VLLM_NIXL_FAILED_TRANSFERS): per_minute(3 * failing.value)},
                    "12m",
                    fx.engine_labels,
                    3 * failing.value,
                    lead=5,
                ),
            ),
            silent=Case({fx.engine(c.VLLM_NIXL_FAILED_TRANSFERS): per_minute(0.5 * failing.value)}, "12m"),
            for_=failing.for_,
        ),
    ]


def gpu_alerts(config: Config) -> list[Alert]:
    fx, sel = Fixtures(config), config.gpu_selector
    health = metric(c.DCGM_EXP_HEALTH, sel).max((*GPU_BY, "health_watch", "health_error_code"))
    fail, warn = c.DCGM_HEALTH_RESULT["fail"], c.DCGM_HEALTH_RESULT["warn"]
    watch = {"health_watch": "PCIE", "health_error_code": "DCGM_FR_PCI_REPLAY_RATE"}
    series = fx.gpu(c.DCGM_EXP_HEALTH, **watch)
    labels = {**fx.gpu_labels(*GPU_BY), **watch}
    explained = ("gpu_hardware_fault", "thermal_power_throttling", "pcie_bottleneck")
    return [
        Alert(
            "GPUHealthWatchFailed",
            str(health.ge(fail)),
            "critical",
            "A DCGM health watch failed on a GPU.",
            "DCGM's {{ $labels.health_watch }} watch fails on GPU {{ $labels.gpu }} of " + HOST + " "
            "({{ $labels.health_error_code }}): drain the GPU and follow the error code's action.",
            explained_by=explained,
            fires=Case({series: f"{fail}x10"}, "2m", labels, fail),
            silent=Case({series: f"{warn}x10"}, "2m"),
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUHealthWatchWarning",
            str(health.ge(warn).and_(health.lt(fail))),
            "warning",
            "A DCGM health watch warns on a GPU.",
            "DCGM's {{ $labels.health_watch }} watch warns on GPU {{ $labels.gpu }} of " + HOST + " "
            "({{ $labels.health_error_code }}) for 10 minutes.",
            explained_by=explained,
            fires=Case({series: f"{warn}x20"}, "12m", labels, warn),
            silent=Case({series: "0x20"}, "12m"),
            for_="10m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
    ]
