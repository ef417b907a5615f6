"""Benchmark: time to verdict against a Prometheus holding 24 h of 16 vLLM instances and 64
GPUs (plain vLLM + dcgm-exporter series, backfilled with promtool).

    .venv/bin/python -m bench.diagnosis_speed [--hours 24] [--step 60]

History is generated and backfilled in 2-hour chunks (counters continue across chunks). One
instance develops a KV avalanche in the last 40 minutes. Timed: the in-process diagnosis
(fetch + checks) and the whole `kvscope diagnose` command, 10 runs each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.common import percentile
from bench.scratch import scratch_dir
from diagnosis.run import Request, run
from drill import prometheus_server as prometheus
from drill.launcher import running
from tests.scenarios.fleet import Instance, Simulation, State, openmetrics


def history(work: Path, hours: float, step: float) -> tuple[float, int]:
    end = time.time() - 120
    start = end - hours * 3600
    fault_at = (hours * 60) - 40
    faulty = replace(
        State(),
        prompt_median=1600,
        prompt_p99=6000,
        kv=0.98,
        preempt_rate=0.8,
        waiting=45,
        queue=(1.5, 9.0),
        ttft=(1.8, 12.0),
    )
    instances = [
        Instance(
            f"vllm-{i:02d}",
            (lambda m, f=faulty: f if m >= fault_at else State()) if i == 7 else (lambda m: State()),
            gpus=4,
        )
        for i in range(16)
    ]
    sim = Simulation(instances)
    chunk_minutes = 120
    data = work / "data"
    samples = 0
    t = start
    chunks = int(hours * 60 // chunk_minutes)
    for chunk in range(chunks):
        minutes = chunk_minutes - step / 60  # chunks meet without repeating a timestamp
        text = openmetrics([sim], t, minutes, step)
        samples += text.count("\n") - text.count("# ")
        path = work / f"chunk-{chunk}.om"
        path.write_text(text)
        prometheus.backfill(path, data)
        path.unlink()
        t += chunk_minutes * 60
        print(f"  chunk {chunk + 1}/{chunks} backfilled", file=sys.stderr, flush=True)
    return t - step, samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--step", type=float, default=60)
    args = parser.parse_args(argv)
    work = scratch_dir("kvscope-bench-diagnose-")
    started = time.time()
    end, samples = history(work, args.hours, args.step)
    built = time.time() - started
    server = prometheus.start(work / "prometheus", {}, storage=work / "data", retention="30d")
    with running(server, ready_path="/-/ready", timeout=120) as ready:
        url = ready.base_url
        run(Request(prometheus=url, at=end, window=1800))  # warm Prometheus' caches once
        inproc, verdicts = [], set()
        for _ in range(10):
            t0 = time.perf_counter()
            result = run(Request(prometheus=url, at=end, window=1800))
            inproc.append(time.perf_counter() - t0)
            verdicts.add((result.bottleneck, tuple(a.get("pod") for a in result.affected)))
        cli = []
        for _ in range(10):
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kvscope.cli",
                    "diagnose",
                    "--prometheus",
                    url,
                    "--at",
                    str(end),
                    "--format",
                    "json",
                ],
                capture_output=True,
                check=False,
            )
            cli.append(time.perf_counter() - t0)
    print(
        f"\n{args.hours:g} h of 16 vLLM instances + 64 GPUs at {args.step:g} s steps: {samples:,} samples "
        f"(generated and backfilled in {built:.0f} s); verdicts: {verdicts}\n"
    )
    print("| time to verdict (10 runs) | median | p99 |")
    print("| --- | --- | --- |")
    print(
        f"| in-process (fetch {len(__import__('diagnosis.measures', fromlist=['MEASURES']).MEASURES)} "
        f"measures + checks) | {statistics.median(inproc):.2f} s | {percentile(inproc, 99):.2f} s |"
    )
    print(
        f"| `kvscope diagnose` command (Python start-up included) | {statistics.median(cli):.2f} s | "
        f"{percentile(cli, 99):.2f} s |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
