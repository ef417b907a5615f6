"""gpu_underutilized: GPUs mostly idle at low load (seed 002: below 20 % for 10 minutes): a cost
finding, not a fault."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    floor = ctx.limit(t.GPU_UTIL_FLOOR)
    backlog, slow = ctx.limit(t.QUEUE_BACKLOG), ctx.limit(t.QUEUE_TIME_P99)
    # where the data joins no engine to a GPU, only an engine that is really queueing (a backlog,
    # or a queue time past its line) can be the one these GPUs serve: a busy neighbour's waiting
    # request or two, on another model or another node, excuses nothing
    queueing = [
        e
        for e in ctx.engines.values()
        if not ctx.gpus_with(e) and ((value(e, "waiting_max") or 0) >= backlog or (value(e, "queue_p99") or 0) >= slow)
    ]

    def judge(view: View) -> Hit | None:
        util = ctx.util(view)
        if util is None or util >= floor:
            return None
        # idle GPUs with a queue are not a cost problem: a queue on the engines of the same
        # machine, or, where the data joins no engine to this GPU, an unjoined engine queueing
        joined = ctx.engines_with(view)
        excused = any((value(e, "waiting_max") or 0) > 0 for e in joined) if joined else bool(queueing)
        if excused:
            return None
        return Hit(view, floor - util, {"util": util})

    def describe(worst: Hit, hits: list[Hit]) -> Parts | None:
        # idle capacity: half the fleet's GPUs, or whole machines idle beyond the spares a fleet
        # keeps (a count, so the verdict holds however many busy machines stand beside them)
        idle = {id(h.view) for h in hits}
        machines = {ctx.scope(h.view): h.view for h in hits}
        whole = [s for s, v in machines.items() if all(id(g) in idle for g in ctx.gpus_with(v))]
        if len(hits) < len(ctx.gpus) / 2 and len(whole) <= ctx.limit(t.IDLE_SPARE_MACHINES):
            return None
        mean = sum(h.facts["util"] for h in hits) / len(hits)
        return Parts(
            Severity.INFO,
            f"{len(hits)} of {len(ctx.gpus)} GPUs averaged {mean:.0f} % busy"
            + (f", {len(whole)} machines wholly idle" if len(whole) > 1 else "")
            + ": capacity is paid for and idle.",
            [_util_evidence(h, floor) for h in hits[:8]],
            [
                "consolidate: fewer replicas (HPA on queue depth), or share GPUs between small models (MIG)",
                "scale down off-peak (seed 002: 70 % of traffic came in 12 hours)",
            ],
        )

    return scoped_findings("gpu_underutilized", ctx.gpus.values(), judge, describe)  # one fleet-wide finding


def _util_evidence(hit: Hit, floor: float) -> Evidence:
    name = "gpu_util_avg" if hit.view.get("gpu_util_avg") else "gr_active_avg"
    return evidence(hit.view, name, floor if name == "gpu_util_avg" else floor / 100, above=False)
