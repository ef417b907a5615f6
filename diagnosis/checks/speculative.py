"""spec_decode_inefficient: speculative decoding's drafts are rejected so often that the time per
output token rises while the engine's steps do not get slower. vLLM's inter-token histogram is per
engine step (a step yields 1 + accepted tokens), so only the per-output-token time shows it
(vllm-project/vllm#8439: slower with speculation than without; #56797: acceptance well below its
reference, lower still on production traffic)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    rise, flat, fall = ctx.limit(t.SPEC_TPOT_RISE), ctx.limit(t.SPEC_STEP_FLAT), ctx.limit(t.SPEC_ACCEPT_FALL)

    def judge(view: View) -> Hit | None:
        if not (value(view, "spec_draft_tps") or 0) > 0:
            return None  # no speculative decoding here
        tpot, step, accept = value(view, "tpot_p50"), value(view, "itl_p50"), value(view, "spec_accept")
        was_tpot, was_step, was_accept = (ctx.before(view, n) for n in ("tpot_p50", "itl_p50", "spec_accept"))
        if tpot is None or step is None or was_tpot is None or was_step is None:
            return None
        if was_tpot.value <= 0 or was_step.value <= 0:
            return None
        tpot_up, step_up = tpot / was_tpot.value, step / was_step.value
        accept_fell = accept is not None and was_accept is not None and accept <= fall * was_accept.value
        if tpot_up >= rise and step_up <= flat and (accept_fell or accept is None):
            return Hit(view, tpot_up, {"tpot_up": tpot_up, "step_up": step_up, "was_accept": was_accept})
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view, f = worst.view, worst.facts
        accept, was = value(view, "spec_accept"), f["was_accept"]
        ev = [evidence(view, "tpot_p50"), evidence(view, "itl_p50")]
        acceptance = ""
        if accept is not None and was is not None:
            ev.append(evidence(view, "spec_accept", round(fall * was.value, 4), above=False))
            ev.append(Evidence(was.query, round(was.value, 6), None, dict(was.labels)))
            acceptance = f"; drafts accepted {accept:.0%} of the time, down from {was.value:.0%}"
        return Parts(
            Severity.WARNING,
            f"speculative decoding costs more than it saves on {names(hits)}: the time per output token is "
            f"{f['tpot_up']:.1f}x what it was while each engine step takes {f['step_up']:.2f}x{acceptance}.",
            ev,
            [
                "fewer speculative tokens: --speculative-config '{\"num_speculative_tokens\": 2, ...}' (each rejected "
                "draft token is a wasted verification slot)",
                "a draft that matches the traffic (another draft model or EAGLE head, or n-gram only where prompts "
                "repeat), or turn speculative decoding off for this workload and compare",
            ],
        )

    return scoped_findings("spec_decode_inefficient", ctx.engines.values(), judge, describe, ctx)
