"""kv_cache_exhaustion: the KV pool is full and the engine preempts (or swaps, on V0), so
requests recompute their prefill and the queue grows (seed 000: the avalanche); or it stays full
and requests queue for blocks without being evicted (V1 admits none until blocks free)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t
from kvscope.model_shape import sequences_that_fit


def _capacity(view: View) -> float | None:
    tokens = value(view, "kv_capacity_tokens")
    if tokens:
        return tokens
    for v in view.get("cache_config", []):
        try:
            return float(v.labels["num_gpu_blocks"]) * float(v.labels["block_size"])
        except (KeyError, ValueError):
            continue
    return None


def check(ctx: Context) -> list[Finding]:
    full_at, preempt_limit = ctx.limit(t.KV_USAGE_CRITICAL), ctx.limit(t.PREEMPTION_RATE)

    def judge(view: View) -> Hit | None:
        kv = value(view, "kv_usage_max")
        preempt = value(view, "preemption_rate") or 0.0
        swapped = value(view, "swapped_max") or 0.0
        full = kv is not None and kv >= full_at
        # vLLM preempts only when no free KV block is left, so sustained preemptions prove the pool
        # ran out even when the sampled usage gauge (which swings within a second) missed the peak;
        # with the gauge below the line, only where requests pay for it (a growing queue, queue time
        # or TTFT past their lines): preemptions spread thin, each request once, are how a busy pool
        # works (inference-sim/inference-sim#963: 7 % of requests preempted once, no storm)
        if (preempt > preempt_limit and (full or _paid_for(ctx, view))) or (full and swapped > 0):
            return Hit(view, preempt)
        # kvscope serve's KV lanes hold requests at the gateway instead of letting the engine preempt:
        # a full pool with requests waiting there for their class's KV share has run out all the same
        # (the gateway counts them for its whole server: on the server's view, not the engine's)
        lanes = view if view.get("held_max") else ctx.server_view(view)
        if full and lanes is not None and (value(lanes, "held_max") or 0) >= 1:
            return Hit(view, preempt, {"lanes": lanes})
        # vLLM V1 preempts only a running request that cannot grow; a waiting one that cannot get
        # its blocks is not admitted, and nothing behind it is (vllm-project/vllm#31731): a pool
        # that stays full shows as a queue that pays for it, not as evictions (vllm#23444)
        if full and _queued_for_it(ctx, view):
            return Hit(view, preempt, {"queued": True})
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        ev: list[Evidence] = []
        for hit in hits:
            view = hit.view
            if view.get("kv_usage_max"):
                ev.append(evidence(view, "kv_usage_max", full_at))
            if view.get("preemption_rate"):
                ev.append(evidence(view, "preemption_rate", preempt_limit))
            if (value(view, "swapped_max") or 0) > 0:
                ev.append(evidence(view, "swapped_max", 0))
            growing = (value(view, "waiting_slope") or 0) > ctx.limit(t.QUEUE_GROWTH)
            if growing or (value(view, "waiting_max") or 0) > 0:
                ev.append(evidence(view, "waiting_max", ctx.limit(t.QUEUE_BACKLOG)))
        rate = worst.score
        lanes = worst.facts.get("lanes")
        if lanes is not None:  # the lane held them: long prompts wait, nothing is evicted
            return Parts(
                Severity.WARNING,
                f"KV cache full on {names(hits)}: usage {value(worst.view, 'kv_usage_max'):.0%}, with up to "
                f"{value(lanes, 'held_max'):.0f} requests held at the gateway for their class's KV share "
                f"({rate:.2f} preemptions/s): long prompts wait for KV and their time to first token follows, "
                "the others are unaffected.",
                [*ev, evidence(lanes, "held_max", 1)],
                _remediation(worst.view),
            )
        if worst.facts.get("queued"):  # admitted as blocks free: requests wait, nothing is evicted
            view = worst.view
            queue = [evidence(view, "queue_p99", ctx.limit(t.QUEUE_TIME_P99))] if view.get("queue_p99") else []
            waiting, queue_p99 = value(view, "waiting_max") or 0, value(view, "queue_p99") or 0
            return Parts(
                Severity.WARNING,
                f"KV cache full on {names(hits)}: usage {value(view, 'kv_usage_max'):.0%}, up to "
                f"{waiting:.0f} waiting with p99 queue time {queue_p99:.2f} s "
                f"({rate:.2f} preemptions/s): new requests wait for blocks to free, nothing is evicted.",
                [*ev, *queue],
                _remediation(view),
            )
        peak = value(worst.view, "kv_usage_max")
        if peak is None or peak < full_at:
            usage = (
                f"sampled usage peaked at {peak:.0%} (the pool filled between samples)"
                if peak is not None
                else "no usage gauge"
            )
        else:
            usage = f"usage {peak:.0%}"
        return Parts(
            Severity.CRITICAL,
            f"KV cache full on {names(hits)}: {usage} with {rate:.2f} preemptions/s; requests are evicted and "
            "recompute their prefill.",
            ev,
            _remediation(worst.view),
        )

    return scoped_findings("kv_cache_exhaustion", ctx.engines.values(), judge, describe, ctx)


def _paid_for(ctx: Context, view: View) -> bool:
    """Requests wait for what the preemptions cost: the queue grows, or queue time or TTFT is past its line."""
    return (
        (value(view, "waiting_slope") or 0) > ctx.limit(t.QUEUE_GROWTH)
        or (value(view, "queue_p99") or 0) >= ctx.limit(t.QUEUE_TIME_P99)
        or (value(view, "ttft_p99") or 0) >= ctx.limit(t.TTFT_P99)
    )


def _queued_for_it(ctx: Context, view: View) -> bool:
    """Requests wait at the full pool and pay for it: a queue, and its time past the line or the
    queue growing (a few waiting a moment as blocks free is how a full, busy pool works)."""
    return (value(view, "waiting_max") or 0) >= 1 and (
        (value(view, "queue_p99") or 0) >= ctx.limit(t.QUEUE_TIME_P99)
        or (value(view, "waiting_slope") or 0) > ctx.limit(t.QUEUE_GROWTH)
    )


def _remediation(view: View) -> list[str]:
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
