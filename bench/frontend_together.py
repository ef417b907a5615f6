"""Benchmark (a'''): what the gateway adds to a request's CPU, the servers measured at the same time.

    .venv/bin/python -m bench.frontend_together [--servers passthrough,default] [--rate 20] \
        [--requests 1200] [--rounds 3] [--step-ms 10] [--max-tokens 64] [--shape completions-stream]

bench.frontend_ceiling measures one server after the other: on a shared machine a server's CPU a
request moves by 10-20 % from one minute to the next (another tenant's load, the host's clocks),
so two servers measured a minute apart differ by up to a millisecond a request whatever they do.
Here every server runs at once, on the same one CPU (taskset; the client on the others), on the
mock engine paced as a GPU's decode steps (`--step-ms`), each sent the same prompts at `--rate`
requests a second by Poisson arrivals of its own. Whatever slows the machine slows all alike,
and the difference of a server's CPU a request to the first one's, round by round, is what it
does more. Measured for each: the CPU of its event loop's thread (/proc/PID/task/PID/schedstat,
nanoseconds: where the gateway and vLLM's frontend run) and of its whole process. Run twice the
same server to see the floor of what this resolves (two processes of one program differ by their
memory layout; about 0.1 ms a request here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.frontend_ceiling import KNOWN, SHAPES, _open, _prompts, otlp_sink, paired_servers, split_cpus, start
from bench.scratch import in_log_dir
from bench.serve_overhead import cpu_seconds
from drill.launcher import ServerProcess

WARM_REQUESTS = 200


def loop_seconds(pid: int) -> float:
    """CPU seconds of the process's main thread (its event loop's), to the nanosecond."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


async def _at_once(
    servers: dict[str, ServerProcess], shape: Any, prompts: list[str], rate: float, seed: int, max_tokens: int = 64
) -> list[dict[str, Any]]:
    runs = (_open(s.base_url, shape, prompts, rate, max_tokens, seed) for s in servers.values())
    return list(await asyncio.gather(*runs))


def one_round(
    servers: dict[str, ServerProcess], shape: Any, prompts: list[str], rate: float, seed: int, max_tokens: int = 64
) -> dict[str, dict[str, float]]:
    """Each server's CPU a request (ms) over the same arrivals, all at once."""
    pids = {name: server.pid for name, server in servers.items()}
    before = {name: (loop_seconds(pid), cpu_seconds(pid)) for name, pid in pids.items()}
    runs = asyncio.run(_at_once(servers, shape, prompts, rate, seed, max_tokens))
    found = {}
    for (name, pid), run in zip(pids.items(), runs, strict=True):
        done = max(run["completed"], 1)
        found[name] = {
            "loop_ms": 1000 * (loop_seconds(pid) - before[name][0]) / done,
            "process_ms": 1000 * (cpu_seconds(pid) - before[name][1]) / done,
            "p50_ms": 1000 * statistics.median(run["latencies"]) if run["latencies"] else float("nan"),
            "failed": run["failed"],
        }
    return found


def summarise(rounds: list[dict[str, dict[str, float]]], names: list[str]) -> dict[str, Any]:
    """Per server: its median CPU a request, and its paired difference to the first server's."""
    first, out = names[0], {}
    for name in names:
        row: dict[str, Any] = {"failed": sum(r[name]["failed"] for r in rounds)}
        for key in ("loop_ms", "process_ms"):
            row[key] = statistics.median(r[name][key] for r in rounds)
            deltas = [r[name][key] - r[first][key] for r in rounds]
            row[key + "_delta"] = {"median": statistics.median(deltas), "min": min(deltas), "max": max(deltas)}
        # the share more: steadier than the milliseconds, which grow as the machine slows
        row["loop_ratio"] = statistics.median(r[name]["loop_ms"] / r[first]["loop_ms"] for r in rounds)
        out[name] = row
    return out


def table(summary: dict[str, Any], rounds: int) -> str:
    names = list(summary)
    lines = [
        f"| server | loop thread, ms CPU a request | against {names[0]} ({rounds} rounds: median, spread) "
        f"| loop thread, x {names[0]} | process, ms CPU a request | against {names[0]} | failed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in summary.items():
        loop, proc = row["loop_ms_delta"], row["process_ms_delta"]
        lines.append(
            f"| {name} | {row['loop_ms']:.3f} | {loop['median']:+.3f} ({loop['min']:+.3f} to {loop['max']:+.3f}) "
            f"| {row['loop_ratio']:.3f} | {row['process_ms']:.3f} | {proc['median']:+.3f} ({proc['min']:+.3f} to {proc['max']:+.3f}) "
            f"| {row['failed']} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace, workdir: Path, server_cpus: list[int], client_cpus: list[int]) -> int:
    """The servers side by side on `server_cpus`, their logs in `workdir`, the client on `client_cpus`;
    0 when no request failed."""
    shape = next(s for s in SHAPES if s.key == args.shape)
    names = [f"{name}#{i}" if args.servers.count(name) > 1 else name for i, name in enumerate(args.servers)]
    with contextlib.ExitStack() as stack:
        otlp = stack.enter_context(otlp_sink())
        cpus = ",".join(map(str, server_cpus))
        servers = {}
        for name, which in zip(names, args.servers, strict=True):
            own = workdir / name.replace("#", "-")
            own.mkdir()
            servers[name] = start(which, own, 1, otlp, cpus, step_ms=args.step_ms)
            stack.callback(servers[name].stop)
        for name, which in zip(names, args.servers, strict=True):
            servers[name].wait_ready("/health" if which in ("bare", "passthrough") else "/ready", 300)
        os.sched_setaffinity(0, client_cpus)
        asyncio.run(_at_once(servers, shape, _prompts(WARM_REQUESTS, 7), args.rate, 9, args.max_tokens))
        rounds = []
        for i in range(args.rounds):
            prompts = _prompts(args.requests, i)
            rounds.append(one_round(servers, shape, prompts, args.rate, seed=i, max_tokens=args.max_tokens))
            print(f"round {i + 1}: " + ", ".join(f"{n} {r['loop_ms']:.3f} ms" for n, r in rounds[-1].items()))
    summary = summarise(rounds, names)
    result = {"summary": summary, "rounds": rounds, "settings": {k: v for k, v in vars(args).items() if k != "json"}}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    print()
    print(table(summary, args.rounds))
    return 0 if all(row["failed"] == 0 for row in summary.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paired_servers(parser, "at once, one of them twice to see the floor")
    parser.add_argument("--rate", type=float, default=20.0, help="requests a second to each server (default 20)")
    parser.add_argument("--requests", type=int, default=1200, help="requests to each server a round (default 1200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens a request (default 64)")
    parser.add_argument("--step-ms", type=float, default=10.0, help="the mock engine's step period (default 10 ms)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    if len(args.servers) < 2 or any(name not in KNOWN for name in args.servers):
        parser.error(f"--servers: two or more of {', '.join(KNOWN)}")
    if args.rate <= 0 or min(args.requests, args.rounds, args.max_tokens) < 1 or args.step_ms <= 0:
        parser.error("--rate, --requests, --rounds, --max-tokens and --step-ms must be positive")
    server_cpus, client_cpus = split_cpus(sorted(os.sched_getaffinity(0)))
    if not client_cpus:
        parser.error("this benchmark needs two CPUs or more (the servers on one, the client on the rest)")
    return in_log_dir("kvscope-together-", lambda workdir: run(args, workdir, server_cpus, client_cpus))


if __name__ == "__main__":
    sys.exit(main())
