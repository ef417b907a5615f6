"""prefill_head_of_line: a few long prompts monopolise prefill; short requests wait behind
them. The TTFT tail is far worse than the median, prompts have a long tail, decode stalls,
and the KV pool is not the limit (seed 000 anti-pattern 3)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, scoped_findings, value
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t
from kvscope import tuning
from kvscope.thresholds import Thresholds
from kvscope.tuning import Platform, long_prefill_threshold, prefill_budget


def long_prompt_tail(ctx: Context, view: View) -> bool:
    """A few prompts far longer than the rest: p99 past the long-prompt size, or 10x the median."""
    return prompt_tail(ctx.limits, view)


def prompt_tail(limits: Thresholds, view: View) -> bool:
    """long_prompt_tail under `limits` (the first phase's screen asks it before any Context)."""
    prompt50, prompt99 = value(view, "prompt_p50"), value(view, "prompt_p99")
    if prompt99 is None:
        return False
    return prompt99 >= limits.value(t.LONG_PROMPT_TOKENS) or bool(
        prompt50 and prompt99 / prompt50 >= limits.value(t.TTFT_TAIL_RATIO)
    )


def decode_stalls(ctx: Context, view: View) -> bool:
    """Inter-token latency's tail far above its median: decode steps wait behind prefill chunks."""
    shape = ctx.shape(view)
    itl50, itl99 = value(shape, "itl_p50"), value(shape, "itl_p99")
    return bool(itl50 and itl99 and itl99 / itl50 >= ctx.limit(t.ITL_STALL_RATIO))


def check(ctx: Context) -> list[Finding]:
    tail_ratio, floor = ctx.limit(t.TTFT_TAIL_RATIO), ctx.limit(t.TTFT_TAIL_FLOOR)

    def judge(view: View) -> Hit | None:
        shape = ctx.shape(view)
        p50, p99 = value(shape, "ttft_p50"), value(shape, "ttft_p99")
        if p50 is None or p99 is None or p99 < floor or not long_prompt_tail(ctx, view):
            return None
        kv_ok = (value(view, "kv_usage_max") or 0) < ctx.limit(t.KV_USAGE_CRITICAL)
        few_preemptions = (value(view, "preemption_rate") or 0) <= ctx.limit(t.PREEMPTION_RATE)
        if not (kv_ok and few_preemptions):
            return None
        tail = p99 / max(p50, 1e-3)
        # When long prefills back up the whole queue, every TTFT is late and the tail ratio shrinks;
        # decode steps stalling behind the long prefills still give the cause away.
        if tail >= tail_ratio or decode_stalls(ctx, view):
            return Hit(view, tail, {"stalls": decode_stalls(ctx, view)})
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view = worst.view
        shape = ctx.shape(view)  # the latencies where their shape was judged
        ev = [
            evidence(shape, "ttft_p99", floor),
            evidence(shape, "ttft_p50"),
            evidence(view, "prompt_p99", ctx.limit(t.LONG_PROMPT_TOKENS)),
        ]
        if worst.facts["stalls"]:  # decode stalls while long prefills run
            ev += [evidence(shape, "itl_p99", ctx.limit(t.ITL_P99)), evidence(shape, "itl_p50")]
        queue_limit = ctx.limit(t.QUEUE_TIME_P99)
        if (value(view, "queue_p99") or 0) >= queue_limit / 4:
            ev.append(evidence(view, "queue_p99", queue_limit))
        if view.get("kv_usage_max"):  # the pool is not the limit
            ev.append(evidence(view, "kv_usage_max", ctx.limit(t.KV_USAGE_CRITICAL), above=False))
        return Parts(
            Severity.WARNING,
            f"long prompts block short ones on {names(hits)}: p99 TTFT {value(shape, 'ttft_p99'):.2f} s is "
            f"{worst.score:.0f}x the median, with a p99 prompt of {value(view, 'prompt_p99'):,.0f} tokens"
            + (
                f" and decode stalling behind them (p99 inter-token latency {value(shape, 'itl_p99') or 0:.2f} s, "
                f"{(value(shape, 'itl_p99') or 0) / (value(shape, 'itl_p50') or 1):.0f}x the median)"
                if worst.facts["stalls"]
                else ""
            )
            + "; the KV pool is not full.",
            ev,
            _remediation(),
        )

    return scoped_findings("prefill_head_of_line", ctx.engines.values(), judge, describe, ctx)


def _remediation() -> list[str]:
    hopper, gpu = prefill_budget(Platform.HOPPER), prefill_budget(Platform.GPU)
    return [
        f"bound each step's prefill: --enable-chunked-prefill --max-num-batched-tokens {hopper} on H100-class "
        f"GPUs ({gpu} on others) with --long-prefill-token-threshold {long_prefill_threshold(hopper, Platform.HOPPER)} "
        f"(1/{int(tuning.LONG_PREFILL_SHARE[Platform.HOPPER])} of the step), so long prompts cannot take a whole "
        "step even when several prefill at once",
        "--scheduling-policy priority with short prompts first and ageing (kvscope serve --profile tuned "
        "assigns it at the gateway)",
        "route very long prompts to a dedicated pool, or cap prompt length per tier at the gateway",
    ]
