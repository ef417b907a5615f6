"""gateway_overhead: time before the engine (gateway, protocol, tokenisation) is a large share
of latency (seed 004: 37 % of a call was queueing, 19 % serialisation, 44 % the model)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, scoped_findings, value
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    share_limit = ctx.limit(t.GATEWAY_OVERHEAD_SHARE)

    def judge(view: View) -> Hit | None:
        gateway, e2e = value(view, "gateway_mean"), value(view, "e2e_mean")
        if gateway is not None and e2e and gateway / e2e >= share_limit:
            return Hit(view, gateway / e2e)
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        return Parts(
            Severity.WARNING if worst.score >= 2 * share_limit else Severity.INFO,
            f"{worst.score:.0%} of request latency on {worst.name} is spent before the engine "
            "(gateway, protocol, tokenisation).",
            [
                evidence(worst.view, "gateway_mean", share_limit * (value(worst.view, "e2e_mean") or 0)),
                evidence(worst.view, "e2e_mean"),
            ],
            [
                "profile the gateway path (py-spy on the API server process); keep connections alive (HTTP/1.1 "
                "keep-alive or gRPC) and avoid re-serialising large bodies",
                "run more API server processes in front of the engine (vLLM --api-server-count)",
            ],
        )

    return scoped_findings("gateway_overhead", ctx.engines.values(), judge, describe, ctx)
