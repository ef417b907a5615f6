"""The Prometheus source: every measure as one PromQL instant query at `at` over `window`.

Speaks the common Prometheus HTTP API, so Thanos, Mimir (path prefix + X-Scope-OrgID) and
VictoriaMetrics work: base URL, path prefix, extra headers and a bearer token are settings.
Queries run concurrently; range functions keep each one to the window, so the time to a
verdict does not grow with how much history the server holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from diagnosis.measures import ENTITY_LABELS, Kind, Measure, Measurements, Value
from diagnosis.sources import SourceError, format_duration

RECENT = 300.0  # "recent" = the last 5 minutes unless the caller says otherwise


def _selector(user: str, extra: str) -> str:
    parts = [p for p in (user.strip().strip("{}").strip(), extra) if p]
    return "{" + ",".join(parts) + "}" if parts else ""


def promql(measure: Measure, window: float, selector: str = "", recent: float = RECENT) -> str:
    """The query for a measure: alternatives (legacy names) joined with `or`.

    `recent` is the end part of the window compared with what came before it (prefix hit
    rate, throughput); the "before" part is the rest of the window, at least a minute.
    """
    by = ", ".join((*ENTITY_LABELS[measure.entity], *measure.by))
    w, r = format_duration(window), format_duration(recent)
    before = format_duration(max(window - recent, 60.0))
    sel = _selector(selector, measure.matchers)
    den_sel = _selector(selector, measure.denominator_matchers)

    def one(name: str, den: str | None) -> str:
        match measure.kind:
            case Kind.GAUGE_MAX:
                return f"max by ({by}) (max_over_time({name}{sel}[{w}]))"
            case Kind.GAUGE_AVG:
                return f"avg by ({by}) (avg_over_time({name}{sel}[{w}]))"
            case Kind.GAUGE_MIN:
                return f"min by ({by}) (min_over_time({name}{sel}[{w}]))"
            case Kind.GAUGE_LAST:
                return f"max by ({by}) (last_over_time({name}{sel}[{w}]))"
            case Kind.DERIV:
                return f"sum by ({by}) (deriv({name}{sel}[{w}]))"
            case Kind.RATE:
                return f"sum by ({by}) (rate({name}{sel}[{w}]))"
            case Kind.RATE_RECENT:
                return f"sum by ({by}) (rate({name}{sel}[{r}]))"
            case Kind.INCREASE:
                # a counter born inside the window has no earlier sample to increase from
                return (
                    f"sum by ({by}) (increase({name}{sel}[{w}])) or "
                    f"sum by ({by}) ({name}{sel} unless {name}{sel} offset {w})"
                )
            case Kind.RATIO | Kind.RATIO_RECENT | Kind.RATIO_BEFORE:
                span, offset = {
                    Kind.RATIO: (w, ""),
                    Kind.RATIO_RECENT: (r, ""),
                    Kind.RATIO_BEFORE: (before, f" offset {r}"),
                }[measure.kind]
                return (
                    f"sum by ({by}) (increase({name}{sel}[{span}]{offset})) / "
                    f"sum by ({by}) (increase({den}{den_sel}[{span}]{offset}))"
                )
            case Kind.QUANTILE:
                return f"histogram_quantile({measure.quantile}, sum by (le, {by}) (rate({name}_bucket{sel}[{w}])))"
            case Kind.MEAN:
                return f"sum by ({by}) (rate({name}_sum{sel}[{w}])) / sum by ({by}) (rate({name}_count{sel}[{w}]))"
            case Kind.CHANGED:
                return (
                    f"max by ({by}) ({name}{sel} unless {name}{sel} offset {w}) * 0 + 1 or "
                    f"max by ({by}) (clamp_max(changes({name}{sel}[{w}]), 1))"
                )
        raise ValueError(measure.kind)

    dens: list[str | None] = [n for s in measure.denominator for n in s.names] or [None] * len(measure.names)
    return " or ".join(f"({one(n, d)})" for n, d in zip(measure.names, dens, strict=False))


@dataclass
class PrometheusSource:
    url: str
    path_prefix: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token: str | None = None
    timeout: float = 30.0
    selector: str = ""
    recent: float = RECENT

    def __post_init__(self) -> None:
        headers = dict(self.headers)
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        base = self.url.rstrip("/") + "/" + self.path_prefix.strip("/")
        self._client = httpx.Client(base_url=base.rstrip("/"), headers=headers, timeout=self.timeout)

    @property
    def name(self) -> str:
        return self.url.rstrip("/") + ("/" + self.path_prefix.strip("/") if self.path_prefix else "")

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        try:
            response = self._client.get("/api/v1/query", params={"query": expr, "time": f"{at:.3f}"})
        except httpx.HTTPError as exc:
            raise SourceError(f"Prometheus at {self.name} is unreachable: {exc}") from exc
        try:
            body: dict[str, Any] = response.json()
        except ValueError as exc:
            raise SourceError(
                f"{self.name} answered HTTP {response.status_code} with no Prometheus API "
                f"response (wrong URL or path prefix?)"
            ) from exc
        if body.get("status") != "success":
            if response.status_code in (401, 403):
                raise SourceError(
                    f"{self.name} refused the query (HTTP {response.status_code}): check the "
                    "bearer token or headers such as X-Scope-OrgID"
                )
            raise QueryFailed(f"{body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] != "vector":
            return []
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def check_reachable(self, at: float) -> None:
        self.query("vector(1)", at)

    def fetch(self, measures: Sequence[Measure], at: float, window: float) -> Measurements:
        self.check_reachable(at)
        out = Measurements()

        def run(measure: Measure) -> tuple[Measure, str, list[tuple[dict[str, str], float]] | str]:
            expr = promql(measure, window, self.selector, self.recent)
            try:
                return measure, expr, self.query(expr, at)
            except QueryFailed as exc:
                return measure, expr, str(exc)

        with ThreadPoolExecutor(max_workers=8) as pool:
            for measure, expr, result in pool.map(run, measures):
                if isinstance(result, str):
                    out.errors[measure.name] = result
                    continue
                values = [Value(v, labels, expr) for labels, v in result if not math.isnan(v) and not math.isinf(v)]
                if values:
                    out.values[measure.name] = values
        return out

    def close(self) -> None:
        self._client.close()


class QueryFailed(RuntimeError):  # noqa: N818 - one query refused, not our error
    """One query was refused (bad PromQL for this server's version): that measure is missing."""
