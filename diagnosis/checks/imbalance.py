"""load_imbalance: engines or replicas of one model where some are saturated (a queue, a full KV
pool, queue time past its limit) while siblings sit idle (nothing waiting, KV nearly empty).
vLLM's data-parallel engines are told apart by the `engine` label; replicas by pod or instance.
More capacity would not help: the load is not spread."""

from __future__ import annotations

from collections import defaultdict

from diagnosis.checks import Context, View, evidence, labels_of, value
from diagnosis.findings import Evidence, Finding, Severity, affected, confidence_of, describe
from kvscope import catalog
from kvscope import thresholds as t


def _saturated(ctx: Context, view: View) -> bool:
    return (
        (value(view, "waiting_max") or 0) >= ctx.limit(t.QUEUE_BACKLOG)
        or (value(view, "kv_usage_max") or 0) >= ctx.limit(t.KV_USAGE_CRITICAL)
        or (value(view, "queue_p99") or 0) >= ctx.limit(t.QUEUE_TIME_P99)
    )


def _idle(ctx: Context, view: View) -> bool:
    kv = value(view, "kv_usage_avg")
    return (value(view, "waiting_max") or 0) < 1 and kv is not None and kv < ctx.limit(t.IMBALANCE_IDLE_KV)


def check(ctx: Context) -> list[Finding]:
    groups: dict[tuple[str, str], list[View]] = defaultdict(list)
    for view in ctx.engines.values():
        labels = labels_of(view)
        groups[(labels.get("namespace", ""), labels.get("model_name", ""))].append(view)
    findings = []
    for (_, model), views in groups.items():
        if len(views) < 2:
            continue
        busy = [v for v in views if _saturated(ctx, v)]
        idle = [v for v in views if _idle(ctx, v)]
        if not busy or not idle:
            continue
        busy.sort(key=lambda v: -(value(v, "waiting_max") or 0))
        worst = busy[0]
        ev: list[Evidence] = [evidence(worst, "waiting_max", ctx.limit(t.QUEUE_BACKLOG))]
        if worst.get("kv_usage_max"):
            ev.append(evidence(worst, "kv_usage_max", ctx.limit(t.KV_USAGE_CRITICAL)))
        ev += [evidence(v, "kv_usage_avg", ctx.limit(t.IMBALANCE_IDLE_KV), above=False) for v in idle[:4]]
        data_parallel = any(labels_of(v).get("engine") for v in views)
        findings.append(
            Finding(
                id="load_imbalance",
                severity=Severity.WARNING,
                confidence=confidence_of(ev),
                summary=(
                    f"load is not spread across the {len(views)} {'engines' if data_parallel else 'replicas'} of "
                    f"{model or 'one model'}: {', '.join(describe(labels_of(v)) for v in busy)} "
                    f"{'is' if len(busy) == 1 else 'are'} saturated (up to {value(worst, 'waiting_max') or 0:.0f} "
                    f"waiting) while {len(idle)} sit idle."
                ),
                affected=[affected(labels_of(v)) for v in busy],
                evidence=ev,
                remediation=(
                    [
                        "balance the data-parallel engines: vLLM's internal DP load balancer (--data-parallel-size "
                        "with one API server) routes by queue length; with --data-parallel-external-lb or "
                        "--data-parallel-hybrid-lb the router in front must balance on "
                        f"{catalog.VLLM_REQUESTS_WAITING.name} per engine, not round-robin",
                        "check for session affinity (a sticky cookie or a prefix-aware router) that pins one "
                        "tenant's traffic to one engine",
                    ]
                    if data_parallel
                    else [
                        "balance the replicas: route by queue depth (least-outstanding-requests) instead of "
                        "round-robin or sticky sessions; check the Service's endpoints and readiness",
                        "prefix-aware routing that pins hot prefixes must cap a replica's share of the load",
                    ]
                )
                + ["do not add capacity: the idle siblings already have it"],
                scope=ctx.scope(worst),
            )
        )
    return findings
