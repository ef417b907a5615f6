"""From measurements to a diagnosis: run the checks, walk the five-step triage, pick the root
cause. Seed 000's triage, in order: 1 KV-cache usage, 2 waiting queue and queue time, 3 GPU
memory and utilisation, 4 preemption / swap frequency, 5 kernel level."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from diagnosis.alerts import Firing, explain, matches, unexplained
from diagnosis.changes import Change, changes, sentence
from diagnosis.checks import SHAPES, Context, all_checks, engine_views, labels_of, memory, pcie, throttling, value
from diagnosis.findings import (
    HEALTHY,
    INSUFFICIENT_DATA,
    ROOT_CAUSE_ORDER,
    Finding,
    Severity,
    describe,
)
from diagnosis.incidents import Incident, group
from diagnosis.measures import BY_NAME, MEASURES, REQUIRED, Entity, Measurements, entity_key
from kvscope import exitcodes
from kvscope import thresholds as t
from kvscope.config import Config


@dataclass
class Step:
    step: int
    name: str
    status: str  # ok | fail | skipped
    detail: str


@dataclass
class Diagnosis:
    at: float
    window: float
    source: str
    bottleneck: str
    severity: Severity
    confidence: float
    summary: str
    affected: list[dict[str, str]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    alerts: list[dict[str, object]] = field(default_factory=list)
    sources: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.bottleneck == INSUFFICIENT_DATA:
            return exitcodes.UNDIAGNOSABLE
        return {Severity.CRITICAL: exitcodes.CRITICAL, Severity.WARNING: exitcodes.WARNING}.get(
            self.severity, exitcodes.OK
        )


def missing_required(m: Measurements) -> list[str]:
    """The series the source lacks when it has none of them, as metric names (with fallbacks):
    each check runs on what it needs, so any one of them is enough to start."""
    if any(m.has(name) for name in REQUIRED):
        return []
    return [" or ".join(BY_NAME[name].names[:2]) for name in REQUIRED]


def diagnose(
    m: Measurements,
    at: float,
    window: float,
    source: str,
    config: Config | None = None,
    firing: list[Firing] | None = None,
    recent: list[Measurements] | None = None,
    present: Measurements | None = None,
) -> Diagnosis:
    """The verdict over measurements, with the thresholds and GPU models of `config`.

    `firing`: the kvscope alerts that fired in the window, each then explained by an incident or
    not. `recent`: measurements over the alerts' own shorter window at the time each unexplained
    one last fired; findings there that would explain one join the verdict (an alert over 5
    minutes can see what a 30-minute average hides). `present`: the GPUs' measurements over the end
    of the window alone; a hardware state found there and not over the whole window (which its
    healthy minutes dilute) is a finding too, and the engines' latency shapes (a tail against its
    median) are read there: a window holding two regimes has a tail neither of them has."""
    firing = firing or []
    config = config or Config()
    missing = missing_required(m)
    if missing:
        return Diagnosis(
            at,
            window,
            source,
            INSUFFICIENT_DATA,
            Severity.OK,
            0.0,
            f"cannot diagnose: the source has none of {', '.join(missing[:3])} (nor the rest) in the window",
            steps=[Step(i + 1, n, "skipped", "no data") for i, n in enumerate(STEP_NAMES)],
            missing=missing,
            sources=m.sources,
            notes=m.notes,
        )
    ctx = Context.of(m, config.thresholds, config.gpu_models)
    if present is not None:
        ctx.end = engine_views(present.values, SHAPES)
    findings = [f for check in all_checks() for f in check(ctx)]
    findings.sort(key=lambda f: (ROOT_CAUSE_ORDER.index(f.id), -f.severity.rank, -f.confidence))
    findings += _present_findings(m, present, findings, config)
    bursts = _recent_findings(recent or [], findings, firing, config)
    steps = triage(ctx, findings)
    found = changes(ctx)
    incidents = group(findings, ctx.scopes, ctx.scopes.count(), late=bursts)
    findings = findings + bursts
    for incident in incidents:
        key = (incident.id, tuple(sorted(incident.scopes)))
        incident.onset, incident.ended = m.onsets.get(key), m.ended.get(key)
        own = OWN_SIGNAL.get(incident.id)  # an incident's own signal is not its trigger
        nearby = [c for c in found if c.where in incident.scopes and c.signal != own and can_trigger(incident.id, c)]
        trigger = min(nearby, key=_trigger_rank) if nearby else None
        if trigger is not None:
            incident.trigger = {
                "signal": trigger.signal,
                "before": trigger.before,
                "after": trigger.after,
                "at": trigger.at,
                "scope": trigger.scope,
            }
            incident.summary = incident.cause.summary.rstrip(".") + f", after {sentence(trigger, found)}."
    base = Diagnosis(
        at,
        window,
        source,
        HEALTHY,
        Severity.OK,
        0.0,
        "",
        steps=steps,
        findings=findings,
        incidents=incidents,
        changes=found,
        sources=m.sources,
        notes=m.notes,
    )
    base.alerts = [a.to_dict() for a in explain(firing, incidents)]
    checked = (
        "KV cache, queue, GPUs and hardware"
        if ctx.gpus and ctx.engines
        else ("the GPUs and their hardware (no engine series)" if ctx.gpus else "KV cache and queue (no GPU series)")
    )
    conclude(
        base, sorted({a.alertname for a in unexplained(firing)}), checked, 0.9 if ctx.gpus and ctx.engines else 0.7
    )
    return base


def conclude(d: Diagnosis, loose: list[str], checked: str, healthy_confidence: float) -> None:
    """The verdict's head from its active incidents: the first sets bottleneck, severity and the
    exit code; recovered ones follow them, listed with their end, severity info."""
    active = [i for i in d.incidents if i.status == "active"]
    recovered = [i for i in d.incidents if i.status == "recovered"]
    for incident in recovered:
        incident.severity = Severity.INFO
        if "recovered" not in incident.summary:
            when = time.strftime("%H:%M:%S UTC", time.gmtime(incident.ended or d.at))
            incident.summary = incident.summary.rstrip(".") + f" (recovered: cleared at {when})."
    d.incidents = active + recovered
    past = "; ".join(f"{i.id} on {_where(i)}" for i in recovered)
    if not active:
        d.bottleneck, d.severity, d.confidence, d.affected = HEALTHY, Severity.OK, healthy_confidence, []
        # a step past its line on its own (a full pool nobody waits for) is not an incident; say so,
        # rather than that everything is within its thresholds
        alone = [_STEP_WORDS.get(s.name, s.name) for s in d.steps if s.status == "fail"]
        lines = "its line" if len(alone) == 1 else "their lines"
        d.summary = (
            f"healthy: no incident's conditions hold ({' and '.join(alone)} past {lines} alone: see the steps)"
            if alone
            else f"healthy: {checked} are within their thresholds"
        )
        if loose:
            d.summary += (
                f"; yet {', '.join(loose)} fired and nothing found explains {'it' if len(loose) == 1 else 'them'}"
            )
        if past:
            d.summary += f"; recovered in the window: {past}"
        return
    primary = active[0]
    d.bottleneck = primary.id
    d.severity = max((i.severity for i in active), key=lambda s: s.rank)
    d.confidence = primary.confidence
    d.affected = primary.affected
    more = [f"{i.id} on {_where(i)}" for i in active[1:]]
    d.summary = primary.summary + (
        f" {len(more)} more incident{'s' if len(more) > 1 else ''}: {'; '.join(more)}." if more else ""
    )
    if loose:
        d.summary += f" Not explained: {', '.join(loose)}."
    if past:
        d.summary += f" Recovered in the window: {past}."


def _where(incident: Incident) -> str:
    return ", ".join(s for s in incident.scopes if s) or "the fleet"


# states of the hardware judged where they hold: over the end of the window as well as all of it
PRESENT_CHECKS = (throttling, pcie, memory)
SEEN_NOW = "running_max"  # an engine with no sample of it at the end of the window is gone now
# the end of the window is fetched for what those checks read, not for every GPU measure: on a
# large fleet each GPU query reads every GPU's series (an XID or a health watch is judged over
# the whole window; its end adds nothing)
PRESENT_MEASURES = (
    *(m for m in MEASURES if m.entity is Entity.GPU and any(m.name in c.READS for c in PRESENT_CHECKS)),
    BY_NAME[SEEN_NOW],
    *(BY_NAME[n] for n in SHAPES),  # the latency distributions' shapes at the end (Context.shape)
)


def _present_findings(
    m: Measurements, present: Measurements | None, findings: list[Finding], config: Config
) -> list[Finding]:
    if present is None:
        return []
    seen = {(f.id, f.scope) for f in findings}
    # the GPUs at the end of the window beside the engines of the whole of it (their budgets, joins)
    engines = {k: v for k, v in m.values.items() if k in BY_NAME and BY_NAME[k].entity is Entity.ENGINE}
    gpus = {k: v for k, v in present.values.items() if BY_NAME[k].entity is Entity.GPU}
    merged = dataclasses.replace(present, values={**engines, **gpus}, baseline=m.baseline)
    ctx = Context.of(merged, config.thresholds, config.gpu_models)
    if present.values.get(SEEN_NOW):  # engines answered at the end: those that did not are gone now
        now = {entity_key(v.labels, Entity.ENGINE) for v in present.values[SEEN_NOW]}
        ctx.gone += [labels_of(view) for key, view in ctx.engines.items() if SEEN_NOW in view and key not in now]
    out = []
    for finding in (f for check in PRESENT_CHECKS for f in check.check(ctx)):
        if (finding.id, finding.scope) not in seen:
            finding.summary = finding.summary.rstrip(".") + " (at the end of the window; its mean dilutes it)."
            seen.add((finding.id, finding.scope))
            out.append(finding)
    return out


def _recent_findings(
    recent: list[Measurements], findings: list[Finding], firing: list[Firing], config: Config
) -> list[Finding]:
    """Findings over an alert's shorter window that explain an alert nothing else explains."""
    todo = [a for a in firing if a.explainers]
    seen = {(f.id, f.scope) for f in findings}
    out = []
    for m in recent:
        ctx = Context.of(m, config.thresholds, config.gpu_models)
        for finding in (f for check in all_checks() for f in check(ctx)):
            if (finding.id, finding.scope) in seen:
                continue
            if any(finding.id in a.explainers and matches(a, finding.affected) for a in todo):
                # a burst the alert's window saw and the whole window's average does not: not critical
                finding.summary = finding.summary.rstrip(".") + " (a burst, over the alert's shorter window)."
                finding.severity = min(finding.severity, Severity.WARNING, key=lambda s: s.rank)
                seen.add((finding.id, finding.scope))
                out.append(finding)
    return out


# which change reads as the trigger when several moved on one scope: discrete events first, then
# the load (seed 000: the mean prompt length, at the same request rate), the tail last
TRIGGER_ORDER = (
    "engine_restart",
    "model",
    "cache_config",
    "request_rate",
    "prompt_tokens_mean",
    "output_tokens_mean",
    "prefix_hit_rate",
    "prompt_tokens_p99",
)


OWN_SIGNAL = {"prefix_cache_miss": "prefix_hit_rate"}


# which way each load signal moves the work asked of the engines: more requests, longer prompts
# or outputs, fewer prefix hits ask more; the opposite asks less
LOAD_DIRECTION = {
    "request_rate": 1,
    "prompt_tokens_mean": 1,
    "prompt_tokens_p99": 1,
    "output_tokens_mean": 1,
    "prefix_hit_rate": -1,
}
LESS_WORK_CAUSES = frozenset({"gpu_underutilized"})  # what asking less of the engines can cause


def can_trigger(incident: str, change: Change) -> bool:
    """Whether `change` can have set `incident` off: a load that asks more can cause anything but
    idle GPUs, a load that asks less only idle GPUs (shorter prompts do not throttle a GPU or
    fill a KV pool); restarts, configuration and models can cause anything."""
    direction = LOAD_DIRECTION.get(change.signal)
    if direction is None or not isinstance(change.before, int | float) or not isinstance(change.after, int | float):
        return True
    more = (change.after - change.before) * direction > 0
    return more != (incident in LESS_WORK_CAUSES)


def _trigger_rank(change: Change) -> int:
    return TRIGGER_ORDER.index(change.signal) if change.signal in TRIGGER_ORDER else len(TRIGGER_ORDER)


STEP_NAMES = ("kv_cache", "queue", "gpu_memory_utilization", "preemption", "kernels")
_STEP_WORDS = {"kv_cache": "KV cache", "queue": "queue", "preemption": "preemptions"}


def _worst(ctx: Context, name: str, entities: str = "engines") -> tuple[float, str] | None:
    views = ctx.engines if entities == "engines" else ctx.gpus
    best: tuple[float, str] | None = None
    for view in views.values():
        v = value(view, name)
        if v is not None and (best is None or v > best[0]):
            labels = view[name][0].labels
            best = (v, describe(labels))
    return best


def _worst_util(ctx: Context) -> tuple[float, str] | None:
    best: tuple[float, str] | None = None
    for view in ctx.gpus.values():
        u = ctx.util(view)
        if u is not None and (best is None or u > best[0]):
            best = (u, describe(next(iter(view.values()))[0].labels))
    return best


def triage(ctx: Context, findings: list[Finding]) -> list[Step]:
    ids = {f.id for f in findings}
    steps = []
    kv = _worst(ctx, "kv_usage_max")
    if kv is None:
        steps.append(Step(1, "kv_cache", "skipped", "no KV-cache usage series"))
    else:
        ran_out = "kv_cache_exhaustion" in ids
        full = ctx.limit(t.KV_USAGE_CRITICAL)
        status = "fail" if kv[0] >= full or ran_out else "ok"
        detail = f"peak KV-cache usage {kv[0]:.0%} on {kv[1]} (threshold {full:.0%})"
        if ran_out and kv[0] < full:
            detail += "; preemptions show the pool ran out between samples"
        steps.append(Step(1, "kv_cache", status, detail))
    queue, waiting, slope, held = (
        _worst(ctx, "queue_p99"),
        _worst(ctx, "waiting_max"),
        _worst(ctx, "waiting_slope"),
        _worst(ctx, "held_max"),
    )
    if waiting is None:
        steps.append(Step(2, "queue", "skipped", "no waiting-queue series"))
    else:
        growing = slope is not None and slope[0] > ctx.limit(t.QUEUE_GROWTH)
        slow = queue is not None and queue[0] >= ctx.limit(t.QUEUE_TIME_P99)
        backlog = waiting[0] + (held[0] if held is not None else 0.0)
        status = "fail" if growing or slow or backlog >= ctx.limit(t.QUEUE_BACKLOG) else "ok"
        detail = f"up to {waiting[0]:.0f} waiting on {waiting[1]}"
        if held is not None and held[0] >= 1:
            # the engine's queue does not see them: kvscope serve's KV lanes hold them before it
            detail += f" and up to {held[0]:.0f} held at the gateway for their class's KV share"
        if queue is not None:
            detail += f", p99 queue time {queue[0]:.2f} s (threshold {ctx.limit(t.QUEUE_TIME_P99):g} s)"
        if growing and slope is not None:
            detail += f", growing {slope[0]:.2f}/s"
        steps.append(Step(2, "queue", status, detail))
    util, used = _worst_util(ctx), _worst(ctx, "fb_used_max", "gpus")
    if util is None and used is None:
        steps.append(Step(3, "gpu_memory_utilization", "skipped", "no GPU series (no DCGM / NVML exporter)"))
    else:
        status = "fail" if ids & {"gpu_memory_pressure", "gpu_hardware_fault"} else "ok"
        parts = []
        if used is not None:
            parts.append(f"peak framebuffer use {used[0]:,.0f} MiB on {used[1]}")
        if util is not None:
            parts.append(f"busiest GPU {util[0]:.0f} % on average ({util[1]})")
        else:  # missing is not idle
            parts.append("no utilisation series (none is read as idle)")
        unplaced = sorted(
            {m for g in ctx.gpus.values() if (m := labels_of(g).get("modelName")) and not ctx.models.lookup(m)}
        )
        if unplaced:
            parts.append(f"no datasheet row for {', '.join(unplaced)}: judged on the page's own limits only")
        steps.append(Step(3, "gpu_memory_utilization", status, "; ".join(parts)))
    preempt, swapped = _worst(ctx, "preemption_rate"), _worst(ctx, "swapped_max")
    if preempt is None and swapped is None:
        steps.append(Step(4, "preemption", "skipped", "no preemption or swap series"))
    else:
        rate = preempt[0] if preempt else 0.0
        limit = ctx.limit(t.PREEMPTION_RATE)
        status = "fail" if rate > limit or (swapped and swapped[0] > 0) else "ok"
        detail = f"{rate:.2f} preemptions/s at most (threshold {limit:g}/s)"
        if swapped is not None:
            detail += f"; up to {swapped[0]:.0f} swapped (V0)"
        steps.append(Step(4, "preemption", status, detail))
    dram = _worst(ctx, "dram_active_avg", "gpus")
    emulated = bool(ctx.gpus) and all(labels_of(g).get("emulated") == "true" for g in ctx.gpus.values())
    capture = (
        "next: capture the engine's kernels. vLLM's profiler: VLLM_TORCH_PROFILER_DIR=/tmp/vllm-prof, then "
        "curl -X POST <server>/start_profile, load for 30 s, curl -X POST <server>/stop_profile; or "
        "nsys profile -t cuda,nvtx,osrt -o vllm-%p --delay 60 --duration 30 <vllm command>; "
        "one kernel in depth: ncu --target-processes all -k regex:attention --launch-count 20 -o attn <vllm command>"
    )
    if emulated:  # an emulated GPU's DRAM activity is made up from the engine's load: no claim on it
        steps.append(Step(5, "kernels", "skipped", "emulated GPUs have no kernel-level readings; " + capture))
    elif dram is None:
        steps.append(
            Step(
                5,
                "kernels",
                "skipped",
                "no DCGM profiling fields (DRAM / tensor activity); " + capture,
            )
        )
    else:
        status = "fail" if "decode_bandwidth_bound" in ids else "ok"
        steps.append(Step(5, "kernels", status, f"HBM active {dram[0]:.0%} on {dram[1]}; " + capture))
    return steps
