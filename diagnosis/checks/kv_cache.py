"""kv_cache_exhaustion: the KV pool is full and the engine preempts (or swaps, on V0), so
requests recompute their prefill and the queue grows (seed 000: the avalanche)."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from diagnosis.planner import sequences_that_fit
from kvscope import thresholds as t


def _capacity(view: dict) -> float | None:
    tokens = value(view, "kv_capacity_tokens")
    if tokens:
        return tokens
    for v in view.get("cache_config", []):
        try:
            return float(v.labels["num_gpu_blocks"]) * float(v.labels["block_size"])
        except (KeyError, ValueError):
            continue
    return None


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.engines.values():
        kv = value(view, "kv_usage_max")
        preempt = value(view, "preemption_rate") or 0.0
        swapped = value(view, "swapped_max") or 0.0
        full = kv is not None and kv >= t.KV_USAGE_CRITICAL.value
        # vLLM preempts only when no free KV block is left, so sustained preemptions prove the pool
        # ran out even when the sampled usage gauge (which swings within a second) missed the peak
        if preempt > t.PREEMPTION_RATE.value or (full and swapped > 0):
            hits.append(view)
    if not hits:
        return None
    ev, confidence = [], 0.6
    for view in hits:
        if view.get("kv_usage_max"):
            ev.append(evidence(view, "kv_usage_max", t.KV_USAGE_CRITICAL))
        if view.get("preemption_rate"):
            ev.append(evidence(view, "preemption_rate", t.PREEMPTION_RATE))
        if view.get("swapped_max") and (value(view, "swapped_max") or 0) > 0:
            ev.append(evidence(view, "swapped_max", 0))
        if (value(view, "waiting_slope") or 0) > t.QUEUE_GROWTH.value or (value(view, "waiting_max") or 0) > 0:
            ev.append(evidence(view, "waiting_max", t.QUEUE_BACKLOG))
    worst = max(hits, key=lambda v: value(v, "preemption_rate") or 0)
    rate = value(worst, "preemption_rate") or 0.0
    confidence += 0.2 if rate > 10 * t.PREEMPTION_RATE.value else 0.1
    confidence += 0.15 if (value(worst, "waiting_max") or 0) > 0 else 0
    peak = value(worst, "kv_usage_max")
    if peak is None or peak < t.KV_USAGE_CRITICAL.value:
        confidence -= 0.1
        usage = (
            f"sampled usage peaked at {peak:.0%} (the pool filled between samples)"
            if peak is not None
            else "no usage gauge"
        )
    else:
        usage = f"usage {peak:.0%}"
    names = ", ".join(describe(labels_of(v)) for v in hits)
    return Finding(
        id="kv_cache_exhaustion",
        severity=Severity.CRITICAL,
        confidence=confidence,
        summary=f"KV cache full on {names}: {usage} with "
        f"{rate:.2f} preemptions/s; requests are evicted and recompute their prefill.",
        affected=[affected(labels_of(v)) for v in hits],
        evidence=ev,
        remediation=_remediation(worst),
    )


def _remediation(view: dict) -> list[str]:
    out = []
    capacity = _capacity(view)
    prompt = value(view, "prompt_p99")
    if capacity and prompt:
        fits = sequences_that_fit(capacity, prompt + 512)
        out.append(
            f"the pool holds {capacity:,.0f} tokens: at the p99 prompt ({prompt:,.0f} tokens) plus "
            f"512 output tokens only {fits} sequences fit; cap concurrency with --max-num-seqs {max(fits, 1)} "
            "or grow the pool (kvscope plan shows the numbers)"
        )
    out += [
        "grow the KV pool: --kv-cache-dtype fp8 halves KV bytes per token (compute capability >= 8.9); "
        "--gpu-memory-utilization 0.88 (kvscope serve --profile tuned)",
        "--block-size 32 (64 past 128K context) to cut fragmentation (seed 000)",
        "cap request size at the gateway (prompt + max_tokens, seed 000: 16K per request) and clamp max_tokens "
        "per tier",
        "add replicas if the load itself grew: the pool is per engine",
    ]
    return out
