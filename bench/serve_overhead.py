"""Benchmark (a): the gateway's cost. `kvscope serve --profile default` against vLLM's own
OpenAI server, same model, same loads.

    .venv/bin/python -m bench.serve_overhead [--rounds 6]

Both servers run side by side and the rounds interleave (vLLM, kvscope, vLLM, kvscope, ...),
so a slow minute of the machine hits both alike: each pair gives one ratio, and the table
reports the median of the paired ratios with their spread (two sequential runs of the old
benchmark gave 0.92x and 1.53x for the same code, which cannot resolve a 2 % target).
Per pair: one light Poisson load (TTFT without queueing: what the gateway adds to a request)
and one saturating closed-loop run (throughput). The API-server process's CPU time (user +
system, from /proc) per request of the saturating run is measured for both: the difference is
the gateway's own CPU per request (the engine core is a child process, not counted).
Prints JSON and a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.common import server, vllm_bench
from bench.scratch import in_log_dir

LIGHT = [
    "--dataset-name",
    "random",
    "--random-input-len",
    "128",
    "--random-output-len",
    "32",
    "--num-prompts",
    "100",
    "--request-rate",
    "4",
    "--burstiness",
    "1",
    "--num-warmups",
    "5",
]
SATURATED_PROMPTS = 200


def light(seed: int) -> list[str]:
    return [*LIGHT, "--seed", str(seed)]


def saturated(seed: int) -> list[str]:
    return [
        "--dataset-name",
        "random",
        "--random-input-len",
        "128",
        "--random-output-len",
        "64",
        "--num-prompts",
        str(SATURATED_PROMPTS),
        "--request-rate",
        "inf",
        "--max-concurrency",
        "32",
        "--seed",
        str(seed),
        "--num-warmups",
        "10",
    ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (not its children), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(base_url: str, pid: int, seed: int) -> dict[str, Any]:
    """A light run and a saturating run on one server: TTFT, throughput, API-server CPU."""
    calm = vllm_bench(base_url, light(seed))
    before = cpu_seconds(pid)
    busy = vllm_bench(base_url, saturated(100 + seed))
    cpu = cpu_seconds(pid) - before
    return {
        "p50_ttft_ms": calm["median_ttft_ms"],
        "p99_ttft_ms": calm["p99_ttft_ms"],
        "throughput": busy["request_throughput"],
        "cpu_ms_per_request": 1000 * cpu / max(busy["completed"], 1),
        "failed": calm["failed"] + busy["failed"],
    }


def paired(rounds: list[tuple[dict[str, Any], dict[str, Any]]], key: str, ratio: bool) -> dict[str, float]:
    """Median and spread (min, max) of kvscope/vLLM (ratio) or kvscope-vLLM (difference) per pair."""
    values = [k[key] / v[key] if ratio else k[key] - v[key] for v, k in rounds]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(args: argparse.Namespace, workdir: Path) -> int:
    """One run, its servers' logs in `workdir`; 0 when it went well."""
    rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with contextlib.ExitStack() as stack:
        plain = stack.enter_context(server("vllm", workdir))
        ours = stack.enter_context(server("kvscope", workdir))
        for i in range(args.rounds):
            first, second = (plain, ours) if i % 2 == 0 else (ours, plain)  # alternate who goes first
            a = one_round(first.base_url, first.pid, i)
            b = one_round(second.base_url, second.pid, i)
            rounds.append((a, b) if first is plain else (b, a))
    result = {
        "rounds": [{"vllm": v, "kvscope": k} for v, k in rounds],
        "throughput_ratio": paired(rounds, "throughput", ratio=True),
        "ttft_p50_delta_ms": paired(rounds, "p50_ttft_ms", ratio=False),
        "ttft_p99_delta_ms": paired(rounds, "p99_ttft_ms", ratio=False),
        "cpu_ms_per_request_delta": paired(rounds, "cpu_ms_per_request", ratio=False),
    }
    print(json.dumps(result, indent=2))

    def cell(stats: dict[str, float], fmt: str) -> str:
        return f"{stats['median']:{fmt}} ({stats['min']:{fmt}} to {stats['max']:{fmt}})"

    v_cpu = statistics.median(v["cpu_ms_per_request"] for v, _ in rounds)
    k_cpu = statistics.median(k["cpu_ms_per_request"] for _, k in rounds)
    print()
    print(
        f"| kvscope serve --profile default vs vLLM's OpenAI server, {args.rounds} interleaved pairs | median (spread) |"
    )
    print("| --- | --- |")
    print(f"| throughput ratio, 32 concurrent | {cell(result['throughput_ratio'], '.3f')}x |")
    print(f"| TTFT p50 difference, 4 req/s Poisson | {cell(result['ttft_p50_delta_ms'], '+.1f')} ms |")
    print(f"| TTFT p99 difference, 4 req/s Poisson | {cell(result['ttft_p99_delta_ms'], '+.1f')} ms |")
    print(
        f"| API-server CPU per request: vLLM {v_cpu:.2f} ms, kvscope {k_cpu:.2f} ms; the gateway's own | "
        f"{cell(result['cpu_ms_per_request_delta'], '+.2f')} ms |"
    )
    failed = sum(v["failed"] + k["failed"] for v, k in rounds)
    return 0 if failed == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="interleaved pairs (default 6)")
    args = parser.parse_args(argv)
    return in_log_dir("kvscope-bench-", lambda workdir: run(args, workdir))


if __name__ == "__main__":
    sys.exit(main())
