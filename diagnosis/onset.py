"""When an incident began, whether it still holds, and when its trigger moved.

Each thresholded signal of the incident's cause (up to four) is re-evaluated over a short window
at every step from the baseline's start to `at` (one range query each); a signal's onset is the
first step of the last run in which it was past its line (in the direction the finding needs;
an event's run may have ended),
and the incident's onset the latest of them: since then, all held. The same series say whether
it is still there: an incident none of whose signals was past its line in the last `present`
seconds has recovered, and ended when the last of them came back (a hardware fault that needs a
reset stays active: a GPU that threw a fatal XID is not fixed by going quiet; an XID the
application can cause has passed once it is older than the default window, APP_XID_MEMORY). A trigger's time is when its
signal's trailing mean crossed the midpoint between the baseline and the window, less half the
trailing window. Only the Prometheus source has the history; elsewhere all stay None (active).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnosis.changes import LOAD, Change
from diagnosis.findings import Evidence, Severity
from diagnosis.incidents import Incident
from diagnosis.measures import BY_NAME, ENTITY_LABELS
from diagnosis.sources.prometheus import PrometheusSource, promql
from kvscope.prometheus import PrometheusError
from kvscope.promql import Selector

if TYPE_CHECKING:
    from diagnosis.verdict import Diagnosis

SHORT = 120.0  # the window each step's value is taken over
MAX_SIGNALS = 4  # range queries per incident at most
STEPS = 120  # points in the range: a 30-minute span is read every 15 s


# what going quiet does not fix: a GPU that threw a fatal XID or failed a row remap needs a reset
# (the check rates those critical; an application-class XID, such as 13 once, is a warning)
STICKY = frozenset({"gpu_hardware_fault"})
# an application-class XID is the present for as long as the default 30-minute window (diagnosis
# run's Request.window) would see it, whatever --window says: an hour's window over an XID 13 from
# 50 minutes ago is as healthy as the default, and an XID 94 from 12 minutes ago as active
APP_XID_MEMORY = 1800.0


def _reset_needed(incident: Incident) -> bool:
    return incident.id in STICKY and incident.cause.severity is Severity.CRITICAL


def find(source: PrometheusSource, incidents: list[Incident], at: float, span: float, present: float) -> None:
    """Set each incident's onset (unix seconds): the time since which every thresholded signal of
    its cause has been past its line (the latest of their onsets); and `ended` on an incident none
    of whose signals held in the last `present` seconds (when the last of them stopped)."""
    for incident in incidents:
        runs = [_run(source, evidence, at, span) for evidence in _signals(incident)]
        known = [r for r in runs if r is not None]
        if known and len(known) == len(runs) and all(r.onset is not None for r in known):
            incident.onset = max(r.onset for r in known if r.onset is not None)
        if not known or len(known) < len(runs) or _reset_needed(incident):
            continue
        # a condition that held at every step (the pool not full, a long prompt tail) was there
        # before the incident: it says nothing about whether the incident still is
        telling = [r for r in known if not r.always]
        if telling and all(r.ended is not None and r.ended <= at - present for r in telling):
            ended = max(r.ended for r in telling if r.ended is not None)
            if incident.id in STICKY and ended > at - APP_XID_MEMORY:
                continue
            incident.ended = ended


def _signals(incident: Incident) -> list[Evidence]:
    out, seen = [], set()
    for e in incident.cause.evidence:
        if e.threshold is None or e.measure not in BY_NAME or e.margin is None or e.measure in seen:
            continue
        seen.add(e.measure)
        out.append(e)
    return out[:MAX_SIGNALS]


@dataclass(frozen=True)
class Run:
    """A signal's last run past its line in the span."""

    onset: float | None  # its first step
    ended: float | None  # the step at which it stopped holding; None while it holds at `at`
    always: bool  # it held at every step of the span


def _run(source: PrometheusSource, evidence: Evidence, at: float, span: float) -> Run | None:
    """The signal's last run past its line; None when it has no history here or never held."""
    measure = BY_NAME[evidence.measure]
    labels = {k: v for k, v in evidence.labels.items() if k in (*ENTITY_LABELS[measure.entity], *measure.by)}
    selector = source.selector & source.entity_selector[measure.entity] & Selector.of(**labels)
    expr = promql(measure, SHORT, selector, min(source.recent, SHORT))
    try:
        series = source.client.query_range(expr, at - span, at, max(span / STEPS, 15.0))
    except PrometheusError:
        return None
    if not series or evidence.threshold is None:
        return None
    limit = evidence.threshold
    onset, ended, held, always = None, None, False, True  # the last run in which it held (an event's may end)
    points = series[0][1]
    # the first SHORT seconds of a series' data read a window still filling (a rate from a few
    # samples): a throughput that held from there on held since the data began
    begun = points[0][0] + SHORT if points else 0.0
    for t, v in (p for p in points if p[0] >= begun):
        holds = (v > limit if limit == 0 else v >= limit) if evidence.above else v <= limit  # 0: an event
        if holds and not held:
            onset, ended = t, None
        elif held and not holds:
            ended = t
        held, always = holds, always and holds
    if onset is None:  # never past its line in the span: it says nothing about the present
        return None
    return Run(onset, None if held else ended, always)


def change_times(
    source: PrometheusSource, incidents: list[Incident], changes: list[Change], at: float, span: float
) -> None:
    """When each incident's trigger moved: the first step after which its signal stayed past the
    midpoint between its baseline and its window value (set on the trigger and the change)."""
    measure_of = {signal: name for name, signal in LOAD}
    for incident in incidents:
        trigger = incident.trigger
        if not trigger or trigger.get("at") is not None or trigger["signal"] not in measure_of:
            continue
        before, after = trigger["before"], trigger["after"]
        if not isinstance(before, int | float) or not isinstance(after, int | float):
            continue
        measure = BY_NAME[measure_of[str(trigger["signal"])]]
        scope = trigger.get("scope")
        scope = scope if isinstance(scope, dict) else {}
        labels = {str(k): str(v) for k, v in scope.items() if k in ENTITY_LABELS[measure.entity]}
        selector = source.selector & source.entity_selector[measure.entity] & Selector.of(**labels)
        try:
            series = source.client.query_range(
                promql(measure, SHORT, selector, SHORT), at - span, at, max(span / STEPS, 15.0)
            )
        except PrometheusError:
            continue
        if not series:
            continue
        middle, rising = (before + after) / 2, after > before
        moved = None
        for t, v in series[0][1]:
            past = v >= middle if rising else v <= middle
            if past and moved is None:
                moved = t
            elif not past:
                moved = None
        if moved is not None:
            # a trailing mean crosses the midpoint of a step half its window after the step
            moved -= SHORT / 2
            trigger["at"] = moved
            for change in changes:
                if change.signal == trigger["signal"] and change.scope == scope:
                    change.at = moved


def say_when(diagnosis: Diagnosis) -> None:
    """Put the trigger's time into each incident's summary ("... at the same request rate, since
    14:02 UTC"), and the first incident's into the verdict's."""
    for incident in diagnosis.incidents:
        at = incident.trigger.get("at") if incident.trigger else None
        if isinstance(at, int | float) and "since" not in incident.summary:
            when = time.strftime("%H:%M:%S UTC", time.gmtime(at))
            old = incident.summary
            incident.summary = old.rstrip(".") + f", since {when}."
            if diagnosis.summary.startswith(old):
                diagnosis.summary = incident.summary + diagnosis.summary[len(old) :]
