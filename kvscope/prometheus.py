"""A real Prometheus for tests and drills (Debian's `prometheus` package), and a small client
for its HTTP API (instant and range queries, alerts)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from kvscope.launcher import ServerProcess, free_port, start_process


class PrometheusMissing(RuntimeError):  # noqa: N818 - a state of the machine
    """Prometheus is not installed (the message names the Debian package)."""


class QueryError(RuntimeError):
    """Prometheus answered with an error, or not at all."""


def binary(name: str = "prometheus") -> str:
    path = shutil.which(name)
    if path is None:
        raise PrometheusMissing(
            f"`{name}` is not on PATH: install Debian's 'prometheus' package "
            "(apt-get install prometheus), or run `make setup`"
        )
    return path


def write_config(
    path: Path,
    jobs: Mapping[str, Sequence[str]],
    *,
    interval: str = "2s",
    rule_files: Sequence[Path] = (),
    evaluation_interval: str | None = None,
) -> Path:
    """A prometheus.yml scraping `jobs` (name -> host:port targets) every `interval`."""
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": evaluation_interval or interval,
            "scrape_timeout": interval,
        },
        "scrape_configs": [
            {"job_name": name, "static_configs": [{"targets": list(targets)}]} for name, targets in jobs.items()
        ],
    }
    if rule_files:
        # Prometheus reads relative rule paths from the config file's folder, not the caller's.
        config["rule_files"] = [str(Path(p).resolve()) for p in rule_files]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start(
    workdir: Path,
    jobs: Mapping[str, Sequence[str]],
    *,
    interval: str = "2s",
    rule_files: Sequence[Path] = (),
    port: int | None = None,
    storage: Path | None = None,
    retention: str = "2d",
) -> ServerProcess:
    """Prometheus on 127.0.0.1 scraping `jobs`; ready when /-/ready answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = write_config(workdir / "prometheus.yml", jobs, interval=interval, rule_files=rule_files)
    argv = [
        binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={storage or workdir / 'data'}",
        f"--storage.tsdb.retention.time={retention}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
    ]
    return start_process("prometheus", argv, f"http://127.0.0.1:{port}", workdir / "prometheus.log")


def backfill(openmetrics: Path, data: Path) -> None:
    """Write an OpenMetrics file with timestamps into TSDB blocks under `data`
    (`promtool tsdb create-blocks-from openmetrics`), for a Prometheus started on `data`."""
    subprocess.run(
        [binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
        check=True,
        capture_output=True,
    )


@dataclass
class PrometheusApi:
    """The subset of the Prometheus HTTP API tests and drills use."""

    url: str
    timeout: float = 10.0

    def _get(self, path: str, params: Mapping[str, Any]) -> Any:
        try:
            response = httpx.get(self.url.rstrip("/") + path, params=dict(params), timeout=self.timeout)
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise QueryError(f"{self.url}{path}: {exc}") from exc
        if body.get("status") != "success":
            raise QueryError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """Instant vector: (labels, value) pairs."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self._get("/api/v1/query", params)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        data = self._get("/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step})
        return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]

    def rule_groups(self) -> list[dict[str, Any]]:
        """The rule groups Prometheus loaded (empty when a rule file was not found)."""
        return list(self._get("/api/v1/rules", {})["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/alerts", {})["alerts"])

    def wait_for_scrapes(self, job: str, targets: int = 1, timeout: float = 60.0) -> None:
        """Block until every target of `job` has been scraped successfully once.

        Prometheus scrapes a new target only after its first service-discovery cycle; a
        counter that moves before then appears already moved and `increase()` reads 0.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                up = [v for _, v in self.query(f'up{{job="{job}"}}')]
            except QueryError:
                up = []
            if len(up) >= targets and all(v == 1 for v in up):
                return
            if time.monotonic() > deadline:
                raise QueryError(f"job {job!r}: {len(up)} of {targets} targets scraped after {timeout:.0f} s")
            time.sleep(0.5)
