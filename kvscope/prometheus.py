"""The one client for the Prometheus HTTP API (instant and range queries, rules, alerts), used by
the diagnosis, the drill and the tests. It speaks the common API, so Thanos, Mimir and
VictoriaMetrics work: base URL, path prefix (Mimir: /prometheus), extra headers (X-Scope-OrgID)
and a bearer token are settings. Answers are size-limited and time-limited."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

MAX_BYTES = 64 << 20  # an answer larger than this is refused, not read into memory


class PrometheusError(RuntimeError):
    """The API could not answer a query (the subclass says why)."""


class Unreachable(PrometheusError):  # noqa: N818 - a state of the server
    """No connection, or no answer within the timeout."""


class Refused(PrometheusError):  # noqa: N818 - the server's decision
    """HTTP 401/403: credentials or tenant header wrong."""


class NotPrometheus(PrometheusError):  # noqa: N818 - what the answer was
    """The answer is not the Prometheus API's JSON (wrong URL or path prefix)."""


class TooLarge(PrometheusError):  # noqa: N818 - what the answer was
    """The answer is larger than the client's size limit."""


class QueryFailed(PrometheusError):  # noqa: N818 - one query refused, not our error
    """The server refused one query (bad PromQL for its version, too many samples)."""


Vector = list[tuple[dict[str, str], float]]
Matrix = list[tuple[dict[str, str], list[tuple[float, float]]]]


@dataclass
class PrometheusClient:
    url: str
    path_prefix: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token: str | None = None
    timeout: float = 30.0
    max_bytes: int = MAX_BYTES

    # one dict per label set across this client's instant queries: a fleet's GPUs answer every
    # measure with the same labels, and a diagnosis keeps all of them (treat them as read-only)
    _label_sets: dict[tuple[tuple[str, str], ...], dict[str, str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        headers = dict(self.headers)
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        base = self.url.rstrip("/") + ("/" + self.path_prefix.strip("/") if self.path_prefix.strip("/") else "")
        self._client = httpx.Client(base_url=base, headers=headers, timeout=self.timeout, follow_redirects=False)

    @property
    def name(self) -> str:
        return str(self._client.base_url).rstrip("/")

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """The `data` of a successful API answer; PrometheusError otherwise."""
        try:
            with self._client.stream("GET", path, params=dict(params or {})) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > self.max_bytes:
                        raise TooLarge(f"{self.name}{path}: the answer is larger than {self.max_bytes:,} bytes")
                status = response.status_code
        except httpx.HTTPError as exc:
            raise Unreachable(f"Prometheus at {self.name} is unreachable: {exc}") from exc
        if status in (401, 403):
            raise Refused(
                f"{self.name} refused the query (HTTP {status}): "
                "check the bearer token or headers such as X-Scope-OrgID"
            )
        try:
            answer: dict[str, Any] = _json(bytes(body))
        except ValueError as exc:
            raise NotPrometheus(
                f"{self.name} answered HTTP {status} with no Prometheus API response (wrong URL or path prefix?)"
            ) from exc
        if answer.get("status") != "success":
            raise QueryFailed(f"{answer.get('errorType')}: {answer.get('error')}")
        return answer.get("data")

    def query(self, expr: str, at: float | None = None) -> Vector:
        """An instant query: (labels, value) pairs; a scalar answer is one pair without labels."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.get("/api/v1/query", params)
        try:
            if data["resultType"] == "scalar":
                return [({}, float(data["result"][1]))]
            if data["resultType"] != "vector":
                return []
            return [(self._shared(r["metric"]), float(r["value"][1])) for r in data["result"]]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise NotPrometheus(f"{self.name}: malformed query answer ({exc})") from exc

    def _shared(self, labels: dict[str, str]) -> dict[str, str]:
        if not isinstance(labels, dict):
            raise TypeError("labels are not an object")
        return self._label_sets.setdefault(tuple(sorted(labels.items())), labels)

    def query_range(self, expr: str, start: float, end: float, step: float) -> Matrix:
        """Every `step` seconds from `start` to `end`; times go in milliseconds, as every store
        keeps them (Prometheus rounds a finer time to the millisecond, VictoriaMetrics truncates
        it: the steps would fall 1 ms apart, either side of a sample)."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
        data = self.get("/api/v1/query_range", params)
        try:
            return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise NotPrometheus(f"{self.name}: malformed range answer ({exc})") from exc

    def samples(self, expr: str, at: float | None = None) -> Matrix:
        """The raw samples of a range selector (`metric[5m]`) at `at`: a matrix."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.get("/api/v1/query", params)
        try:
            if data["resultType"] != "matrix":
                return []
            return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise NotPrometheus(f"{self.name}: malformed range answer ({exc})") from exc

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The largest finite value of an instant query, or None when it has none (or failed)."""
        try:
            values = [v for _, v in self.query(expr, at) if math.isfinite(v)]
        except PrometheusError:
            return None
        return max(values) if values else None

    def rule_groups(self) -> list[dict[str, Any]]:
        """The rule groups Prometheus loaded (empty when a rule file was not found)."""
        return list(self.get("/api/v1/rules")["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/alerts")["alerts"])

    def wait_for_scrapes(self, job: str, targets: int = 1, timeout: float = 60.0) -> None:
        """Block until every target of `job` has been scraped successfully once.

        Prometheus scrapes a new target only after its first service-discovery cycle; a
        counter that moves before then appears already moved and `increase()` reads 0.
        """
        from kvscope.catalog import SCRAPE_UP
        from kvscope.promql import Selector, metric

        up = str(metric(SCRAPE_UP, Selector.of(job=job)))
        deadline = time.monotonic() + timeout
        while True:
            try:
                values = [v for _, v in self.query(up)]
            except PrometheusError:
                values = []
            if len(values) >= targets and all(v == 1 for v in values):
                return
            if time.monotonic() > deadline:
                raise PrometheusError(f"job {job!r}: {len(values)} of {targets} targets scraped after {timeout:.0f} s")
            time.sleep(0.5)


def _json(body: bytes) -> dict[str, Any]:
    import json

    answer = json.loads(body)
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    return answer
