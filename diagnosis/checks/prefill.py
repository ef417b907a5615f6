"""prefill_head_of_line: a few long prompts monopolise prefill; short requests wait behind
them. The TTFT tail is far worse than the median, prompts have a long tail, decode stalls,
and the KV pool is not the limit (seed 000 anti-pattern 3)."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from kvscope import thresholds as t
from kvscope.tuning import LONG_PREFILL_SHARE, PREFILL_BUDGET_CPU, PREFILL_BUDGET_HOPPER


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.engines.values():
        p50, p99 = value(view, "ttft_p50"), value(view, "ttft_p99")
        if p50 is None or p99 is None or p99 < t.TTFT_TAIL_FLOOR.value:
            continue
        tail = p99 / max(p50, 1e-3)
        prompt50, prompt99 = value(view, "prompt_p50"), value(view, "prompt_p99")
        long_tail = prompt99 is not None and (
            prompt99 >= t.LONG_PROMPT_TOKENS.value or (prompt50 and prompt99 / prompt50 >= t.TTFT_TAIL_RATIO.value)
        )
        kv_ok = (value(view, "kv_usage_max") or 0) < t.KV_USAGE_CRITICAL.value
        few_preemptions = (value(view, "preemption_rate") or 0) <= t.PREEMPTION_RATE.value
        if tail >= t.TTFT_TAIL_RATIO.value and long_tail and kv_ok and few_preemptions:
            hits.append((view, tail))
    if not hits:
        return None
    view, tail = max(hits, key=lambda h: h[1])
    ev = [
        evidence(view, "ttft_p99", t.TTFT_TAIL_FLOOR),
        evidence(view, "ttft_p50"),
        evidence(view, "prompt_p99", t.LONG_PROMPT_TOKENS),
    ]
    confidence = 0.6
    itl50, itl99 = value(view, "itl_p50"), value(view, "itl_p99")
    if itl50 and itl99 and itl99 / itl50 >= 5:
        ev.append(evidence(view, "itl_p99", t.ITL_P99))
        confidence += 0.15  # decode stalls while long prefills run
    if (value(view, "queue_p99") or 0) >= t.QUEUE_TIME_P99.value / 4:
        ev.append(evidence(view, "queue_p99", t.QUEUE_TIME_P99))
        confidence += 0.1
    names = ", ".join(describe(labels_of(v)) for v, _ in hits)
    return Finding(
        id="prefill_head_of_line",
        severity=Severity.WARNING,
        confidence=confidence,
        summary=f"long prompts block short ones on {names}: p99 TTFT {value(view, 'ttft_p99'):.2f} s is "
        f"{tail:.0f}x the median, with a p99 prompt of {value(view, 'prompt_p99'):,.0f} tokens; "
        "the KV pool is not full.",
        affected=[affected(labels_of(v)) for v, _ in hits],
        evidence=ev,
        remediation=[
            f"bound each step's prefill: --enable-chunked-prefill --max-num-batched-tokens {PREFILL_BUDGET_HOPPER} "
            f"(H100-class; {PREFILL_BUDGET_CPU} on CPU) with --long-prefill-token-threshold at 1/{LONG_PREFILL_SHARE} "
            "of it, so long prompts cannot take a whole step even when several prefill at once",
            "--scheduling-policy priority with short prompts first and ageing (kvscope serve --profile tuned "
            "assigns it at the gateway); measured here: short-request p99 TTFT 0.15x (docs/benchmarks.md)",
            "route very long prompts to a dedicated pool, or cap prompt length per tier at the gateway",
        ],
    )
