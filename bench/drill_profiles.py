"""Benchmark: how much the tuned profile improves on the default under seed 000's avalanche.

Runs `kvscope drill kv-avalanche --profile both` (the real stack, the same seeded traffic on both
profiles) `--runs` times and prints one Markdown row per run for docs/benchmarks.md: short-request
p99 / p50 TTFT, medium/long p99, preemptions, failed requests. Timed comparisons belong here,
not in pass/fail tests: tests/integration/test_drills.py asserts only what is deterministic.

    python -m bench.drill_profiles --duration 90s --runs 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="90s", help="traffic per profile (the CI variant: 90s)")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    kvscope = Path(sys.executable).parent / "kvscope"
    print(
        "| run | default short p99 / p50 | tuned short p99 / p50 | tuned medium+long p99 | preemptions default / tuned |"
    )
    print("| --- | --- | --- | --- | --- |")
    worse = 0
    for i in range(1, args.runs + 1):
        report = Path(tempfile.mkdtemp(prefix="kvscope-bench-drill-")) / "report"
        result = subprocess.run(
            [
                str(kvscope),
                "drill",
                "kv-avalanche",
                "--profile",
                "both",
                "--duration",
                args.duration,
                "--report",
                str(report),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        results = report / "results.json"
        if not results.is_file():
            print(
                f"run {i}: the drill wrote no results (exit {result.returncode}):\n{result.stdout[-2000:]}",
                file=sys.stderr,
            )
            return 1
        out = json.loads(results.read_text())["profiles"]
        d, t = out["default"], out["tuned"]
        worse += (t["short_p99_ttft_s"] or 0) >= (d["short_p99_ttft_s"] or 0)
        print(
            f"| {i} | {_ms(d['short_p99_ttft_s'])} / {_ms(d['short_p50_ttft_s'])} | "
            f"{_ms(t['short_p99_ttft_s'])} / {_ms(t['short_p50_ttft_s'])} | {_ms(t['long_p99_ttft_s'])} | "
            f"{d['preemptions']:.0f} / {t['preemptions']:.0f} |"
        )
    print(f"\ntuned short p99 no better than default in {worse} of {args.runs} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
