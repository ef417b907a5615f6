"""A real Prometheus (Debian's `prometheus` package) for drills and tests: its config, its
process, and TSDB blocks backfilled from OpenMetrics (`promtool tsdb create-blocks-from`)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from drill.launcher import DebianPackageMissing, ServerProcess, debian_binary, free_port, start_process


class PrometheusMissing(DebianPackageMissing):
    """Prometheus is not installed (the message names the Debian package)."""


def binary(name: str = "prometheus") -> str:
    """`prometheus` or `promtool` (both in Debian's prometheus package)."""
    return debian_binary([name], "prometheus", PrometheusMissing)


def write_config(
    path: Path,
    jobs: Mapping[str, Sequence[str]],
    *,
    interval: str = "2s",
    rule_files: Sequence[Path] = (),
    evaluation_interval: str | None = None,
    alertmanagers: Sequence[str] = (),
) -> Path:
    """A prometheus.yml scraping `jobs` (name -> host:port targets) every `interval`, sending
    its alerts to `alertmanagers` (host:port)."""
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
    if alertmanagers:
        config["alerting"] = {
            "alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": list(alertmanagers)}]}]
        }
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
    alertmanagers: Sequence[str] = (),
) -> ServerProcess:
    """Prometheus on 127.0.0.1 scraping `jobs` (alerting `alertmanagers`); ready when /-/ready answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = write_config(
        workdir / "prometheus.yml", jobs, interval=interval, rule_files=rule_files, alertmanagers=alertmanagers
    )
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
