"""Benchmark (a): the gateway's cost. `kvscope serve --profile default` against vLLM's own
OpenAI server, same model, same loads.

    .venv/bin/python -m bench.serve_overhead [--rounds 5]

Per server: one light Poisson load (TTFT without queueing: what the gateway adds to each
request), then `--rounds` saturating closed-loop runs (throughput). On a 2-CPU machine the
client, the API server and the engine share the cores and single runs vary by +-15 %, so the
throughput compared is the median of the rounds. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import server, vllm_bench

LIGHT = [
    "--dataset-name",
    "random",
    "--random-input-len",
    "128",
    "--random-output-len",
    "32",
    "--num-prompts",
    "200",
    "--request-rate",
    "4",
    "--burstiness",
    "1",
    "--seed",
    "1",
    "--num-warmups",
    "10",
]


def saturated(seed: int) -> list[str]:
    return [
        "--dataset-name",
        "random",
        "--random-input-len",
        "128",
        "--random-output-len",
        "64",
        "--num-prompts",
        "300",
        "--request-rate",
        "inf",
        "--max-concurrency",
        "32",
        "--seed",
        str(seed),
        "--num-warmups",
        "10",
    ]


def measure(kind: str, workdir: Path, rounds: int) -> dict:
    with server(kind, workdir) as ready:
        light = vllm_bench(ready.base_url, LIGHT)
        runs = [vllm_bench(ready.base_url, saturated(100 + i)) for i in range(rounds)]
    throughput = [r["request_throughput"] for r in runs]
    return {
        "p50_ttft_ms": light["median_ttft_ms"],
        "p99_ttft_ms": light["p99_ttft_ms"],
        "throughput_runs": throughput,
        "throughput_median": statistics.median(throughput),
        "failed": light["failed"] + sum(r["failed"] for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kvscope-bench-"))
    plain = measure("vllm", workdir, args.rounds)
    ours = measure("kvscope", workdir, args.rounds)
    print(json.dumps({"vllm": plain, "kvscope": ours}, indent=2))
    p, k = plain, ours
    spread = lambda r: f"{min(r['throughput_runs']):.1f}-{max(r['throughput_runs']):.1f}"  # noqa: E731
    print()
    print("| | vLLM OpenAI server | kvscope serve --profile default | kvscope vs vLLM |")
    print("| --- | --- | --- | --- |")
    print(
        f"| TTFT p50, 4 req/s Poisson | {p['p50_ttft_ms']:.1f} ms | {k['p50_ttft_ms']:.1f} ms | "
        f"{k['p50_ttft_ms'] - p['p50_ttft_ms']:+.1f} ms |"
    )
    print(
        f"| TTFT p99, 4 req/s Poisson | {p['p99_ttft_ms']:.1f} ms | {k['p99_ttft_ms']:.1f} ms | "
        f"{k['p99_ttft_ms'] - p['p99_ttft_ms']:+.1f} ms |"
    )
    print(
        f"| throughput, 32 concurrent (median of {args.rounds}) | "
        f"{p['throughput_median']:.1f} req/s "
        f"({spread(p)}) | {k['throughput_median']:.1f} req/s ({spread(k)}) | "
        f"{k['throughput_median'] / p['throughput_median']:.3f}x |"
    )
    return 0 if p["failed"] == k["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
