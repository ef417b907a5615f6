"""decode_bandwidth_bound: inter-token latency is high while the KV pool, the queue and the
clocks are fine: each decode step reads weights and KV from HBM, and at large batch that
read time is the step time.

Only where the engine keeps up: one whose queue grows is at its capacity (capacity_saturation
names that), however slow its steps. And only a real GPU's HBM is named: on emulated GPUs or a
CPU engine the finding says the steps are slow, not why."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, labels_of, names, scoped_findings, value
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    itl_limit = ctx.limit(t.ITL_P99)

    def judge(view: View) -> Hit | None:
        itl = value(view, "itl_p99")
        if itl is None or itl < itl_limit:
            return None
        kv_ok = (value(view, "kv_usage_max") or 0) < ctx.limit(t.KV_USAGE_CRITICAL)
        queue_ok = (value(view, "queue_p99") or 0) < ctx.limit(t.QUEUE_TIME_P99)
        few_preemptions = (value(view, "preemption_rate") or 0) <= ctx.limit(t.PREEMPTION_RATE)
        # a queue that grows: arrivals outrun the engine, which is at capacity (capacity_saturation)
        keeping_up = (value(view, "waiting_slope") or 0) <= ctx.limit(t.QUEUE_GROWTH)
        return Hit(view, itl) if kv_ok and queue_ok and few_preemptions and keeping_up else None

    def describe(worst: Hit, hits: list[Hit]) -> Parts | None:
        # slow clocks on the same machine explain it: the incident then is thermal_power_throttling's
        ev = [
            evidence(worst.view, "itl_p99", itl_limit),
            evidence(worst.view, "kv_usage_max", ctx.limit(t.KV_USAGE_CRITICAL), above=False),
        ]
        dram_limit = ctx.limit(t.DRAM_ACTIVE_HIGH)
        dram = [g for g in ctx.gpus_with(worst.view) if (value(g, "dram_active_avg") or 0) >= dram_limit]
        if dram:
            ev.append(evidence(dram[0], "dram_active_avg", dram_limit))
        real_gpus = [g for g in ctx.gpus_with(worst.view) if labels_of(g).get("emulated") != "true"]
        why = (
            "steps are bound by HBM bandwidth"
            if real_gpus
            else "each step takes long (no real GPU is in its scope to tell why)"
        )
        return Parts(
            Severity.WARNING,
            f"decode is slow on {names(hits)}: p99 inter-token latency {worst.score * 1000:.0f} ms while "
            f"KV cache, queue and clocks are fine: {why}.",
            ev,
            [
                "--kv-cache-dtype fp8 halves the KV bytes each decode step reads",
                "speculative decoding with a draft model (kvscope serve --draft-model, GPU only) emits several "
                "tokens per step",
                "lower --max-num-seqs to trade throughput for inter-token latency, or add replicas",
            ],
        )

    return scoped_findings("decode_bandwidth_bound", ctx.engines.values(), judge, describe, ctx)
