"""The evidence over time, for the HTML report's plots: each evidence's measure re-evaluated over
a short window at every step of the baseline and the window (one range query each), the way
diagnosis/onset.py finds an onset, so a plot's line crosses its threshold where the onset says.

Only the Prometheus source has the history; a scrape or a bundle holds one value per signal,
and the report then draws that value against its threshold instead. Fetching only: nothing here
decides, and nothing renders.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from diagnosis.findings import Evidence
from diagnosis.measures import BY_NAME, ENTITY_LABELS
from diagnosis.onset import SHORT, STEPS
from diagnosis.run import Request
from diagnosis.sources.prometheus import PrometheusSource, promql
from diagnosis.verdict import Diagnosis
from kvscope.prometheus import PrometheusClient, PrometheusError
from kvscope.promql import Selector

MAX_PLOTS = 40  # range queries per report at most (a large fleet's report stays quick)
MAX_SERIES = 6  # lines in one plot at most


def fetch(request: Request, diagnosis: Diagnosis) -> dict[str, Any] | None:
    """The history behind `diagnosis` (JSON-ready, the shape `over` returns), or None when the
    request's source keeps none (a scrape, a bundle) or the diagnosis found nothing to plot."""
    if not request.prometheus or not diagnosis.findings:
        return None
    client = PrometheusClient(request.prometheus, request.path_prefix, request.headers, request.bearer_token)
    source = PrometheusSource(
        client,
        request.selector,
        request.recent,
        gpu_selector=request.config.gpu_selector,
        engine_selector=request.config.engine_selector,
    )
    try:
        return over(source, diagnosis, request.at, request.window + (request.baseline or request.window))
    finally:
        source.close()


def query_for(source: PrometheusSource, evidence: Evidence) -> str | None:
    """The PromQL whose range draws `evidence` over time (its measure over SHORT, on its entity),
    or None when the evidence names no measure."""
    measure = BY_NAME.get(evidence.measure)
    if measure is None:
        return None
    keep = (*ENTITY_LABELS[measure.entity], *measure.by)
    labels = {k: v for k, v in evidence.labels.items() if k in keep}
    selector = source.selector & source.entity_selector[measure.entity] & Selector.of(**labels)
    return promql(measure, SHORT, selector, min(source.recent, SHORT))


def over(source: PrometheusSource, diagnosis: Diagnosis, at: float, span: float) -> dict[str, Any]:
    """{"start", "end", "step", "short", "series": [{"finding", "evidence", "query", "lines":
    [{"labels", "points": [[t, v], ...]}]}], "errors": [...]}: one entry per plotted evidence,
    by its place in the diagnosis's findings. A query that fails costs its own plot only."""
    step = max(span / STEPS, 15.0)
    wanted: list[tuple[int, int, str]] = []
    for fi, finding in enumerate(diagnosis.findings):
        for ei, evidence in enumerate(finding.evidence):
            expr = query_for(source, evidence)
            if expr is not None and len(wanted) < MAX_PLOTS:
                wanted.append((fi, ei, expr))

    def read(expr: str) -> list[dict[str, Any]] | str:
        try:
            matrix = source.client.query_range(expr, at - span, at, step)
        except PrometheusError as exc:
            return str(exc)
        return [
            {"labels": labels, "points": [[t, v] for t, v in points if math.isfinite(v)]}
            for labels, points in matrix[:MAX_SERIES]
        ]

    exprs = sorted({expr for _, _, expr in wanted})
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = dict(zip(exprs, pool.map(read, exprs), strict=True))
    series, errors = [], []
    for fi, ei, expr in wanted:
        answer = answers[expr]
        if isinstance(answer, str):
            errors.append(answer)
            continue
        series.append({"finding": fi, "evidence": ei, "query": expr, "lines": answer})
    return {"start": at - span, "end": at, "step": step, "short": SHORT, "series": series, "errors": errors}
