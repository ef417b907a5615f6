"""docs/runbooks.md: one section per alert (meaning, first checks, the diagnosis command, fixes),
generated with the rules so every runbook_url anchor exists."""

from __future__ import annotations

from pathlib import Path

from alerts import definitions as d
from alerts.build import build_rules, diagnose_command
from kvscope import catalog
from kvscope.config import Config

RUNBOOKS_FILE = "runbooks.md"

# alert -> (first checks, fixes)
GUIDE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "VLLMKVCacheNearlyFull": (
        (f"Is the prompt length growing ({catalog.VLLM_REQUEST_PROMPT_TOKENS.name} p99)?", "Are preemptions starting?"),
        (
            "Grow the pool: --kv-cache-dtype fp8 (compute capability >= 8.9), --gpu-memory-utilization 0.88.",
            "Cap request size and max_tokens per tier at the gateway.",
            "Add a replica before the avalanche.",
        ),
    ),
    "VLLMKVCacheExhausted": (
        (
            "Which instance? The alert's pod/instance label.",
            "Did the prompt mix change (seed 000: 6.4K -> 11.8K tokens)?",
            "Queue and TTFT on the overview dashboard's engine row.",
        ),
        (
            "kvscope plan gives the pool size and the --max-num-seqs that fits.",
            "--kv-cache-dtype fp8 halves KV bytes per token; --block-size 32.",
            "Shed long requests at the gateway (max_request_tokens), add replicas.",
        ),
    ),
    "VLLMPreemptionsHigh": (
        ("KV usage on the same instance.", "Long generations (max_tokens) holding blocks?"),
        ("As for VLLMKVCacheExhausted: more pool, fewer concurrent sequences, clamp max_tokens.",),
    ),
    "VLLMQueueBacklog": (
        ("Is KV full (then it is the KV alert's problem)?", "Is the GPU busy, and throughput flat?"),
        ("Add replicas (seed 002).", "Raise --max-num-seqs if KV and GPU have room.", "Shed low tiers at the gateway."),
    ),
    "VLLMQueueTimeHigh": (
        ("Queue depth and its trend.", "A few long prompts (TTFT tail vs median)?"),
        ("Capacity: add replicas.", "Head-of-line: chunked prefill with --long-prefill-token-threshold, priority QoS."),
    ),
    "VLLMTTFTHigh": (
        ("Queue time (waiting) vs prefill time (computing)?", "Prompt length tail?"),
        ("Queueing: capacity.", "Long prompts: kvscope serve --profile tuned (bounded prefill, priority by length)."),
    ),
    "VLLMPrefixCacheHitRateDrop": (
        (
            "Did the prompt template change? A timestamp or id before the shared system prompt?",
            "Did routing change (sessions spread over replicas)?",
        ),
        ("Keep the shared prefix first and byte-identical.", "Prefix-aware routing.", "--enable-prefix-caching on."),
    ),
    "VLLMErrorRatioHigh": (
        ("finished_reason: abort (deadlines, client disconnects) or error (engine)?", "Engine logs."),
        ("Aborts from deadlines: capacity or shorter requests.", "Errors: the engine log and the GPU (XIDs)."),
    ),
    "KvscopeTargetDown": (
        ("Is the vLLM pod running? Its /health?", "Network policy between the exporter and the pod?"),
        ("Restart the engine pod if it is wedged.", "Fix the target list in the exporter's config."),
    ),
    "KvscopeCollectorFailing": (
        ("The exporter's log names the collector's error.", "NVML/DCGM: driver loaded, nv-hostengine running?"),
        ("Restart the exporter after fixing the source; other collectors keep serving meanwhile.",),
    ),
    "GPUMemoryFull": (
        (
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
            f"{catalog.GPU_PROCESS_INFO.name} on the GPU fleet dashboard: a process that is not the engine?",
        ),
        (
            "Move the co-located process off the GPU.",
            "A leak in the engine: restart it.",
            "Leave headroom: --gpu-memory-utilization 0.88.",
        ),
    ),
    "GPUUtilLow": (
        ("Request rate on the instances using the GPU.",),
        ("Consolidate replicas or share GPUs (MIG); scale down off-peak (seed 002).",),
    ),
    "GPUXidAppLevel": (
        ("dmesg -T | grep -i xid for the full line.", "Did the engine crash or restart?"),
        ("Restart the application; if repeated on one GPU, run DCGM diagnostics (dcgmi diag -r 3).",),
    ),
    "GPUXidResetRequired": (
        ("dmesg -T | grep -i xid", "nvidia-smi -q -d ECC,ROW_REMAPPER"),
        ("Drain the GPU's workloads, reset it (nvidia-smi -r -i <gpu>), contact support if it recurs.",),
    ),
    "GPUXidDrainNode": (
        ("dmesg -T | grep -i xid", "Is the GPU still listed by nvidia-smi?"),
        ("kubectl cordon <node> && kubectl drain <node> --ignore-daemonsets; reboot; contact support (XID 79).",),
    ),
    "GPUXIDReported": (
        ("Which XID? The err_code label; the XID table on the GPU fleet dashboard.", "dmesg -T | grep -i xid"),
        ("Act by the XID's bucket: restart the app, reset the GPU, or drain the node.",),
    ),
    "GPURowRemapFailure": (
        ("nvidia-smi -q -d ROW_REMAPPER",),
        ("Drain and reset the GPU; a failed remap means the HBM needs service.",),
    ),
    "GPUThrottled": (
        ("nvidia-smi -q -d PERFORMANCE (which reason is active)", "Temperature and power vs limit."),
        (
            "Thermal: fans, airflow, inlet temperature.",
            "Power: restore the limit (nvidia-smi -pl) or cap deliberately "
            "and lower --max-num-batched-tokens (seed 004).",
        ),
    ),
    "GPUTemperatureHigh": (
        ("Fan speed, inlet temperature, neighbours in the chassis.",),
        ("Fix cooling; move load off the GPU meanwhile.",),
    ),
    "GPUPCIeLinkDegraded": (
        (
            "lspci -vv -s <bus id> | grep -E 'LnkCap|LnkSta' while the GPU works (an idle GPU shows a lower "
            "speed, '(downgraded)', on purpose: it saves power and trains back up under load)",
        ),
        ("Reseat or replace the card or riser; check BIOS PCIe settings.",),
    ),
    "GPUPCIeSaturated": (
        (
            "What crosses PCIe: KV offload, swapping, host-side pre/post-processing, "
            "TP without NVLink (nvidia-smi topo -m)?",
        ),
        ("Keep KV on the GPU (fp8 KV, a bigger pool).", "Keep tensor-parallel groups on NVLink within one NUMA node."),
    ),
    "GPUPCIeReplays": (
        (f"lspci -vv link status; {catalog.DCGM_PCIE_REPLAY.name} history.",),
        ("Reseat or replace the card or riser.",),
    ),
    "VLLMAdmissionRejections": (
        (
            f"Which reason ({catalog.VLLM_ADMISSION_REJECTIONS.name} by reason): the request or the token cap?",
            "Is the queue long because KV is full (then the KV alerts' fixes) or because load outgrew the replicas?",
        ),
        (
            "Add replicas; raise --max-num-queued-reqs / --max-num-queued-tokens only if the queue time allows.",
            "Shed or delay low tiers at the gateway before vLLM refuses everyone alike.",
        ),
    ),
    "VLLMCorruptedRequests": (
        (
            "Which model, quantisation and kernel backend? A recent upgrade?",
            "XIDs, ECC errors or a failing DCGM health watch on the engine's GPUs?",
        ),
        (
            "Take the replica out of rotation; rerun the prompts on another GPU to tell the GPU from the model.",
            "Roll back the model, quantisation or vLLM version that started it.",
        ),
    ),
    "VLLMKVTransferFailures": (
        (
            "NIXL (prefill/decode disaggregation) or the offload tier (allocation failures: it is full)?",
            f"{catalog.VLLM_NIXL_EXPIRED_REQUESTS.name}: is the decode side too slow to fetch in time?",
        ),
        ("Offload: grow the tier or lower what is stored; NIXL: check the RDMA/NVLink path and the lease timeout.",),
    ),
    "GPUHealthWatchFailed": (
        ("Which watch and error code (labels)?", "dcgmi health --check -g <group>; dcgmi diag -r 2 on the GPU."),
        ("Drain the GPU (cordon the node), follow the DCGM_FR_* code's action, then reset or replace.",),
    ),
    "GPUHealthWatchWarning": (
        ("Which watch and error code (labels)? Trending towards fail?",),
        ("Plan maintenance; dcgmi diag -r 1 at the next drain.",),
    ),
    "KvscopeSLOTtftBoundNotABucket": (
        ("Which vLLM version and --custom-histogram-buckets does the engine run with?",),
        ("Set slo.ttft.seconds to an edge of the data, or add the edge to the time_to_first_token family.",),
    ),
    "KvscopeSLOItlBoundNotABucket": (
        ("Which vLLM version and --custom-histogram-buckets does the engine run with?",),
        ("Set slo.itl.seconds to an edge of the data, or add the edge to the inter_token_latency family.",),
    ),
}
SLO_GUIDE = (
    (
        "Which objective (the slo label) and which model? The burn rate over the windows.",
        "The overview dashboard: TTFT quantiles, error ratio by finish reason.",
        "Quiet on a model with little traffic? A pair counts once its long window holds slo.min_bad_events "
        "bad events at its line (slo:sli_events:increase<window>): a ratio of a few events is noise.",
        "A ticket on new series? Its ratio is diluted by the share of its long window they fill "
        "(slo:sli_window_coverage:ratio<window>): minutes of data do not say what days will do.",
    ),
    ("Page: find the cause now (kvscope diagnose); Ticket: the budget will run out within the period at this rate.",),
)


def render(config: Config | None = None, runbook_base: str = d.RUNBOOK_BASE) -> str:
    _, alerts = build_rules(config, runbook_base)
    lines = [
        "# Runbooks",
        "",
        "Generated with the alert rules by `kvscope alerts build`; one section per alert. Every alert's "
        "description ends with the `kvscope diagnose` command for it.",
        "",
    ]
    for alert in alerts:
        checks, fixes = GUIDE.get(alert.name, SLO_GUIDE if alert.name.startswith("SLO") else ((), ()))
        lines += [
            f'<a id="{alert.anchor}"></a>',
            f"## {alert.name}",
            "",
            f"**Severity:** {alert.severity}. **Meaning:** {alert.summary}",
            "",
            f"Fires on `{alert.expr}`" + (f" for {alert.for_}." if alert.for_ not in ("0m", "") else "."),
            "",
            "**First checks**",
            "",
        ]
        lines += [f"- {x}" for x in checks]
        lines += [
            "",
            "**Diagnose**",
            "",
            "```",
            diagnose_command(alert.diagnose_scope)
            .replace("{{ $externalURL }}", "$PROMETHEUS_URL")
            .replace(f"{{{{ $labels.{alert.diagnose_scope} }}}}", f"<{alert.diagnose_scope}>"),
            "```",
            "",
            "**Fixes**",
            "",
        ]
        lines += [f"- {x}" for x in fixes] + [""]
    return "\n".join(lines)


def write(path: Path, config: Config | None = None, runbook_base: str = d.RUNBOOK_BASE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(config, runbook_base))
    return path
