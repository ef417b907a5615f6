"""The diagnosis accuracy table in docs/diagnosis.md: every scenario of the library through a
real Prometheus (backfilled), a saved bundle, and live pages (--scrape).

    .venv/bin/python -m bench.diagnosis_accuracy
"""

from __future__ import annotations

import sys
import time

from bench.scratch import scratch_dir
from diagnosis.measures import MEASURES
from diagnosis.run import Request, run
from diagnosis.sources.scrape import compute
from diagnosis.verdict import diagnose
from kvscope import promtext
from kvscope.promql import Selector
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics, page
from tests.scenarios.library import DIAGNOSE_AT, scenarios


def scraped(scenario, minute: float) -> str:
    sim = Simulation(scenario.instances, kvscope_extras=scenario.kvscope_extras)
    for _ in range(int(minute * 2)):
        sim.step(30)
    first = promtext.parse(page(sim))
    sim.step(60)
    second = promtext.parse(page(sim))

    def fix(samples: list[promtext.Sample]) -> list[promtext.Sample]:
        return [promtext.Sample(s.name, {"instance": "page", **s.labels}, s.value) for s in samples]

    return diagnose(compute(MEASURES, [(0.0, fix(first)), (60.0, fix(second))], "scrape"), 0, 60, "scrape").bottleneck


def main() -> int:
    work = scratch_dir("kvscope-accuracy-")
    library = scenarios()
    start = time.time() - 62 * 60
    sims = [Simulation(s.instances, {"scenario": s.name}, s.kvscope_extras) for s in library]
    rows, right = [], 0
    with backfilled(work, openmetrics(sims, start, 60)) as server:
        for s in library:
            bundle = work / f"{s.name}.json"
            live = run(
                Request(
                    prometheus=server.base_url,
                    at=start + DIAGNOSE_AT * 60,
                    window=900,
                    selector=Selector.of(scenario=s.name),
                    save_bundle=bundle,
                )
            )
            offline = run(Request(bundle=bundle)).bottleneck
            scrape = scraped(s, 49.5 if s.name == "xid-79" else DIAGNOSE_AT)
            named = sorted({a.get("pod") or a.get("Hostname") for a in live.affected})
            ok = live.bottleneck == s.expected and offline == s.expected
            right += ok
            rows.append(
                f"| {s.name} | `{s.expected}` | `{live.bottleneck}` | {live.confidence:.2f} | "
                f"{', '.join(named) or '-'} | `{offline}` | `{scrape}` | {s.note} |"
            )
    print(f"{right}/{len(library)} scenarios right through Prometheus and bundles\n")
    print("| scenario | expected | Prometheus | confidence | affected | bundle | scrape | what happens |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0 if right == len(library) else 1


if __name__ == "__main__":
    sys.exit(main())
