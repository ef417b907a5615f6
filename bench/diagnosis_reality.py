"""Accuracy on the reality splits, each written before the checks were changed for it: every case
backfilled into a real Prometheus and diagnosed at minute 57 over 15 minutes. Split 1 is
tests/scenarios/reality.py (issue 12), split 2 tests/scenarios/reality2.py (issue 20, from
public incident threads), split 3 tests/scenarios/reality3.py (a full KV pool that queues
without evicting, and its look-alikes), split 4 tests/scenarios/reality4.py (a PCIe link below its
best: an idle GPU's power saving, or a busy GPU's fault). Only active incidents count (a recovered
one is history).

    .venv/bin/python -m bench.diagnosis_reality [--split 1|2|3|4]
"""

from __future__ import annotations

import argparse
import sys

from bench.scratch import scratch_dir
from tests.scenarios import reality, reality2, reality3, reality4
from tests.scenarios.reality import diagnosed, names_of, recorded, score

SPLITS = {"1": reality.cases, "2": reality2.cases, "3": reality3.cases, "4": reality4.cases}


def incidents(diagnosis) -> list[tuple[str, set[str]]]:
    """The active incidents a diagnosis names (before issue 12 there were none: its findings then;
    before issue 20 every incident was active)."""
    found = getattr(diagnosis, "incidents", None)
    if found is None:
        found = diagnosis.findings
    return [(i.id, names_of(i.affected)) for i in found if getattr(i, "status", "active") == "active"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=sorted(SPLITS), default="1")
    args = parser.parse_args(argv)
    work = scratch_dir("kvscope-reality-")
    library = SPLITS[args.split]()
    rows, right = [], 0
    with recorded(work, library) as served:
        for case in library:
            result = diagnosed(served, case)
            ok, why = score(case, incidents(result))
            right += ok
            found = ", ".join(sorted(f"{i} ({'/'.join(sorted(n)) or 'fleet'})" for i, n in incidents(result)))
            rows.append(f"| {case.name} | {'yes' if ok else 'no'} | {found or '-'} | {why or '-'} |")
    healthy = [c for c in library if not c.expected]
    print(f"split {args.split}: {right}/{len(library)} cases right (every active incident, nothing else); ")
    print(f"{len(healthy)} healthy fleets among them\n")
    print("| case | right | incidents found | what differs |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0 if right == len(library) else 1


if __name__ == "__main__":
    sys.exit(main())
