"""gpu_underutilized: GPUs mostly idle at low load (seed 002: below 20 % for 10 minutes): a cost
finding, not a fault."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, one_finding, value
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    floor = ctx.limit(t.GPU_UTIL_FLOOR)

    def judge(view: View) -> Hit | None:
        util = value(view, "gpu_util_avg")
        return Hit(view, floor - util, {"util": util}) if util is not None and util < floor else None

    def describe(worst: Hit, hits: list[Hit]) -> Parts | None:
        if len(hits) < len(ctx.gpus) / 2:
            return None
        if any((value(e, "waiting_max") or 0) > 0 for e in ctx.engines.values()):
            return None  # idle GPUs with a queue are not a cost problem
        mean = sum(h.facts["util"] for h in hits) / len(hits)
        return Parts(
            Severity.INFO,
            0.7,
            f"{len(hits)} of {len(ctx.gpus)} GPUs averaged {mean:.0f} % busy: capacity is paid for and idle.",
            [evidence(h.view, "gpu_util_avg", floor) for h in hits[:8]],
            [
                "consolidate: fewer replicas (HPA on queue depth), or share GPUs between small models (MIG)",
                "scale down off-peak (seed 002: 70 % of traffic came in 12 hours)",
            ],
        )

    return one_finding("gpu_underutilized", ctx.gpus.values(), judge, describe)
