"""gpu_memory_pressure: GPU memory used beyond what the engine was configured to take (a leak,
a co-located process), near OOM. vLLM reserves gpu_memory_utilization of the card up front, so
a GPU 90 % full is normal: pressure is measured against that budget, not against 100 %."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Evidence, Finding, Severity, affected, describe
from kvscope import catalog
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.gpus.values():
        used, free = value(view, "fb_used_max"), value(view, "fb_free_min")
        if used is None or free is None:
            continue
        total = used + free + (value(view, "fb_reserved") or 0.0)
        if total <= 0:
            continue
        ratio, free_share = used / total, free / total
        budget = ctx.engine_budget(labels_of(view))
        over = budget is not None and ratio > budget + t.GPU_MEMORY_OVER_BUDGET.value
        near_oom = free_share < t.GPU_MEMORY_NEAR_OOM.value
        growing = (value(view, "fb_used_slope") or 0) > t.GPU_MEMORY_GROWTH.value
        if over or (budget is None and ratio > t.GPU_MEMORY_FULL.value and growing) or (near_oom and growing):
            hits.append((view, ratio, budget, near_oom, growing))
    if not hits:
        return None
    view, ratio, budget, near_oom, growing = max(hits, key=lambda h: h[1])
    ev = [evidence(view, "fb_used_max"), evidence(view, "fb_free_min")]
    if budget is not None:
        ev.append(
            Evidence(
                query=f"{catalog.VLLM_CACHE_CONFIG_INFO.name}{{gpu_memory_utilization}}",
                value=budget,
                threshold=round(budget + t.GPU_MEMORY_OVER_BUDGET.value, 4),
                labels={},
            )
        )
    if growing:
        ev.append(evidence(view, "fb_used_slope", t.GPU_MEMORY_GROWTH))
    cause = "growing (a leak)" if growing else "above the engine's budget (another process on the GPU?)"
    budget_text = f"; the engine was given {budget:.0%}" if budget is not None else ""
    return Finding(
        id="gpu_memory_pressure",
        severity=Severity.CRITICAL if near_oom else Severity.WARNING,
        confidence=0.55 + (0.2 if budget is not None else 0) + (0.15 if growing else 0),
        summary=f"{describe(labels_of(view))} uses {ratio:.0%} of its memory{budget_text}: {cause}"
        + ("; it is one allocation from CUDA OOM." if near_oom else "."),
        affected=[affected(labels_of(v)) for v, *_ in hits],
        evidence=ev,
        remediation=[
            "find the process: nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv "
            f"(or {catalog.GPU_PROCESS_INFO.name} joined on gpu)",
            "a co-located process: move it off the GPU (MIG or a separate node); vLLM assumes it owns its share",
            "vLLM itself growing: restart the engine, then look for a leak (long-lived requests, LoRA adapters)",
            "leave headroom: --gpu-memory-utilization 0.88 (seed 000: 0.95 OOMed)",
        ],
    )
