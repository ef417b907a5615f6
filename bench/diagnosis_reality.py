"""Accuracy on the reality split (tests/scenarios/reality.py), written before the checks were
changed: every case backfilled into a real Prometheus and diagnosed at minute 57 over 15 minutes.

    .venv/bin/python -m bench.diagnosis_reality
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from diagnosis.run import Request, run
from kvscope.promql import Selector
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics
from tests.scenarios.reality import DIAGNOSE_AT, cases, names_of, score


def incidents(diagnosis) -> list[tuple[str, set[str]]]:
    """The incidents a diagnosis names (before issue 12 there were none: its findings then)."""
    found = getattr(diagnosis, "incidents", None)
    if found is None:
        found = diagnosis.findings
    return [(i.id, names_of(i.affected)) for i in found]


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="kvscope-reality-"))
    library = cases()
    start = time.time() - 62 * 60
    sims = [Simulation(c.instances, {"scenario": c.name}, start=start) for c in library]
    rows, right = [], 0
    with backfilled(work, openmetrics(sims, start, 60)) as server:
        for case in library:
            result = run(
                Request(
                    prometheus=server.base_url,
                    at=start + DIAGNOSE_AT * 60,
                    window=900,
                    selector=Selector.of(scenario=case.name),
                )
            )
            ok, why = score(case, incidents(result))
            right += ok
            found = ", ".join(sorted(f"{i} ({'/'.join(sorted(n)) or 'fleet'})" for i, n in incidents(result)))
            rows.append(f"| {case.name} | {'yes' if ok else 'no'} | {found or '-'} | {why or '-'} | {case.note} |")
    print(f"{right}/{len(library)} reality cases right (every incident, nothing else)\n")
    print("| case | right | incidents found | what differs | what happens |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0 if right == len(library) else 1


if __name__ == "__main__":
    sys.exit(main())
