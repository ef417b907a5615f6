"""The metamorphic suite in full: every case of the library and the reality splits under every
transform (tests/scenarios/transforms.py), backfilled into one real Prometheus; a row per
transform with how many cases kept their verdict, and each case that did not; and the time to
verdict on the largest fleets: the in-process diagnosis (fetch, checks, onsets) of each, and the
whole `kvscope diagnose` command (Python's start-up included, median of 3) on the largest case
as written and the largest transformed one.

    .venv/bin/python -m bench.metamorphic [--transforms window-1h,step-60s] [--cases kv-full-admission-queue]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict

from bench.scratch import scratch_dir
from tests.scenarios.transforms import Fleet, fleets, variants
from tests.scenarios.verdicts import AT_MINUTE, store, verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metamorphic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--transforms", help="comma-separated transform names (default: all)")
    parser.add_argument("--cases", help="comma-separated case names (default: every case)")
    args = parser.parse_args(argv)
    wanted = set(args.transforms.split(",")) if args.transforms else None
    cases = set(args.cases.split(",")) if args.cases else None
    originals = [f for f, _ in fleets() if cases is None or f.name in cases]
    if not originals:
        parser.error(f"no case named {args.cases}")
    chosen = [v for v in variants() if (wanted is None or v[0] in wanted) and (cases is None or v[1].name in cases)]
    kept: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    changed = []
    with store(scratch_dir("kvscope-metamorphic-"), [*originals, *(v for _, _, v in chosen)]) as (
        url,
        start,
    ):
        timed: list[tuple[float, int, str]] = []

        def judged(fleet):
            began = time.perf_counter()
            said = verdict(url, start, fleet)
            timed.append((time.perf_counter() - began, len(fleet.instances), fleet.name))
            return said

        base = {f.name: judged(f) for f in originals}
        for transform, original, shaped in chosen:
            now = judged(shaped)
            kept[transform][1] += 1
            if now == base[original.name]:
                kept[transform][0] += 1
            else:
                changed.append(f"| {transform} | {original.name} | {base[original.name]} | {now} |")
        largest = [
            max(group, key=lambda f: len(f.instances)) for group in (originals, [v for _, _, v in chosen]) if group
        ]
        commands = [(f, _command(url, start, f)) for f in largest]
    print("| transform | cases whose verdict held |\n| --- | --- |")
    for transform, (same, total) in kept.items():
        print(f"| {transform} | {same}/{total} |")
    if changed:
        print("\n| transform | case | verdict | after the transform |\n| --- | --- | --- | --- |")
        print("\n".join(changed))
    print("\n| fleet | instances | time to verdict |\n| --- | --- | --- |")
    for seconds, size, name in sorted(timed, key=lambda x: (-x[1], -x[0]))[:5]:
        print(f"| {name} | {size} | {seconds:.2f} s |")
    print(f"slowest of {len(timed)}: {max(timed)[0]:.2f} s")
    print("\n| fleet | instances | `kvscope diagnose` (median of 3) |\n| --- | --- | --- |")
    for fleet, seconds in commands:
        print(f"| {fleet.name} | {len(fleet.instances)} | {seconds:.2f} s |")
    return 0 if not changed else 1


def _command(url: str, start: float, fleet: Fleet) -> float:
    """The median wall time of three `kvscope diagnose` runs on one fleet, as an on-call types it."""
    argv = [
        *(sys.executable, "-m", "kvscope.cli", "diagnose", "--prometheus", url),
        *("--at", str(start + AT_MINUTE * 60), "--window", f"{fleet.window:.0f}s"),
        *("--selector", f'scenario="{fleet.name}"', "--format", "json"),
    ]
    times = []
    for _ in range(3):
        began = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
