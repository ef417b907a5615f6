"""A real VictoriaMetrics (Debian's `victoria-metrics`, single node) holding the same recorded-style
series the Prometheus tests backfill: the OpenMetrics text (second timestamps) converted to the
Prometheus text format (millisecond timestamps) and imported through /api/v1/import/prometheus.

Set up the way VictoriaMetrics' docs say to backfill: a retention that covers the samples'
timestamps (older ones are rejected), the response cache off (it assumes samples arrive with the
current time), and /internal/force_flush once the import is done (recent samples are otherwise
invisible for a few seconds)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from drill.launcher import DebianPackageMissing, ServerProcess, debian_binary, free_port, running, start_process
from tests.scenarios.reality import names_of
from tests.waiting import eventually

RETENTION = "100y"  # the scenarios' timestamps are an hour old; any retention longer than that
CHUNK_LINES = 20_000  # samples per piece of the streamed import body


class VictoriaMetricsMissing(DebianPackageMissing):
    """VictoriaMetrics is not installed (the message names the Debian package)."""


def binary() -> str:
    return debian_binary(["victoria-metrics"], "victoria-metrics", VictoriaMetricsMissing)


def prometheus_text(openmetrics: Iterable[str]) -> Iterator[str]:
    """OpenMetrics sample lines (`name{...} value seconds.mmm`) as Prometheus text lines with
    millisecond timestamps; comments (`# TYPE`, `# EOF`) are left out."""
    for line in openmetrics:
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        # label values may hold spaces (modelName="NVIDIA H100 80GB HBM3"): split from the right
        series, value, seconds = line.rsplit(" ", 2)
        yield f"{series} {value} {round(float(seconds) * 1000)}\n"


def start(workdir: Path, port: int | None = None) -> ServerProcess:
    """VictoriaMetrics on 127.0.0.1 with its own storage under `workdir`; ready when /health answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    argv = [
        binary(),
        f"-storageDataPath={workdir / 'data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        f"-retentionPeriod={RETENTION}",
        "-search.disableCache",
        "-loggerLevel=WARN",
    ]
    return start_process("victoria-metrics", argv, f"http://127.0.0.1:{port}", workdir / "victoria-metrics.log")


def load(server: ServerProcess, openmetrics: str) -> int:
    """Import `openmetrics` into a running VictoriaMetrics and wait until every sample is
    searchable (samples younger than `-search.latencyOffset`, 30 s, never are); their number."""

    def body() -> Iterator[bytes]:
        lines = prometheus_text(openmetrics.splitlines())
        while chunk := [line for _, line in zip(range(CHUNK_LINES), lines, strict=False)]:
            yield "".join(chunk).encode()

    times = [float(line.rsplit(" ", 1)[1]) for line in openmetrics.splitlines() if line and not line.startswith("#")]
    # every sample, counted by the store itself: what was imported is all searchable
    span = math.ceil(max(times) - min(times)) + 60
    counted = f'sum(count_over_time({{__name__=~".+"}}[{span}s]))'
    with httpx.Client(base_url=server.base_url, timeout=300) as client:
        answer = client.post("/api/v1/import/prometheus", content=body())
        if answer.status_code != 204:
            raise RuntimeError(f"import refused (HTTP {answer.status_code}): {answer.text[:300]}")

        def searchable() -> bool:
            client.get("/internal/force_flush").raise_for_status()
            params = {"query": counted, "time": f"{max(times) + 1:.3f}"}
            result = client.get("/api/v1/query", params=params).json()["data"]["result"]
            return bool(result) and int(float(result[0]["value"][1])) == len(times)

        eventually(searchable, timeout=60, interval=0.5, what="every imported sample searchable")
        client.get("/internal/resetRollupResultCache").raise_for_status()
    return len(times)


@contextlib.contextmanager
def imported(work: Path, openmetrics: str) -> Iterator[ServerProcess]:
    """VictoriaMetrics holding `openmetrics`, ready; stopped on exit."""
    server = start(work / "victoria-metrics")
    with running(server, ready_path="/health", timeout=60) as ready:
        load(ready, openmetrics)
        yield ready


def verdict(diagnosis: Any) -> dict[str, Any]:
    """What two stores holding the same series must agree on: the bottleneck, its severity and
    scope, every incident with what it explains and its trigger, every finding, each step."""
    return {
        "bottleneck": diagnosis.bottleneck,
        "severity": str(diagnosis.severity),
        "affected": names_of(diagnosis.affected),
        "incidents": sorted(
            (i.id, str(i.severity), tuple(sorted(names_of(i.affected))), tuple(i.explains), _signal(i.trigger))
            for i in diagnosis.incidents
        ),
        "findings": sorted((f.id, tuple(sorted(names_of(f.affected)))) for f in diagnosis.findings),
        "steps": [(s.name, s.status) for s in diagnosis.steps],
        "changes": sorted((c.signal, c.where) for c in diagnosis.changes),
    }


def onsets(diagnosis: Any) -> dict[str, float | None]:
    """Each incident's onset (unix seconds), by incident id and scope."""
    return {f"{i.id} {'/'.join(sorted(i.scopes))}": i.onset for i in diagnosis.incidents}


def _signal(trigger: dict[str, object] | None) -> str | None:
    return str(trigger["signal"]) if trigger else None
