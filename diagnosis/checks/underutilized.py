"""gpu_underutilized: GPUs mostly idle at low load (seed 002: below 20 % for 10 minutes): a cost
finding, not a fault."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    idle = [
        v for v in ctx.gpus.values() if (util := value(v, "gpu_util_avg")) is not None and util < t.GPU_UTIL_FLOOR.value
    ]
    if not idle or len(idle) < len(ctx.gpus) / 2:
        return None
    queued = any((value(e, "waiting_max") or 0) > 0 for e in ctx.engines.values())
    if queued:
        return None  # idle GPUs with a queue are not a cost problem
    mean = sum(value(v, "gpu_util_avg") or 0 for v in idle) / len(idle)
    return Finding(
        id="gpu_underutilized",
        severity=Severity.INFO,
        confidence=0.7,
        summary=f"{len(idle)} of {len(ctx.gpus)} GPUs averaged {mean:.0f} % busy: capacity is paid for and idle.",
        affected=[affected(labels_of(v)) for v in idle],
        evidence=[evidence(v, "gpu_util_avg", t.GPU_UTIL_FLOOR) for v in idle[:8]],
        remediation=[
            "consolidate: fewer replicas (HPA on queue depth), or share GPUs between small models (MIG)",
            "scale down off-peak (seed 002: 70 % of traffic came in 12 hours)",
        ],
    )
