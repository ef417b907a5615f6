"""load_imbalance: engines or replicas of one model where some are saturated (a queue, a full KV
pool, queue time past its limit) while siblings sit idle (nothing waiting, KV nearly empty), or
where the load moved: the model's total request rate is what it was before the window, but
saturated members gained what their siblings lost (a prefix-affine router sending a hot prefix
to one replica, vllm-project/production-stack#1035; DP ranks stacking, vllm-project/vllm#36748).
vLLM's data-parallel engines are told apart by the `engine` label; replicas by pod or instance.
More capacity would not help: the load is not spread. The siblings that lost load are members
too: what follows there (their prefix hit rate falls as the shared traffic leaves) is explained."""

from __future__ import annotations

from collections import defaultdict

from diagnosis.checks import Context, View, evidence, labels_of, server_key, value
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
    """Nothing waiting and the KV pool nearly empty, over the window or, judged where it holds,
    at its end (a sibling idle since the hot one took its load; a longer window must not dilute it)."""
    limit = ctx.limit(t.IMBALANCE_IDLE_KV)
    kv, kv_now, waiting_now = value(view, "kv_usage_avg"), value(view, "kv_usage_last"), value(view, "waiting_last")
    over_the_window = (value(view, "waiting_max") or 0) < 1 and kv is not None and kv < limit
    at_the_end = waiting_now is not None and waiting_now < 1 and kv_now is not None and kv_now < limit
    return over_the_window or at_the_end


def _rates(ctx: Context, view: View) -> tuple[float, float] | None:
    """(now, before) of what arrives at a member: kvscope serve's admissions, else vLLM's finishes."""
    for name in ("arrival_rate", "request_rate"):
        now, before = value(view, name), ctx.before(view, name)
        if now is not None and before is not None:
            return now, before.value
    return None


def _moved(ctx: Context, views: list[View]) -> tuple[list[View], list[View]] | None:
    """(members that gained load, members that lost it) when the group's total held and the load
    moved between them by at least the change ratio each way; None otherwise."""
    rates = [(v, r) for v in views if (r := _rates(ctx, v)) is not None]
    if len(rates) < 2:
        return None
    factor = ctx.limit(t.CHANGE_RATIO)
    now, before = sum(r[0] for _, r in rates), sum(r[1] for _, r in rates)
    if before <= 0 or not 1 / factor < now / before < factor:
        return None  # the model's load itself changed: not a question of spreading it
    gained = [v for v, (n, b) in rates if b > 0 and n >= factor * b]
    lost = [v for v, (n, b) in rates if b > 0 and n * factor <= b]
    return (gained, lost) if gained and lost else None


def _offered(view: View) -> float | None:
    """What arrives at a member now: kvscope serve's admissions, else vLLM's finishes plus the
    queue's growth (a saturated member finishes less than it is sent)."""
    arrived = value(view, "arrival_rate")
    if arrived is not None:
        return arrived
    finished = value(view, "request_rate")
    return None if finished is None else finished + max(0.0, value(view, "waiting_slope") or 0.0)


def _uneven(ctx: Context, busy: list[View], views: list[View]) -> tuple[list[View], list[View]] | None:
    """(saturated members, siblings with room) when, in the window itself, the saturated ones are
    sent at least the change ratio more requests than every sibling with room (not saturated,
    nothing waiting): the load is not spread, whatever the baseline held (DP ranks stacking,
    vllm-project/vllm#36748: 117 waiting on two ranks while the others have room). A member
    saturated at the same request rate as its siblings is not this: its own requests grew."""
    room = [v for v in views if not _saturated(ctx, v) and (value(v, "waiting_last") or 0) < 1]
    rates = [r for v in room if (r := _offered(v)) is not None]
    if not room or len(rates) < len(room):
        return None
    factor, most = ctx.limit(t.CHANGE_RATIO), max(rates)
    hot = [v for v in busy if (r := _offered(v)) is not None and r >= factor * most and r > 0]
    return (hot, room) if hot else None


def _members(views: list[View]) -> list[View]:
    """The engines and replicas of one model, without a server's own aggregate view: the series
    kvscope serve writes for a whole instance (arrivals at its gateway, no `engine` label) are
    not a sibling of that instance's engines."""
    engines_of = {server_key(labels_of(v)) for v in views if labels_of(v).get("engine")}
    return [v for v in views if labels_of(v).get("engine") or server_key(labels_of(v)) not in engines_of]


def check(ctx: Context) -> list[Finding]:
    groups: dict[tuple[str, str], list[View]] = defaultdict(list)
    for view in ctx.engines.values():
        labels = labels_of(view)
        groups[(labels.get("namespace", ""), labels.get("model_name", ""))].append(view)
    findings = []
    for (_, model), every in groups.items():
        views = _members(every)
        if len(views) < 2:
            continue
        busy = [v for v in views if _saturated(ctx, v)]
        idle = [v for v in views if not _saturated(ctx, v) and _idle(ctx, v)]
        moved = _moved(ctx, views)
        roomy = False
        if moved is not None and (not busy or not idle):
            busy = [v for v in moved[0] if _saturated(ctx, v)]
            idle = [v for v in moved[1] if not _saturated(ctx, v)]
        if busy and not idle and (uneven := _uneven(ctx, busy, views)) is not None:
            (busy, idle), roomy = uneven, True
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
                    f"waiting) while {len(idle)} "
                    + (
                        f"have room and are sent {max(_offered(v) or 0 for v in idle):.2f} requests/s at most "
                        f"against {min(_offered(v) or 0 for v in busy):.2f}/s."
                        if roomy
                        else "sit idle."
                    )
                ),
                affected=[affected(labels_of(v)) for v in (*busy, *idle)],
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
