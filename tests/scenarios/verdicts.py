"""A real Prometheus holding fleets recorded at different scrape steps: one OpenMetrics file per
step, each backfilled into the same TSDB (promtool writes blocks side by side), served read-only."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

from diagnosis.run import Request, run
from diagnosis.verdict import Diagnosis
from drill import prometheus_server as prometheus
from drill.launcher import running
from kvscope.promql import Selector
from tests.scenarios.fleet import Simulation, write_openmetrics
from tests.scenarios.reality import names_of
from tests.scenarios.transforms import Fleet

MINUTES = 60  # recorded: the diagnosis runs at minute 57
AT_MINUTE = 57.0
Verdict = tuple[str, list[tuple[str, tuple[str, ...]]]]  # bottleneck, sorted (active incident, names)


def verdict(url: str, start: float, fleet: Fleet, phases: str = "auto") -> Verdict:
    """What the diagnosis says of one fleet: its bottleneck and its active incidents' scopes."""
    return summary(diagnosed(url, start, fleet, phases))


def diagnosed(url: str, start: float, fleet: Fleet, phases: str = "auto") -> Diagnosis:
    """The diagnosis of one fleet at minute AT_MINUTE over its window."""
    selector = Selector.of(scenario=fleet.name)
    return run(
        Request(prometheus=url, at=start + AT_MINUTE * 60, window=fleet.window, selector=selector, phases=phases)
    )


def summary(result: Diagnosis) -> Verdict:
    """A diagnosis's bottleneck and its active incidents with their scopes."""
    active = [(i.id, tuple(sorted(names_of(i.affected)))) for i in result.incidents if i.status == "active"]
    return result.bottleneck, sorted(active)


@contextlib.contextmanager
def store(work: Path, fleets: Sequence[Fleet]) -> Iterator[tuple[str, float]]:
    """(Prometheus URL, the recording's start) over every fleet, each labelled scenario=<name>."""
    start = time.time() - (MINUTES + 2) * 60  # a fleet's `lead` minutes are recorded before it
    by_shape: dict[tuple[float, float], list[Fleet]] = defaultdict(list)
    for fleet in fleets:
        by_shape[fleet.step, fleet.lead].append(fleet)
    data = work / "data"
    for (step, lead), group in by_shape.items():
        sims = [Simulation(f.instances, {"scenario": f.name}, f.extras, start=start, lead=lead) for f in group]
        path = work / f"series-{int(step)}s-{int(lead)}m.om"
        with path.open("w") as out:
            write_openmetrics(out, sims, start - lead * 60, MINUTES + lead, step=step)
        prometheus.backfill(path, data)
        path.unlink()
    server = prometheus.start(work / "prometheus", {}, storage=data, retention="30d")
    with running(server, ready_path="/-/ready", timeout=60) as ready:
        yield ready.base_url, start
