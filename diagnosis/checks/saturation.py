"""capacity_saturation: more load than the replicas serve. The queue and queue time grow,
throughput stopped rising, GPUs are busy, and neither the KV pool nor long prompts explain it:
everything queues evenly."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, scoped_findings, value
from diagnosis.checks.prefill import decode_stalls, long_prompt_tail
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    def judge(view: View) -> Hit | None:
        growing = (value(view, "waiting_slope") or 0) > ctx.limit(t.QUEUE_GROWTH)
        backlog = (value(view, "waiting_max") or 0) >= ctx.limit(t.QUEUE_BACKLOG)
        slow_queue = (value(view, "queue_p99") or 0) >= ctx.limit(t.QUEUE_TIME_P99)
        kv_ok = (value(view, "kv_usage_max") or 0) < ctx.limit(t.KV_USAGE_CRITICAL)
        few_preemptions = (value(view, "preemption_rate") or 0) <= ctx.limit(t.PREEMPTION_RATE)
        shape = ctx.shape(view)
        p50, p99 = value(shape, "ttft_p50"), value(shape, "ttft_p99")
        tail = p50 is not None and p99 is not None and p99 / max(p50, 1e-3) >= ctx.limit(t.TTFT_TAIL_RATIO)
        # long prompts that make the tail or stall decode explain the queue: head-of-line, not
        # capacity. A tail without long prompts (priority scheduling serving one class first) is
        # a queue all the same.
        even = not (long_prompt_tail(ctx, view) and (tail or decode_stalls(ctx, view)))
        # vLLM 0.32 with --max-num-queued-reqs: a capped queue cannot grow; refusals say it is full
        rejecting = (value(view, "rejection_rate") or 0) > 0
        if (((growing or backlog) and slow_queue) or rejecting) and kv_ok and few_preemptions and even:
            return Hit(view, value(view, "queue_p99") or 0)
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view = worst.view
        ev = [
            evidence(view, name, ctx.limit(limit))
            for name, limit in (("queue_p99", t.QUEUE_TIME_P99), ("waiting_max", t.QUEUE_BACKLOG))
            if view.get(name)
        ]
        if view.get("waiting_slope"):
            ev.append(evidence(view, "waiting_slope", ctx.limit(t.QUEUE_GROWTH)))
        recent, overall = value(view, "generation_tps_recent"), value(view, "generation_tps")
        if recent and overall and recent / overall >= ctx.limit(t.THROUGHPUT_FLAT):
            # throughput flat while the queue grows: at capacity
            ev.append(evidence(view, "generation_tps_recent", ctx.limit(t.THROUGHPUT_FLAT) * overall))
        busy = [g for g in ctx.gpus_with(view) if (ctx.util(g) or 0) >= ctx.limit(t.GPU_UTIL_BUSY)]
        ev += [evidence(g, "gpu_util_avg", ctx.limit(t.GPU_UTIL_BUSY)) for g in busy if g.get("gpu_util_avg")]
        if (value(view, "rejection_rate") or 0) > 0:  # a capped queue refuses what it cannot hold
            ev.append(evidence(view, "rejection_rate", 0))
        rate = value(view, "request_rate") or 0
        return Parts(
            Severity.WARNING,
            f"more load than {names(hits)} can serve: p99 queue time {value(view, 'queue_p99') or 0:.2f} s and up to "
            f"{value(view, 'waiting_max') or 0:.0f} waiting"
            + (
                f", {value(view, 'rejection_rate'):.2f} requests/s refused at the queue's cap"
                if (value(view, "rejection_rate") or 0) > 0
                else ""
            )
            + ", while KV cache and prompt lengths are not the limit.",
            ev,
            [
                f"add replicas: this one finishes {rate:.1f} requests/s and the queue still grows",
                "if GPUs are not busy, raise --max-num-seqs (more concurrent sequences per step) while KV usage "
                f"stays below {ctx.limit(t.KV_USAGE_WARNING):g}",
                "shed or defer low-priority load at the gateway (per-tenant token budgets, tiers)",
            ],
        )

    return scoped_findings("capacity_saturation", ctx.engines.values(), judge, describe, ctx)
