"""gpu_memory_pressure: GPU memory used beyond what the engine was configured to take (a leak,
a co-located process), near OOM. vLLM reserves gpu_memory_utilization of the card up front, so
a GPU 90 % full is normal: pressure is measured against that budget, not against 100 %.

The rule is the alert's (GPUMemoryFull): the used share of the card above the budget of the
engine scraped with the GPU plus `gpu_memory_over_budget`; where no engine's budget is known,
above `gpu_memory_full`."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, labels_of, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import catalog
from kvscope import thresholds as t
from kvscope.promql import Selector, metric

ID = "gpu_memory_pressure"
# the measures judge() reads: what the end of the window is fetched for
READS = ("fb_used_max", "fb_free_min", "fb_reserved", "fb_used_slope")


def check(ctx: Context) -> list[Finding]:
    margin = ctx.limit(t.GPU_MEMORY_OVER_BUDGET)

    def judge(view: View) -> Hit | None:
        used, free = value(view, "fb_used_max"), value(view, "fb_free_min")
        if used is None or free is None:
            return None
        total = used + free + (value(view, "fb_reserved") or 0.0)
        if total <= 0:
            return None
        share = used / total
        budget = ctx.engine_budget(labels_of(view))
        limit = budget + margin if budget is not None else ctx.limit(t.GPU_MEMORY_FULL)
        if share <= limit:
            return None
        facts = {
            "share": share,
            "budget": budget,
            "limit": limit,
            "near_oom": free / total < ctx.limit(t.GPU_MEMORY_NEAR_OOM),
            "growing": (value(view, "fb_used_slope") or 0) > ctx.limit(t.GPU_MEMORY_GROWTH),
        }
        return Hit(view, share, facts)

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        f = worst.facts
        ev = [evidence(worst.view, "fb_used_max"), evidence(worst.view, "fb_free_min")]
        used, free, reserved = (
            metric(s) for s in (catalog.DCGM_FB_USED, catalog.DCGM_FB_FREE, catalog.DCGM_FB_RESERVED)
        )
        ev.append(
            Evidence(
                query=str(used / (used + free + reserved.or_(used * 0))),  # the alert's share
                value=round(f["share"], 4),
                threshold=round(f["limit"], 4),
                labels=worst.labels,
            )
        )
        if f["budget"] is not None:
            instance = worst.labels.get("instance", "")
            ev.append(
                Evidence(
                    query=str(metric(catalog.VLLM_CACHE_CONFIG_INFO, Selector.of(instance=instance))),
                    value=f["budget"],
                    threshold=None,
                    labels={"instance": instance, "gpu_memory_utilization": f"{f['budget']:g}"},
                )
            )
        if f["growing"]:
            ev.append(evidence(worst.view, "fb_used_slope", ctx.limit(t.GPU_MEMORY_GROWTH)))
        cause = "growing (a leak)" if f["growing"] else "above the engine's budget (another process on the GPU?)"
        if f["budget"] is None and not f["growing"]:
            cause = "nearly full (no engine's budget is known for this GPU)"
        budget_text = f"; the engine was given {f['budget']:.0%}" if f["budget"] is not None else ""
        if f["budget"] == 0:  # the engine on it is gone (ctx.engine_budget)
            budget_text = ", with no engine up on it (its engine stopped reporting before the window)"
            cause = "another process holds it (orphaned engine workers?), so a restarted engine cannot get it"
        return Parts(
            Severity.CRITICAL if f["near_oom"] else Severity.WARNING,
            f"{worst.name} uses {f['share']:.0%} of its memory{budget_text}: {cause}"
            + ("; it is one allocation from CUDA OOM." if f["near_oom"] else "."),
            ev,
            [
                *(
                    [
                        "orphaned workers of a killed engine keep the memory (vllm-project/vllm#55510): find them "
                        "(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; VLLM::EngineCore, "
                        "VLLM::Worker_*) and stop them before the engine restarts"
                    ]
                    if f["budget"] == 0
                    else []
                ),
                "find the process: nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv "
                f"(or {catalog.GPU_PROCESS_INFO.name} joined on gpu)",
                "a co-located process: move it off the GPU (MIG or a separate node); vLLM assumes it owns its share",
                "vLLM itself growing: restart the engine, then look for a leak (long-lived requests, LoRA adapters)",
                "leave headroom: --gpu-memory-utilization 0.88 (seed 000: 0.95 OOMed)",
            ],
        )

    return scoped_findings(ID, ctx.gpus.values(), judge, describe, ctx)
