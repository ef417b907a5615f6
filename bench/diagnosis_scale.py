"""Benchmark: the diagnosis as the fleet grows (issue 23).

    .venv/bin/python -m bench.diagnosis_scale --nodes 2,16,64,128,512 [--runs 3] [--json]

For each size, a fleet of that many nodes, each with 8 GPUs and two vLLM engines of 4 GPUs (their
pods carry the node as Kubernetes service discovery relabels it), healthy siblings that differ
by seed (load, KV, latency, heat) and one engine whose KV cache is exhausted for the last 20
minutes; recorded for 65 minutes at a 30 s step (a 30-minute window and its 30-minute baseline)
and backfilled into a Prometheus of its own. Then `kvscope diagnose --window 30m` as an on-call
runs it (`--runs` times, after one run that warms Prometheus' caches), reporting its median wall
time, its peak resident memory, Prometheus' own evaluation time of those queries (the sum of
`prometheus_engine_query_duration_seconds` over its slices, from its `/metrics`), the verdict,
and whether the faulty engine is the only scope named. Then the cost of kvscope's generated
rules (`kvscope alerts build`: the rollups, the alerts, the SLO records) on the same fleet: the
group that takes the largest share of its interval, and the series the rollups record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import yaml

from alerts import build, rollups
from drill import prometheus_server as prometheus
from drill.launcher import running
from kvscope import catalog as c
from kvscope import promtext
from kvscope.config import Config
from kvscope.durations import parse_duration
from tests.scenarios.fleet import Instance, Simulation, write_openmetrics
from tests.scenarios.library import AVALANCHE
from tests.scenarios.transforms import seeded

GPUS_PER_NODE, ENGINES_PER_NODE = 8, 2
MINUTES, STEP = 65.0, 30.0
FAULT_MINUTES = 20.0  # the fault holds for the window's last 20 minutes
WINDOW = "30m"
QUERY_TIME = "prometheus_engine_query_duration_seconds_sum"
# the groups without an interval of their own run at the global one: kube-prometheus-stack's 30 s
GLOBAL_EVALUATION_INTERVAL = "30s"


def fleet(nodes: int) -> tuple[list[Instance], str]:
    """The fleet's engines (two a node) and the faulty one's pod."""
    per_engine = GPUS_PER_NODE // ENGINES_PER_NODE
    fault_from = MINUTES - FAULT_MINUTES
    faulty = f"vllm-{nodes // 2:04d}-1"
    instances = []
    for n in range(nodes):
        for e in range(ENGINES_PER_NODE):
            name = f"vllm-{n:04d}-{e}"
            state = seeded(name)
            behaviour = (
                (lambda m, s=state: replace(AVALANCHE, temp=s.temp) if m >= fault_from else s)
                if name == faulty
                else (lambda m, s=state: s)
            )
            instances.append(
                Instance(
                    name,
                    behaviour,
                    gpus=per_engine,
                    host=f"node-{n:04d}",
                    first_gpu=e * per_engine,
                    node_label=True,
                )
            )
    return instances, faulty


@dataclass
class Row:
    nodes: int
    gpus: int
    engines: int
    series: int
    samples: int
    backfill_s: float
    wall_s: float  # `kvscope diagnose`, median
    rss_mb: float  # its peak resident memory, the largest of the runs
    prometheus_s: float  # Prometheus' evaluation of one diagnosis's queries, median
    bottleneck: str
    only_the_fault: bool
    rule_group: str = ""  # the generated rule group that costs the largest share of its interval
    rule_s: float = 0.0  # its evaluation: the sum of its rules' queries at the window's end
    rule_share: float = 0.0  # that over its interval
    rollup_series: int = 0  # series the rollups record at each evaluation
    # the same with the rollups recorded: `--phases auto` (two phases from 64 engines)
    two_wall_s: float = 0.0
    two_rss_mb: float = 0.0
    two_prometheus_s: float = 0.0
    two_bottleneck: str = ""
    two_only_the_fault: bool = False
    screen: str = ""  # the screen's line in `sources`


def _query_seconds(url: str) -> float:
    page = promtext.parse(httpx.get(url + "/metrics", timeout=30).text)
    return sum(s.value for s in page if s.name == QUERY_TIME)


# The command runs under this prologue, which prints its peak resident memory (VmHWM, that of
# its own address space) as it exits: wait4's ru_maxrss would count the benchmark's own memory,
# which a forked child carries until it execs.
_PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            print('peak-kb', line.split()[1], file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['kvscope', *sys.argv[1:]]\n"
    "runpy.run_module('kvscope.cli', run_name='__main__')\n"
)


def _diagnose(url: str, at: float, phases: str = "auto") -> tuple[float, float, dict]:
    """(wall seconds, peak resident memory in MB, the JSON report) of one `kvscope diagnose` command."""
    argv = [sys.executable, "-c", _PEAK, "diagnose", "--prometheus", url, "--at", f"{at:.3f}"]
    argv += ["--window", WINDOW, "--format", "json", "--phases", phases]
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - began
    peaks = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("peak-kb ")]
    if not peaks:
        raise RuntimeError(f"kvscope diagnose exited {done.returncode}: {done.stderr[-500:]}")
    return wall, int(peaks[-1]) / 1024, json.loads(done.stdout or "{}")


def record_rollups(url: str, start: float, end: float, data: Path, work: Path) -> None:
    """The rollups as kvscope's rules would have recorded them from `start` to `end`
    (`promtool tsdb create-blocks-from rules` against the running Prometheus), written as
    blocks into `data`, for the next Prometheus started on it."""
    rules = work / "rollups.yaml"
    rules.write_text(yaml.safe_dump({"groups": [rollups.group(Config())]}, sort_keys=False))
    out = work / "rule-blocks"
    argv = [prometheus.binary("promtool"), "tsdb", "create-blocks-from", "rules", f"--url={url}"]
    argv += [f"--start={int(start)}", f"--end={int(end)}", f"--output-dir={out}"]
    argv += [f"--eval-interval={c.ROLLUP_INTERVAL}", str(rules)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=3600)
    if not out.is_dir():  # promtool writes no block when every query came back empty
        raise RuntimeError(f"promtool recorded no rollups from {url}: {done.stderr.strip()[-500:]}")
    for block in out.iterdir():
        if block.is_dir():
            block.rename(data / block.name)


def _timed(url: str, at: float, runs: int, phases: str) -> tuple[list[float], list[float], list[float], list[dict]]:
    walls, rss, evaluation, reports = [], [], [], []
    _diagnose(url, at, phases)  # Prometheus' caches warm, as on a server that has been up
    for _ in range(runs):
        before = _query_seconds(url)
        wall, peak, report = _diagnose(url, at, phases)
        evaluation.append(_query_seconds(url) - before)
        walls.append(wall)
        rss.append(peak)
        reports.append(report)
    return walls, rss, evaluation, reports


def _named(report: dict) -> set[str]:
    return {
        scope
        for incident in report.get("incidents", [])
        if incident.get("status", "active") == "active"
        for scope in incident.get("scope", [])
    }


def measure(nodes: int, runs: int, work: Path, phases: str = "auto") -> Row:
    """One size: timed in one phase, then (the rollups recorded) with `--phases` `phases`."""
    instances, faulty = fleet(nodes)
    end = time.time() - 120
    start = end - MINUTES * 60
    began = time.perf_counter()
    path = work / "fleet.om"
    sim = Simulation(instances, {"scenario": f"scale-{nodes}"}, start=start)
    with path.open("w") as out:
        series, samples = write_openmetrics(out, [sim], start, MINUTES, STEP)
    data = work / "data"
    prometheus.backfill(path, data)
    path.unlink()
    backfill = time.perf_counter() - began
    server = prometheus.start(work / "prometheus", {}, storage=data, retention="30d")
    with running(server, ready_path="/-/ready", timeout=300) as ready:
        url = ready.base_url
        walls, rss, evaluation, reports = _timed(url, end, runs, "one")
        costs = rule_costs(url, end)
        # the rollups over the window (and its first rate window), as the rules record them
        record_rollups(url, end - parse_duration(WINDOW) - 600, end, data, work)
    server = prometheus.start(work / "prometheus-rules", {}, storage=data, retention="30d")
    with running(server, ready_path="/-/ready", timeout=300) as ready:
        two = _timed(ready.base_url, end, runs, phases)
    last, last_two = reports[-1], two[3][-1]
    screen = next((s["detail"] for s in last_two.get("sources", []) if s.get("source") == "screen"), "one phase")
    return Row(
        nodes,
        nodes * GPUS_PER_NODE,
        nodes * ENGINES_PER_NODE,
        series,
        samples,
        backfill,
        statistics.median(walls),
        max(rss),
        statistics.median(evaluation),
        str(last.get("bottleneck", "?")),
        _named(last) == {faulty},
        *costs,
        two_wall_s=statistics.median(two[0]),
        two_rss_mb=max(two[1]),
        two_prometheus_s=statistics.median(two[2]),
        two_bottleneck=str(last_two.get("bottleneck", "?")),
        two_only_the_fault=_named(last_two) == {faulty},
        screen=screen,
    )


def rule_costs(url: str, at: float, groups: list[dict] | None = None) -> tuple[str, float, float, int]:
    """(the costliest group, its evaluation seconds, its share of its interval, the rollups'
    series) for kvscope's generated rules over this fleet. A group's evaluation is its rules'
    queries at `at` (what Prometheus runs each interval), timed by Prometheus' own query metric:
    the backfilled data ends before Prometheus starts, so a live evaluation would read nothing."""
    groups = groups or build.build_rules(Config())[0]["groups"]
    worst, series = ("", 0.0, 0.0), 0
    with httpx.Client(base_url=url, timeout=600) as client:
        for group in groups:
            interval = parse_duration(group.get("interval", GLOBAL_EVALUATION_INTERVAL))
            before = _query_seconds(url)
            for rule in group["rules"]:
                answer = client.get("/api/v1/query", params={"query": rule["expr"], "time": f"{at:.3f}"})
                answer.raise_for_status()
                if group["name"] == rollups.GROUP:
                    series += len(answer.json()["data"]["result"])
            seconds = _query_seconds(url) - before
            if seconds / interval > worst[2]:
                worst = (group["name"], seconds, seconds / interval)
    return (*worst, series)


def table(rows: list[Row]) -> str:
    out = [
        "| nodes | GPUs | vLLM engines | series | one phase (median) | its RSS | Prometheus evaluation "
        "| two phases, rollups loaded (median) | its RSS | Prometheus evaluation | verdict, one / two "
        "| only the fault, one / two | costliest rule group (share of its interval) | rollup series |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r.nodes:,} | {r.gpus:,} | {r.engines:,} | {r.series / 1000:.1f} k | {r.wall_s:.2f} s | "
            f"{r.rss_mb:.0f} MB | {r.prometheus_s:.2f} s | {r.two_wall_s:.2f} s | {r.two_rss_mb:.0f} MB | "
            f"{r.two_prometheus_s:.2f} s | {r.bottleneck} / {r.two_bottleneck} | "
            f"{'yes' if r.only_the_fault else 'no'} / {'yes' if r.two_only_the_fault else 'no'} | "
            f"{r.rule_group} {r.rule_s:.2f} s ({r.rule_share:.1%}) | {r.rollup_series:,} |"
        )
    out += ["", *(f"- {r.gpus:,} GPUs: {r.screen}" for r in rows)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.diagnosis_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="2,16,64,128,512", help="comma-separated fleet sizes, in nodes")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per size (default 3)")
    parser.add_argument("--json", action="store_true", help="the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        sizes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: comma-separated whole numbers, not {args.nodes!r}")
    if not sizes or min(sizes) < 1 or args.runs < 1:
        parser.error("--nodes and --runs must be at least 1")
    rows = []
    for nodes in sizes:
        with tempfile.TemporaryDirectory(prefix=f"kvscope-scale-{nodes}-") as work:
            rows.append(measure(nodes, args.runs, Path(work)))
        print(f"  {nodes} nodes done", file=sys.stderr, flush=True)
    print(json.dumps([r.__dict__ for r in rows], indent=2) if args.json else table(rows))
    right = all(
        r.only_the_fault and r.two_only_the_fault and r.bottleneck == r.two_bottleneck == "kv_cache_exhaustion"
        for r in rows
    )
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
