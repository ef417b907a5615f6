"""A real Prometheus holding recorded-style series: written as OpenMetrics, backfilled with
`promtool tsdb create-blocks-from openmetrics`, served read-only for the diagnosis."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from drill import prometheus_server as prometheus
from drill.launcher import ServerProcess, running


@contextlib.contextmanager
def backfilled(work: Path, openmetrics: str, rule_files: Sequence[Path] = ()) -> Iterator[ServerProcess]:
    """Prometheus over `openmetrics` (with `rule_files` loaded), ready; stopped on exit."""
    (work / "series.om").write_text(openmetrics)
    prometheus.backfill(work / "series.om", work / "data")
    server = prometheus.start(work / "prometheus", {}, storage=work / "data", retention="30d", rule_files=rule_files)
    with running(server, ready_path="/-/ready", timeout=60) as ready:
        yield ready
