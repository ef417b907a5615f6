"""gateway_overhead: time before the engine (gateway, protocol, tokenisation) is a large share
of latency (seed 004: 37 % of a call was queueing, 19 % serialisation, 44 % the model)."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.engines.values():
        gateway, e2e = value(view, "gateway_mean"), value(view, "e2e_mean")
        if gateway is not None and e2e and gateway / e2e >= t.GATEWAY_OVERHEAD_SHARE.value:
            hits.append((view, gateway / e2e))
    if not hits:
        return None
    view, share = max(hits, key=lambda h: h[1])
    return Finding(
        id="gateway_overhead",
        severity=Severity.WARNING if share >= 2 * t.GATEWAY_OVERHEAD_SHARE.value else Severity.INFO,
        confidence=0.7,
        summary=f"{share:.0%} of request latency on {describe(labels_of(view))} is spent before the engine "
        "(gateway, protocol, tokenisation).",
        affected=[affected(labels_of(v)) for v, _ in hits],
        evidence=[evidence(view, "gateway_mean"), evidence(view, "e2e_mean")],
        remediation=[
            "profile the gateway path (py-spy on the API server process); keep connections alive (HTTP/1.1 "
            "keep-alive or gRPC) and avoid re-serialising large bodies",
            "run more API server processes in front of the engine (vLLM --api-server-count)",
        ],
    )
