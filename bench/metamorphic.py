"""The metamorphic suite in full: every case of the library and both reality splits under every
transform (tests/scenarios/transforms.py), backfilled into one real Prometheus; a row per
transform with how many cases kept their verdict, and each case that did not.

    .venv/bin/python -m bench.metamorphic
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.scenarios.transforms import fleets, variants
from tests.scenarios.verdicts import store, verdict


def main() -> int:
    chosen = list(variants())
    originals = [f for f, _ in fleets()]
    kept: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    changed = []
    with store(Path(tempfile.mkdtemp(prefix="kvscope-metamorphic-")), [*originals, *(v for _, _, v in chosen)]) as (
        url,
        start,
    ):
        base = {f.name: verdict(url, start, f) for f in originals}
        for transform, original, shaped in chosen:
            now = verdict(url, start, shaped)
            kept[transform][1] += 1
            if now == base[original.name]:
                kept[transform][0] += 1
            else:
                changed.append(f"| {transform} | {original.name} | {base[original.name]} | {now} |")
    print("| transform | cases whose verdict held |\n| --- | --- |")
    for transform, (same, total) in kept.items():
        print(f"| {transform} | {same}/{total} |")
    if changed:
        print("\n| transform | case | verdict | after the transform |\n| --- | --- | --- | --- |")
        print("\n".join(changed))
    return 0 if not changed else 1


if __name__ == "__main__":
    sys.exit(main())
