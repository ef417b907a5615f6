"""The same series in two stores: every case of the scenario library and of the reality split
backfilled into a real Prometheus and imported into a real VictoriaMetrics, diagnosed from each
at minute 57 over 15 minutes, and compared case by case (the table in docs/diagnosis.md).

    .venv/bin/python -m bench.diagnosis_stores
"""

from __future__ import annotations

import sys
import time

from bench.scratch import scratch_dir
from diagnosis.run import Request, run
from kvscope.promql import Selector
from tests.scenarios import library, reality
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics
from tests.scenarios.victoria import imported, onsets, verdict


def _said(diagnosis) -> str:
    found = verdict(diagnosis)["incidents"]
    return ", ".join(f"{i} ({'/'.join(names) or 'fleet'})" for i, _, names, _, _ in found) or diagnosis.bottleneck


def main() -> int:
    work = scratch_dir("kvscope-stores-")
    start = time.time() - 62 * 60
    splits = [
        (
            "library",
            [s.name for s in library.scenarios()],
            [Simulation(s.instances, {"scenario": s.name}, s.kvscope_extras) for s in library.scenarios()],
        ),
        (
            "reality",
            [c.name for c in reality.cases()],
            [Simulation(c.instances, {"scenario": c.name}, start=start) for c in reality.cases()],
        ),
    ]
    rows, same, total = [], 0, 0
    for split, names, sims in splits:
        text = openmetrics(sims, start, 60)
        (work / split).mkdir()
        with backfilled(work / split, text) as prometheus, imported(work / split, text) as victoria:
            for name in names:
                request = {"at": start + 57 * 60, "window": 900.0, "selector": Selector.of(scenario=name)}
                a = run(Request(prometheus=prometheus.base_url, **request))  # type: ignore[arg-type]
                b = run(Request(prometheus=victoria.base_url, **request))  # type: ignore[arg-type]
                agree = verdict(a) == verdict(b)
                moved = [
                    abs(x - y) for k, x in onsets(a).items() if x is not None and (y := onsets(b).get(k)) is not None
                ]
                same += agree
                total += 1
                rows.append(
                    f"| {split} | {name} | {_said(a)} | {'same' if agree else _said(b)} | "
                    f"{a.confidence:.2f} / {b.confidence:.2f} | {max(moved, default=0):.0f} s |"
                )
    print(f"{same}/{total} cases give the same verdict from Prometheus and VictoriaMetrics\n")
    print("| split | case | Prometheus | VictoriaMetrics | confidence (P / VM) | onset apart |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
