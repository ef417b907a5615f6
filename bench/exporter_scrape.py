"""Benchmark: `kvscope export` scrape latency and CPU per scrape, 8 emulated GPUs and 4 vLLM
targets, against the same series served from a bare prometheus_client registry.

    .venv/bin/python -m bench.exporter_scrape [--scrapes 400]

The 4 targets serve copies of a real `kvscope serve` /metrics page (captured after a few
requests), so the page the exporter merges is what vLLM really exposes. Both servers run as
their own processes; the client scrapes sequentially; CPU is the server process's user+system
time over the scrapes. The exporter is measured in both modes: background collection with a
cached page (the default, like dcgm-exporter) and collection on every scrape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import psutil
from openai import OpenAI

from bench.common import percentile, server
from drill.launcher import free_port, running, start_process
from serving.demo_model import SERVED_NAME
from tests.fakes.pages import PageServer


def capture_vllm_page(workdir: Path) -> str:
    with server("kvscope", workdir, extra=["--enforce-eager"]) as ready:
        client = OpenAI(base_url=ready.base_url + "/v1", api_key="x", timeout=60)
        for i in range(8):
            client.completions.create(model=SERVED_NAME, prompt=f"zaba kelo {i} " * 50, max_tokens=16)
        return httpx.get(ready.base_url + "/metrics", timeout=10).text


def measure(url: str, pid: int, scrapes: int) -> dict[str, float]:
    process = psutil.Process(pid)
    with httpx.Client() as client:
        for _ in range(20):  # warm-up
            client.get(url)
        cpu0 = sum(process.cpu_times()[:2])
        latencies = []
        size = 0
        for _ in range(scrapes):
            started = time.perf_counter()
            response = client.get(url)
            latencies.append(time.perf_counter() - started)
            size = len(response.content)
        cpu = sum(process.cpu_times()[:2]) - cpu0
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "cpu_ms_per_scrape": cpu / scrapes * 1000,
        "page_bytes": size,
        "lines": 0,
    }


BARE_SERVER = textwrap.dedent("""
    import sys, time
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry
    from kvscope.promtext import parse_families

    families = parse_families(open(sys.argv[1]).read())

    class Fixed:
        def collect(self):
            return families

    registry = CollectorRegistry()
    registry.register(Fixed())
    start_http_server(int(sys.argv[2]), addr="127.0.0.1", registry=registry)
    print("ready", flush=True)
    time.sleep(3600)
""")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=400)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kvscope-bench-export-"))
    page = capture_vllm_page(workdir)
    targets = [PageServer(page) for _ in range(4)]
    results = {}
    try:
        for mode, interval in (("cached (background, 5 s)", "5"), ("on scrape", "0")):
            port = free_port()
            argv_ = [
                sys.executable,
                "-m",
                "kvscope.cli",
                "export",
                "--gpu",
                "emulated",
                "--emulated-gpus",
                "8",
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--collect-interval",
                interval,
            ]
            for t in targets:
                argv_ += ["--vllm", t.url]
            proc = start_process(
                "kvscope export",
                argv_,
                f"http://127.0.0.1:{port}",
                workdir / f"export-{interval}.log",
            )
            with running(proc, ready_path="/-/healthy", timeout=60):
                exported = httpx.get(proc.base_url + "/metrics", timeout=10).text
                results[f"kvscope export, {mode}"] = measure(proc.base_url + "/metrics", proc.proc.pid, args.scrapes)
        snapshot = workdir / "exported.prom"
        snapshot.write_text(exported)
        port = free_port()
        bare = subprocess.Popen(
            [sys.executable, "-c", BARE_SERVER, str(snapshot), str(port)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        try:
            assert bare.stdout is not None and bare.stdout.readline().strip() == "ready"
            results["bare prometheus_client registry, same series"] = measure(
                f"http://127.0.0.1:{port}/metrics", bare.pid, args.scrapes
            )
        finally:
            bare.kill()
            bare.wait()
    finally:
        for t in targets:
            t.close()
    lines = sum(1 for line in exported.splitlines() if line and not line.startswith("#"))
    print(json.dumps(results, indent=2))
    base = results["bare prometheus_client registry, same series"]
    print(
        f"\n8 emulated GPUs + 4 vLLM targets: {lines} series, {len(exported) / 1024:.0f} KiB per scrape, "
        f"{args.scrapes} sequential scrapes\n"
    )
    print("| server | p50 | p99 | CPU per scrape | p99 vs bare |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(
            f"| {name} | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {r['cpu_ms_per_scrape']:.1f} ms | "
            f"{r['p99_ms'] / base['p99_ms']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
