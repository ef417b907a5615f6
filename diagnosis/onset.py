"""When an incident began: its cause's first thresholded signal, re-evaluated over a short window
at every step from the baseline's start to `at` (one range query per incident); the onset is
the first step of the last run in which the signal was past its threshold, in the direction it
is past it at the end. Only the Prometheus source has the history; elsewhere onset stays None.
"""

from __future__ import annotations

from diagnosis.incidents import Incident
from diagnosis.measures import BY_NAME, ENTITY_LABELS
from diagnosis.sources.prometheus import PrometheusSource, promql
from kvscope.prometheus import PrometheusError
from kvscope.promql import Selector

SHORT = 120.0  # the window each step's value is taken over
STEPS = 120  # points in the range: a 30-minute span is read every 15 s


def find(source: PrometheusSource, incidents: list[Incident], at: float, span: float) -> None:
    """Set each incident's onset (unix seconds) where its signal shows one."""
    for incident in incidents:
        evidence = next((e for e in incident.cause.evidence if e.threshold is not None and e.measure in BY_NAME), None)
        if evidence is None:
            continue
        measure = BY_NAME[evidence.measure]
        labels = {k: v for k, v in evidence.labels.items() if k in (*ENTITY_LABELS[measure.entity], *measure.by)}
        selector = source.selector & source.entity_selector[measure.entity] & Selector.of(**labels)
        expr = promql(measure, SHORT, selector, min(source.recent, SHORT))
        step = max(span / STEPS, 15.0)
        try:
            series = source.client.query_range(expr, at - span, at, step)
        except PrometheusError:
            continue
        if not series or evidence.threshold is None:
            continue
        points, limit = series[0][1], evidence.threshold
        above = evidence.value >= limit
        past = [(t, (v >= limit) == above) for t, v in points]
        onset = None
        for t, holds in past:
            if holds and onset is None:
                onset = t
            elif not holds:
                onset = None
        incident.onset = onset
