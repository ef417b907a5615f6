"""Benchmark (b): `kvscope serve --profile tuned` against `--profile default` under the seeds'
mix (90 % ~120-token, 8 % ~1500-token, 2 % ~6000-token prompts, 32 output tokens), Poisson
arrivals, vllm.benchmarks.serve as the client, a fresh server and fresh prompts per profile.

    .venv/bin/python -m bench.serve_profiles [--rate 20] [--requests 600]

Prints per-class TTFT, throughput and preemptions as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from bench.common import Mix, by_prompt_length, dataset, percentile, server, vllm_bench
from bench.scratch import in_log_dir
from kvscope import catalog, promtext

SHORT, MEDIUM = 512, 4096  # prompt-length class bounds (tokens)


def measure(profile: str, dataset: Path, rate: float, requests: int, workdir: Path) -> dict:
    with server("kvscope", workdir, profile=profile) as ready:
        result = vllm_bench(
            ready.base_url,
            [
                "--dataset-name",
                "custom",
                "--dataset-path",
                str(dataset),
                "--skip-chat-template",
                "--custom-output-len",
                "32",
                "--num-prompts",
                str(requests),
                "--request-rate",
                str(rate),
                "--burstiness",
                "1",
                "--seed",
                "3",
                "--num-warmups",
                "0",
            ],
        )
        page = promtext.parse(httpx.get(ready.base_url + "/metrics", timeout=10).text)
    short = by_prompt_length(result, SHORT)
    medium = [t for t, n in zip(result["ttfts"], result["input_lens"], strict=True) if SHORT <= n < MEDIUM]
    long = [t for t, n in zip(result["ttfts"], result["input_lens"], strict=True) if n >= MEDIUM]
    ms = 1000.0
    return {
        "short_n": len(short),
        "medium_n": len(medium),
        "long_n": len(long),
        "short_p50_ms": percentile(short, 50) * ms,
        "short_p99_ms": percentile(short, 99) * ms,
        "medium_p99_ms": percentile(medium, 99) * ms,
        "long_p99_ms": percentile(long, 99) * ms,
        "all_p99_ms": result["p99_ttft_ms"],
        "request_throughput": result["request_throughput"],
        "total_token_throughput": result["total_token_throughput"],
        "failed": result["failed"],
        "preemptions": promtext.total(page, catalog.VLLM_NUM_PREEMPTIONS.name),
    }


def run(args: argparse.Namespace, workdir: Path) -> int:
    """One run, its servers' logs in `workdir`; 0 when it went well."""
    mix = Mix()
    runs = {}
    for profile, seed in (("default", 101), ("tuned", 202)):
        runs[profile] = measure(profile, dataset(mix, args.requests, seed, workdir), args.rate, args.requests, workdir)
    print(json.dumps(runs, indent=2))
    d, t = runs["default"], runs["tuned"]
    print()
    print(f"| {args.requests} requests at {args.rate:g}/s | default | tuned | tuned / default |")
    print("| --- | --- | --- | --- |")
    for key, label in (
        ("short_p50_ms", "short-prompt TTFT p50"),
        ("short_p99_ms", "short-prompt TTFT p99"),
        ("medium_p99_ms", "medium-prompt TTFT p99"),
        ("long_p99_ms", "long-prompt TTFT p99"),
    ):
        print(f"| {label} | {d[key]:.1f} ms | {t[key]:.1f} ms | {t[key] / d[key]:.2f}x |")
    print(
        f"| total throughput | {d['total_token_throughput']:.0f} tok/s | "
        f"{t['total_token_throughput']:.0f} tok/s | "
        f"{t['total_token_throughput'] / d['total_token_throughput']:.3f}x |"
    )
    print(
        f"| requests (short/medium/long) | {d['short_n']}/{d['medium_n']}/{d['long_n']} | "
        f"{t['short_n']}/{t['medium_n']}/{t['long_n']} | |"
    )
    print(f"| preemptions | {d['preemptions']:.0f} | {t['preemptions']:.0f} | |")
    return 0 if d["failed"] == t["failed"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--requests", type=int, default=600)
    args = parser.parse_args(argv)
    return in_log_dir("kvscope-bench-", lambda workdir: run(args, workdir))


if __name__ == "__main__":
    sys.exit(main())
