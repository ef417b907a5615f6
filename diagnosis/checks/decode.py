"""decode_bandwidth_bound: inter-token latency is high while the KV pool, the queue and the
clocks are fine: each decode step reads weights and KV from HBM, and at large batch that
read time is the step time."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.engines.values():
        itl = value(view, "itl_p99")
        if itl is None or itl < t.ITL_P99.value:
            continue
        kv_ok = (value(view, "kv_usage_max") or 0) < t.KV_USAGE_CRITICAL.value
        queue_ok = (value(view, "queue_p99") or 0) < t.QUEUE_TIME_P99.value
        few_preemptions = (value(view, "preemption_rate") or 0) <= t.PREEMPTION_RATE.value
        if kv_ok and queue_ok and few_preemptions:
            hits.append(view)
    if not hits:
        return None
    throttled = any((value(g, "throttle_active") or 0) >= t.THROTTLE_SHARE.value for g in ctx.gpus.values())
    if throttled:
        return None  # slow clocks explain it: that is thermal_power_throttling's finding
    view = max(hits, key=lambda v: value(v, "itl_p99") or 0)
    ev = [evidence(view, "itl_p99", t.ITL_P99), evidence(view, "kv_usage_max", t.KV_USAGE_CRITICAL)]
    confidence = 0.5
    dram = [g for g in ctx.gpus.values() if (value(g, "dram_active_avg") or 0) >= t.DRAM_ACTIVE_HIGH.value]
    if dram:
        ev.append(evidence(dram[0], "dram_active_avg", t.DRAM_ACTIVE_HIGH))
        confidence += 0.3
    names = ", ".join(describe(labels_of(v)) for v in hits)
    return Finding(
        id="decode_bandwidth_bound",
        severity=Severity.WARNING,
        confidence=confidence,
        summary=f"decode is slow on {names}: p99 inter-token latency "
        f"{(value(view, 'itl_p99') or 0) * 1000:.0f} ms while "
        "KV cache, queue and clocks are fine: steps are bound by HBM bandwidth.",
        affected=[affected(labels_of(v)) for v in hits],
        evidence=ev,
        remediation=[
            "--kv-cache-dtype fp8 halves the KV bytes each decode step reads",
            "speculative decoding with a draft model (kvscope serve --draft-model, GPU only) emits several "
            "tokens per step",
            "lower --max-num-seqs to trade throughput for inter-token latency, or add replicas",
        ],
    )
