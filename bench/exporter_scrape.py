"""Benchmark: `kvscope export` at density: 8 GPUs and 8 data-parallel vLLM engines with every
vLLM 0.32 metric family on, against a bare prometheus_client registry serving the same series.

    .venv/bin/python -m bench.exporter_scrape --gpus 8 --engines 8

The vLLM page is vLLM's own (bench/vllm_dp_page.py: PrometheusStatLogger with engine_indexes
0..N-1, --kv-cache-metrics, MFU, spec decode, LoRA, fed recorded-like stats), served as
`vllm serve --data-parallel-size N` serves it: one page, the engines told apart by the
`engine` label. The GPUs are emulated (`--gpu emulated --emulated-gpus N`). Every server runs
as its own process; the client scrapes sequentially; CPU is the server process's user+system
time. Measured:

- collection CPU: the exporter in its default mode (background collection every 5 s), left
  alone for `--idle` seconds, as a share of one core;
- scrapes: p50/p99 latency, CPU and bytes per scrape, with the cached page (the default) and
  collecting on every scrape (`--collect-interval 0`), against the exporter's own page parsed
  once into a bare prometheus_client registry, served by the same HTTP stack (uvicorn +
  Starlette, rendered in a worker thread per scrape) and by prometheus_client's own server;
- parsing cost against page size (exporter/scrape.py's parse_page, which every collection runs
  on every target): the vLLM page, ten times it, 4,000 counters declared without `_total`
  (dcgm-exporter's style) and ten times that.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from bench.common import percentile
from bench.scratch import in_log_dir
from drill.launcher import free_port, kvscope_exporter, running
from kvscope import catalog
from tests.fakes.pages import PageServer

ROOT = Path(__file__).resolve().parent.parent
BARE = "bare prometheus_client registry, same series"


def vllm_page(engines: int, workdir: Path) -> str:
    out = workdir / "vllm.prom"
    subprocess.run(
        [sys.executable, "-m", "bench.vllm_dp_page", "--engines", str(engines), "--out", str(out)],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return out.read_text()


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def measure(url: str, pid: int, scrapes: int) -> dict[str, float]:
    process = psutil.Process(pid)
    with httpx.Client(timeout=30) as client:
        for _ in range(20):  # warm-up
            client.get(url)
        cpu0 = cpu_seconds(process)
        latencies = []
        wire = 0
        for _ in range(scrapes):
            started = time.perf_counter()
            response = client.get(url)
            latencies.append(time.perf_counter() - started)
            wire = response.num_bytes_downloaded
        cpu = cpu_seconds(process) - cpu0
        page = len(response.content)
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "cpu_ms_per_scrape": cpu / scrapes * 1000,
        "page_bytes": page,
        "wire_bytes": wire,
    }


def idle_cpu(pid: int, seconds: float) -> float:
    """The process's CPU over `seconds` with no scrapes, as a share of one core."""
    process = psutil.Process(pid)
    cpu0, started = cpu_seconds(process), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(process) - cpu0) / (time.monotonic() - started)


# The same series from a bare registry: the exporter's page parsed once, served either by the
# exporter's HTTP stack (uvicorn + Starlette, rendered off the event loop, as exporter/server.py
# does) or by prometheus_client's own server.
BARE_SERVER = textwrap.dedent("""
    import asyncio, sys, time
    from prometheus_client import generate_latest, start_http_server
    from prometheus_client.registry import CollectorRegistry
    from kvscope.promtext import parse_families

    families = parse_families(open(sys.argv[1]).read())

    class Fixed:
        def collect(self):
            return families

    registry = CollectorRegistry()
    registry.register(Fixed())
    port = int(sys.argv[2])
    if sys.argv[3] == "prometheus_client":
        start_http_server(port, addr="127.0.0.1", registry=registry)
        print("ready", flush=True)
        time.sleep(3600)
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def metrics(_):
        return Response(await asyncio.to_thread(generate_latest, registry), media_type="text/plain; version=0.0.4")

    app = Starlette(routes=[Route("/metrics", metrics)])
    print("ready", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
""")


def bare_registry(snapshot: Path, stack: str, scrapes: int) -> dict[str, float]:
    port = free_port()
    bare = subprocess.Popen(
        [sys.executable, "-c", BARE_SERVER, str(snapshot), str(port), stack],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert bare.stdout is not None and bare.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(100):
            try:
                httpx.get(url, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        return measure(url, bare.pid, scrapes)
    finally:
        bare.kill()
        bare.wait()


def exporter(
    target: str, gpus: int, interval: str, workdir: Path, scrapes: int, idle: float
) -> tuple[dict[str, float], str]:
    args = ("--gpu", "emulated", "--emulated-gpus", str(gpus), "--collect-interval", interval, "--vllm", target)
    proc = kvscope_exporter(workdir / f"export-{interval}.log", *args)
    with running(proc, ready_path="/-/healthy", timeout=60):
        exported = httpx.get(proc.base_url + "/metrics", timeout=30).text
        result: dict[str, float] = {}
        if idle > 0:
            time.sleep(float(interval))  # past the first collections of the start
            result["idle_core_share"] = idle_cpu(proc.pid, idle)
        result |= measure(proc.base_url + "/metrics", proc.pid, scrapes)
    return result, exported


def counters_page(count: int) -> str:
    """`count` counters declared without `_total`, as dcgm-exporter declares its counters."""
    base = catalog.DCGM_PCIE_REPLAY.name
    return "".join(
        f'# HELP {base}_{i} counter {i}\n# TYPE {base}_{i} counter\n{base}_{i}{{gpu="{i % 8}",UUID="GPU-{i}"}} {i}\n'
        for i in range(count)
    )


def seconds_per_call(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def parse_costs(page: str) -> dict[str, dict[str, float]]:
    from exporter.scrape import parse_page

    ten = "".join(page.replace('engine="', f'engine="{copy}-') for copy in range(10))
    cases = {
        "vLLM page": page,
        "vLLM page x10": ten,
        "4,000 counters without _total": counters_page(4000),
        "40,000 counters without _total": counters_page(40000),
    }
    costs = {}
    for name, text in cases.items():
        seconds = seconds_per_call(functools.partial(parse_page, text), repeat=5 if len(text) < 1 << 21 else 2)
        lines = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        costs[name] = {"bytes": len(text), "samples": lines, "ms": seconds * 1000}
    return costs


def run(args: argparse.Namespace, workdir: Path) -> int:
    """One run, its servers' logs in `workdir`; 0 when it went well."""
    page = vllm_page(args.engines, workdir)
    target = PageServer(page)
    results: dict[str, dict[str, float]] = {}
    try:
        for mode, interval, idle in (
            ("cached page (default: background collection every 5 s)", "5", args.idle),
            ("`--collect-interval 0` (collect on every scrape)", "0", 0.0),
        ):
            results[f"kvscope export, {mode}"], exported = exporter(
                target.url, args.gpus, interval, workdir, args.scrapes, idle
            )
    finally:
        target.close()
    snapshot = workdir / "exported.prom"
    snapshot.write_text(exported)
    results[f"{BARE}, uvicorn + Starlette (the exporter's stack)"] = bare_registry(snapshot, "starlette", args.scrapes)
    results[f"{BARE}, prometheus_client's own server"] = bare_registry(snapshot, "prometheus_client", args.scrapes)
    parsing = parse_costs(page)
    print(json.dumps({"scrapes": results, "parsing": parsing}, indent=2))

    vllm_lines = sum(1 for line in page.splitlines() if line and not line.startswith("#"))
    lines = sum(1 for line in exported.splitlines() if line and not line.startswith("#"))
    background = next(iter(results.values()))
    print(
        f"\n{args.gpus} emulated GPUs + {args.engines} data-parallel vLLM engines: the vLLM page {vllm_lines} series, "
        f"{len(page) / 1024:.0f} KiB; the exporter's page {lines} series, {len(exported) / 1024:.0f} KiB; "
        f"{args.scrapes} sequential scrapes\n"
    )
    share = background["idle_core_share"]
    print(f"collection CPU, background every 5 s: {share * 100:.2f} % of one core ({share * 5 * 1000:.0f} ms a pass)\n")
    base = results[f"{BARE}, uvicorn + Starlette (the exporter's stack)"]
    print("| server | p50 | p99 | CPU per scrape | bytes per scrape | p99 vs bare (same stack) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        size = f"{r['page_bytes'] / 1024:.0f} KiB"
        if r["wire_bytes"] < r["page_bytes"] * 0.9:
            size += f" ({r['wire_bytes'] / 1024:.0f} KiB gzip)"
        print(
            f"| {name} | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {r['cpu_ms_per_scrape']:.1f} ms | {size} | "
            f"{r['p99_ms'] / base['p99_ms']:.2f}x |"
        )
    print("\n| parse_page | bytes | samples | time |")
    print("| --- | --- | --- | --- |")
    for name, c in parsing.items():
        print(f"| {name} | {c['bytes'] / 1024:.0f} KiB | {c['samples']} | {c['ms']:.1f} ms |")
    one, ten = parsing["vLLM page"], parsing["vLLM page x10"]
    four, forty = parsing["4,000 counters without _total"], parsing["40,000 counters without _total"]
    print(f"\nten times the page: {ten['ms'] / one['ms']:.1f}x (vLLM), {forty['ms'] / four['ms']:.1f}x (counters)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of background collection measured")
    args = parser.parse_args(argv)
    return in_log_dir("kvscope-bench-export-", lambda workdir: run(args, workdir))


if __name__ == "__main__":
    sys.exit(main())
