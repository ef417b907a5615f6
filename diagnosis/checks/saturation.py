"""capacity_saturation: more load than the replicas serve. The queue and queue time grow,
throughput stopped rising, GPUs are busy, and neither the KV pool nor long prompts explain it:
everything queues evenly."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.engines.values():
        growing = (value(view, "waiting_slope") or 0) > t.QUEUE_GROWTH.value
        backlog = (value(view, "waiting_max") or 0) >= t.QUEUE_BACKLOG.value
        slow_queue = (value(view, "queue_p99") or 0) >= t.QUEUE_TIME_P99.value
        kv_ok = (value(view, "kv_usage_max") or 0) < t.KV_USAGE_CRITICAL.value
        few_preemptions = (value(view, "preemption_rate") or 0) <= t.PREEMPTION_RATE.value
        p50, p99 = value(view, "ttft_p50"), value(view, "ttft_p99")
        even = p50 is None or p99 is None or p99 / max(p50, 1e-3) < t.TTFT_TAIL_RATIO.value
        if (growing or backlog) and slow_queue and kv_ok and few_preemptions and even:
            hits.append(view)
    if not hits:
        return None
    view = max(hits, key=lambda v: value(v, "queue_p99") or 0)
    ev = [
        evidence(view, "queue_p99", t.QUEUE_TIME_P99),
        evidence(view, "waiting_max", t.QUEUE_BACKLOG),
    ]
    if view.get("waiting_slope"):
        ev.append(evidence(view, "waiting_slope", t.QUEUE_GROWTH))
    confidence = 0.55
    recent, overall = value(view, "generation_tps_recent"), value(view, "generation_tps")
    if recent and overall and recent / overall >= t.THROUGHPUT_FLAT.value:
        ev.append(evidence(view, "generation_tps_recent"))
        confidence += 0.15  # throughput flat while the queue grows: at capacity
    busy = [u for g in ctx.gpus.values() if (u := value(g, "gpu_util_avg")) is not None]
    if busy and min(busy) >= t.GPU_UTIL_BUSY.value:
        confidence += 0.15
    rate = value(view, "request_rate") or 0
    names = ", ".join(describe(labels_of(v)) for v in hits)
    return Finding(
        id="capacity_saturation",
        severity=Severity.WARNING,
        confidence=confidence,
        summary=f"more load than {names} can serve: p99 queue time {value(view, 'queue_p99'):.2f} s and up to "
        f"{value(view, 'waiting_max'):.0f} waiting, while KV cache and prompt lengths are not the limit.",
        affected=[affected(labels_of(v)) for v in hits],
        evidence=ev,
        remediation=[
            f"add replicas: this one finishes {rate:.1f} requests/s and the queue still grows",
            "if GPUs are not busy, raise --max-num-seqs (more concurrent sequences per step) while KV usage "
            "stays below 0.85",
            "shed or defer low-priority load at the gateway (per-tenant token budgets, tiers)",
        ],
    )
