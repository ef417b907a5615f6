"""Benchmark (a''): the frontend's ceiling. vLLM's OpenAI server bare and behind kvscope's
gateway, over an engine that answers without compute (bench/mock_engine.py), driven to
saturation.

    .venv/bin/python -m bench.frontend_ceiling [--rounds 3] [--requests 600] [--smoke]

Three servers run side by side, each in its own process on the same mock engine: vLLM's
OpenAI server (`bare`), `kvscope serve --profile default` with no gateway configuration
(`default`), and `kvscope serve --profile tuned` with a gateway configuration that uses every
feature on the request path: an API key per tenant, token and request quotas, deadlines, QoS
classes and KV lanes, OpenTelemetry spans and GenAI metrics exported over OTLP to a local
receiver (`tuned`). For each of four request shapes (completions and chat, streaming and not)
and each round, in an order that rotates so a slow second of the machine hits all alike:

- ceiling: a closed loop of `--concurrency` clients, each sending its next request when the
  last one ended, `--requests` requests: requests/s, and the server process's CPU time per
  request (user + system from /proc: the gateway, vLLM's app and AsyncLLM all live in it);
- latency at half the ceiling: Poisson arrivals at half (`--at`) of this round's bare ceiling,
  the same arrival times for each server: p50/p99 end-to-end latency (streaming: to the last
  byte), and how busy the server's process was (CPU seconds a second: at a lower rate each
  engine step carries fewer requests, so a request costs more and half the ceiling's rate can
  keep the server far more than half busy).

With `--step-ms` the mock paces its steps as a GPU's decode steps are (one every so many ms),
and with `--rate` the latency runs' rate is fixed: a request then takes as many engine steps on
every server, so its CPU at that rate no longer moves with how requests happen to overlap (a
free-running mock steps as fast as the frontend pulls, and a slower frontend batches more per
step), and a server's CPU a request differs from another's by what it does, not by its pace.

The client is a lean aiohttp loop in this process (what `vllm bench serve` does, without its
per-request tokenisation, which on a 2-core machine would take the server's CPU), so the
figures are the frontend's own; they are not comparable across machines, the paired ratios
and differences are. Prints JSON and a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import comma_list, percentile
from bench.scratch import in_log_dir
from bench.serve_overhead import cpu_seconds
from drill.launcher import ServerProcess, free_port, platform_engine_args, start_process
from serving.demo_model import SERVED_NAME, ensure_demo_model

SERVERS = ("bare", "default", "tuned")  # measured by default; the first is the reference
# kvscope serve with its gateway stepped over (uvicorn serves vLLM's app): what the rest of the
# process costs (stat logger, metrics, set-up), apart from the gateway's request path
# the default one with every render in vLLM's thread pool (inline_render_chars 0): what rendering
# short prompts in place gains
# the tuned one with one trace in ten kept (OpenTelemetry's standard sampler variables, which the
# gateway's tracer and vLLM's both read): what tracing every request costs
KNOWN = (*SERVERS, "passthrough", "offload", "tuned-sampled")
TRACE_RATIO = 0.1
API_KEY = "sk-bench-1"
PROMPT_WORDS = 24  # about 32 tokens of the demo model, as vllm-project/vllm#43469's (32, 512) input


@dataclass(frozen=True)
class Shape:
    key: str  # what --shapes takes
    name: str
    path: str
    stream: bool

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        base: dict[str, Any] = {"model": SERVED_NAME, "max_tokens": max_tokens, "ignore_eos": True}
        if self.stream:
            base["stream"] = True
        if self.path.endswith("chat/completions"):
            return {**base, "messages": [{"role": "user", "content": prompt}]}
        return {**base, "prompt": prompt}


SHAPES = (
    Shape("completions-stream", "completions, streaming", "/v1/completions", True),
    Shape("completions", "completions", "/v1/completions", False),
    Shape("chat-stream", "chat, streaming", "/v1/chat/completions", True),
    Shape("chat", "chat", "/v1/chat/completions", False),
)

TUNED_CONFIG = f"""\
gateway:
  tiers:
    standard: {{max_request_tokens: 4096, max_tokens: 1024, tokens_per_minute: 1000000000,
               requests_per_minute: 1000000000, deadline_seconds: 600}}
  tenants:
    bench: {{tier: standard, api_keys: ["{API_KEY}"]}}
  qos:
    classes:
      - {{name: interactive, max_prompt_tokens: 512, delay_ms: 0}}
      - {{name: bulk, delay_ms: 60000, kv_share: 0.5}}
"""


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts and drops what it gets (the export's cost is the sender's)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return None


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def start(
    which: str,
    workdir: Path,
    chunk: int,
    otlp: str,
    cpus: str | None = None,
    calls: Path | None = None,
    step_ms: float = 0.0,
) -> ServerProcess:
    """One server on the mock engine; on `cpus` (taskset's list) when given, with its threads;
    with `calls`, its event loop's calls counted between two signals (bench/frontend_calls.py)."""
    port = free_port()
    pinned = ["taskset", "--cpu-list", cpus] if cpus else []
    counted = ["--count-calls", str(calls)] if calls else []
    paced = ["--step-ms", str(step_ms)] if step_ms else []
    mock = [*pinned, sys.executable, "-m", "bench.mock_engine", "--chunk", str(chunk), *paced, *counted]
    where = ["--host", "127.0.0.1", "--port", str(port)]
    log = workdir / f"{which}.log"
    url = f"http://127.0.0.1:{port}"
    if which == "bare":
        argv = [*mock, "vllm", "--model", str(ensure_demo_model()), "--served-model-name", SERVED_NAME, *where]
        return start_process(
            "vLLM (mock engine)", [*argv, "--disable-uvicorn-access-log", *platform_engine_args()], url, log
        )
    if which in ("default", "passthrough"):
        skip = ["--skip-gateway"] if which == "passthrough" else []
        return start_process(
            f"kvscope serve ({which}, mock engine)", [*mock, *skip, "kvscope", *where, "--profile", "default"], url, log
        )
    if which == "offload":
        offload = workdir / "offload.yaml"
        offload.write_text("gateway:\n  inline_render_chars: 0\n")
        argv = [*mock, "kvscope", *where, "--profile", "default", "--config", str(offload)]
        return start_process("kvscope serve (default, every render offloaded, mock engine)", argv, url, log)
    config = workdir / "kvscope.yaml"
    config.write_text(TUNED_CONFIG)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_METRIC_EXPORT_INTERVAL": "5000"}
    if which == "tuned-sampled":
        env |= {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(TRACE_RATIO)}
    argv = [*mock, "kvscope", *where, "--profile", "tuned", "--config", str(config)]
    return start_process(f"kvscope serve --profile tuned ({which}, mock engine)", argv, url, log, env)


async def _one(session: Any, url: str, body: dict[str, Any], stream: bool) -> float | None:
    """One request; its end-to-end seconds, or None when it failed."""
    began = time.perf_counter()
    async with session.post(url, json=body) as response:
        if response.status != 200:
            await response.read()
            return None
        if stream:
            done = False
            async for line in response.content:
                done = done or line.startswith(b"data: [DONE]")
            if not done:
                return None
        else:
            payload = await response.json()
            if not payload.get("choices"):
                return None
    return time.perf_counter() - began


def _prompts(count: int, seed: int, words: int = PROMPT_WORDS) -> list[str]:
    from serving.demo_model import synthetic_text

    rng = random.Random(seed)
    return [synthetic_text(rng, words) for _ in range(count)]


def resident_mib(pid: int) -> float:
    """The server's resident memory (VmRSS), MiB: what a round left held."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _closed(base: str, shape: Shape, prompts: list[str], concurrency: int, max_tokens: int) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    failed = 0
    queue = list(reversed(prompts))
    headers = {"Authorization": f"Bearer {API_KEY}"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal failed
            while queue:
                took = await _one(session, base + shape.path, shape.body(queue.pop(), max_tokens), shape.stream)
                if took is None:
                    failed += 1
                else:
                    latencies.append(took)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - began
    return {"wall": wall, "completed": len(latencies), "failed": failed, "latencies": latencies}


async def _open(base: str, shape: Shape, prompts: list[str], rate: float, max_tokens: int, seed: int) -> dict[str, Any]:
    import aiohttp

    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), headers=headers, timeout=timeout
    ) as session:
        tasks = []
        due = time.perf_counter()
        for prompt in prompts:
            due += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(
                asyncio.create_task(_one(session, base + shape.path, shape.body(prompt, max_tokens), shape.stream))
            )
        results = await asyncio.gather(*tasks)
    latencies = [r for r in results if r is not None]
    return {"completed": len(latencies), "failed": len(results) - len(latencies), "latencies": latencies}


def ceiling(
    server: ServerProcess, shape: Shape, prompts: list[str], concurrency: int, max_tokens: int
) -> dict[str, Any]:
    before = cpu_seconds(server.pid)
    run = asyncio.run(_closed(server.base_url, shape, prompts, concurrency, max_tokens))
    cpu = cpu_seconds(server.pid) - before
    return {
        "req_per_s": run["completed"] / run["wall"],
        "cpu_ms_per_request": 1000 * cpu / max(run["completed"], 1),
        "completed": run["completed"],
        "failed": run["failed"],
        "rss_mib": resident_mib(server.pid),
    }


def latency(
    server: ServerProcess, shape: Shape, prompts: list[str], rate: float, max_tokens: int, seed: int
) -> dict[str, Any]:
    before = cpu_seconds(server.pid)
    run = asyncio.run(_open(server.base_url, shape, prompts, rate, max_tokens, seed))
    cpu = cpu_seconds(server.pid) - before
    values = run["latencies"]
    return {
        "p50_ms": 1000 * statistics.median(values) if values else float("nan"),
        "p99_ms": 1000 * percentile(values, 99),
        "cpu_ms_per_request": 1000 * cpu / max(run["completed"], 1),
        "failed": run["failed"],
    }


def split_cpus(cpus: list[int]) -> tuple[list[int], list[int]]:
    """The servers' CPU (the last one allowed) and the client's (the rest): one server runs at a
    time and its API process is one busy thread, so one CPU is what it can use."""
    return cpus[-1:], cpus[:-1]


def paired(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(servers: dict[str, ServerProcess], args: argparse.Namespace) -> dict[str, Any]:
    names = list(servers)
    rows: dict[str, list[dict[str, Any]]] = {shape.name: [] for shape in SHAPES}
    shapes = SHAPES[:1] if args.smoke else [s for s in SHAPES if s.key in args.shapes]
    for i in range(args.rounds):
        for n, shape in enumerate(shapes):
            prompts = _prompts(args.requests, seed=1000 * i + n, words=args.prompt_words)
            warm = prompts[: max(4, args.concurrency)]
            order = names[i % len(names) :] + names[: i % len(names)]  # rotate who goes first
            row: dict[str, Any] = {}
            for which in order:
                ceiling(servers[which], shape, warm, args.concurrency, args.max_tokens)  # warm-up
                row[which] = {"ceiling": ceiling(servers[which], shape, prompts, args.concurrency, args.max_tokens)}
            rate = args.rate or row[names[0]]["ceiling"]["req_per_s"] * args.at
            arrivals = _prompts(args.half_requests, seed=1000 * i + n, words=args.prompt_words)
            for which in order:  # the same arrival times and prompts for each server
                row[which]["half"] = latency(servers[which], shape, arrivals, rate, args.max_tokens, seed=i)
            row["rate_at_half"] = rate
            rows[shape.name].append(row)
    return {name: summarise(found) for name, found in rows.items() if found} | {"rounds": rows}


def _against(rounds: list[dict[str, Any]], which: str, reference: str) -> dict[str, Any]:
    """`which` against `reference`, paired round by round."""

    def delta(part: str, key: str) -> dict[str, float]:
        return paired([r[which][part][key] - r[reference][part][key] for r in rounds])

    return {
        "req_per_s": statistics.median(r[which]["ceiling"]["req_per_s"] for r in rounds),
        "ratio": paired([r[which]["ceiling"]["req_per_s"] / r[reference]["ceiling"]["req_per_s"] for r in rounds]),
        "cpu_ms": statistics.median(r[which]["ceiling"]["cpu_ms_per_request"] for r in rounds),
        "cpu_ms_delta": delta("ceiling", "cpu_ms_per_request"),
        "half_cpu_ms_delta": delta("half", "cpu_ms_per_request"),
        "p50_delta_ms": delta("half", "p50_ms"),
        "p99_delta_ms": delta("half", "p99_ms"),
        "busy_at_half": statistics.median(
            r["rate_at_half"] * r[which]["half"]["cpu_ms_per_request"] / 1000 for r in rounds
        ),
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"bare_req_per_s": statistics.median(r["bare"]["ceiling"]["req_per_s"] for r in rounds)}
    out["bare_cpu_ms"] = statistics.median(r["bare"]["ceiling"]["cpu_ms_per_request"] for r in rounds)
    out["bare_busy_at_half"] = statistics.median(
        r["rate_at_half"] * r["bare"]["half"]["cpu_ms_per_request"] / 1000 for r in rounds
    )
    measured = ["bare", *(k for k in KNOWN[1:] if k in rounds[0])]  # round 0's keys come in rotated order
    for which in measured[1:]:
        out[which] = _against(rounds, which, "bare")
    if "passthrough" in measured:  # the gateway's own share: kvscope serve with it stepped over
        out["against_passthrough"] = {
            which: _against(rounds, which, "passthrough") for which in measured[1:] if which != "passthrough"
        }
    out["rss_mib"] = {w: [r[w]["ceiling"]["rss_mib"] for r in rounds] for w in measured}  # after each round
    out["failed"] = sum(r[w][part]["failed"] for r in rounds for w in measured for part in ("ceiling", "half"))
    return out


def table(result: dict[str, Any], rounds: int, at: float = 0.5, fixed: float | None = None) -> str:
    def cell(stats: dict[str, float], fmt: str) -> str:
        return f"{stats['median']:{fmt}} ({stats['min']:{fmt}} to {stats['max']:{fmt}})"

    rate = f"{fixed:g} req/s" if fixed else "half" if at == 0.5 else f"{at:g} of bare's ceiling"
    lines = [
        f"| shape | gateway | bare req/s | gateway req/s | ratio ({rounds} rounds: median, spread) | "
        f"API-server CPU/request bare, gateway | gateway's CPU/request | the same at {rate} | "
        f"busy at {rate}, bare, gateway | added p50 at {rate} | added p99 at {rate} |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for shape in SHAPES:
        found = result.get(shape.name)
        if not found:
            continue
        rows = [(which, "bare", found[which]) for which in found if which in KNOWN]
        references = {"bare": (found["bare_req_per_s"], found["bare_cpu_ms"], found["bare_busy_at_half"])}
        if "passthrough" in found:  # the same, against kvscope serve with its gateway stepped over
            passthrough = found["passthrough"]
            references["passthrough"] = passthrough["req_per_s"], passthrough["cpu_ms"], passthrough["busy_at_half"]
            rows += [(which, "passthrough", g) for which, g in found["against_passthrough"].items()]
        for which, against, g in rows:
            base_rps, base_cpu, base_busy = references[against]
            name = which if against == "bare" else f"{which} (against passthrough)"
            lines.append(
                f"| {shape.name} | {name} | {base_rps:.0f} | {g['req_per_s']:.0f} | "
                f"{cell(g['ratio'], '.3f')} | {base_cpu:.2f} ms, {g['cpu_ms']:.2f} ms | "
                f"{cell(g['cpu_ms_delta'], '+.2f')} ms | {cell(g['half_cpu_ms_delta'], '+.2f')} ms | "
                f"{base_busy:.2f}, {g['busy_at_half']:.2f} | "
                f"{cell(g['p50_delta_ms'], '+.2f')} ms | "
                f"{cell(g['p99_delta_ms'], '+.2f')} ms |"
            )
    return "\n".join(lines)


OURS = ("serving/", "kvscope/")  # py-spy names the project's files relative to the working directory


def _frames(stack: str) -> list[tuple[str, str]]:
    """py-spy's raw frames, root first, as (function, file) with the line dropped."""
    found = []
    for frame in stack.split(";"):
        name, _, where = frame.partition(" (")
        found.append((name, where.rsplit(":", 1)[0].rstrip(")")))
    return found


def hot_spots(collapsed: str, top: int = 20) -> tuple[int, list[tuple[str, int, int]]]:
    """Total samples, and the functions of kvscope's own code by inclusive samples: (function
    (file), inclusive, self), from py-spy's collapsed stacks."""
    total, inclusive, own = 0, dict[str, int](), dict[str, int]()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = _frames(stack)
        seen = set()
        for name, where in frames:
            if where.startswith(OURS) or any(f"/{part}" in where for part in OURS):
                key = f"{name} ({where.split('/site-packages/')[-1]})"
                if key not in seen:
                    inclusive[key] = inclusive.get(key, 0) + n
                    seen.add(key)
        leaf = frames[-1]
        key = f"{leaf[0]} ({leaf[1].split('/site-packages/')[-1]})"
        own[key] = own.get(key, 0) + n
    ranked = sorted(inclusive, key=lambda k: -inclusive[k])[:top]
    return total, [(k, inclusive[k], own.get(k, 0)) for k in ranked]


def leaves(collapsed: str, top: int = 20) -> list[tuple[str, int]]:
    """Functions by self samples (where the CPU was), every package."""
    own: dict[str, int] = {}
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            name, where = _frames(stack)[-1]
            key = f"{name} ({where.split('/site-packages/')[-1]})"
            own[key] = own.get(key, 0) + int(count)
    return sorted(own.items(), key=lambda kv: -kv[1])[:top]


def package(where: str) -> str:
    """Whose code a frame's file is: kvscope's, a package's (vLLM by its sub-package), the
    standard library's (by module), or the benchmark's mock engine."""
    if where.startswith(OURS) or any(f"/{part}" in where for part in OURS):
        return "kvscope"
    if where.startswith("bench/") or "/bench/" in where:
        return "bench (mock engine)"
    if "/site-packages/" in where:
        where = where.split("/site-packages/")[-1]
    elif "/python3" in where:
        where = where.split("/python3", 1)[1].partition("/")[2]
    # py-spy names a file by its module path ("vllm/v1/engine/async_llm.py", "asyncio/locks.py")
    parts = where.removeprefix("<frozen ").removesuffix(">").split("/")
    top = parts[0].removesuffix(".py").partition(".")[0]
    if top in sys.stdlib_module_names:
        return f"stdlib {top}"
    if top == "vllm":
        return "/".join(parts[: min(3, len(parts) - 1)])
    return top if top.isidentifier() else "other"


def by_package(collapsed: str) -> dict[str, int]:
    """Samples by the package of the frame they were taken in (self time)."""
    own: dict[str, int] = {}
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            key = package(_frames(stack)[-1][1])
            own[key] = own.get(key, 0) + int(count)
    return own


@dataclass(frozen=True)
class Profiled:
    which: str
    collapsed: str
    path: Path
    requests: int
    cpu_ms_per_request: float  # from /proc over the sampled batches


SAMPLE_MS = 5.0  # py-spy at 200 Hz: a sample is 5 ms of one thread's CPU (idle threads are not sampled)


def sample(which: str, args: argparse.Namespace, workdir: Path, spy: str) -> Profiled:
    """Saturate one server for --profile-seconds while py-spy samples it."""
    import subprocess

    shape = next(s for s in SHAPES if s.key == args.shape)
    out = workdir / f"{which}.collapsed"
    with contextlib.ExitStack() as stack:
        otlp = stack.enter_context(otlp_sink())
        server = start(which, workdir, args.chunk, otlp)
        stack.callback(server.stop)
        server.wait_ready("/health" if which in ("bare", "passthrough") else "/ready", 300)
        ceiling(server, shape, _prompts(args.concurrency * 2, 1), args.concurrency, args.max_tokens)  # warm
        seconds = str(args.profile_seconds)
        spy_argv = [spy, "record", "-p", str(server.pid), "-d", seconds, "-r", "200", "-f", "raw", "-o", str(out)]
        sampler = subprocess.Popen([*spy_argv, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + args.profile_seconds
        batch, requests, cpu_ms = 0, 0, 0.0
        while time.monotonic() < deadline:
            batch += 1
            run = ceiling(server, shape, _prompts(args.requests, batch), args.concurrency, args.max_tokens)
            requests += run["completed"]
            cpu_ms += run["cpu_ms_per_request"] * run["completed"]
        sampler.wait(timeout=args.profile_seconds + 120)
    return Profiled(which, out.read_text(), out, requests, cpu_ms / max(requests, 1))


def compare_table(profiles: list[Profiled], top: int = 25) -> str:
    """CPU per request by package, each server side by side, and the difference to the first:
    py-spy's samples (5 ms each) over the requests served while it sampled."""
    first = profiles[0]
    counts = {p.which: by_package(p.collapsed) for p in profiles}
    per = {
        p.which: {k: SAMPLE_MS * 1000 * n / max(p.requests, 1) for k, n in counts[p.which].items()} for p in profiles
    }
    keys = sorted({k for c in per.values() for k in c}, key=lambda k: -max(abs(c.get(k, 0.0)) for c in per.values()))
    names = [p.which for p in profiles]
    head = " | ".join(f"{n} us/request" for n in names)
    diffs = " | ".join(f"{n} - {first.which}" for n in names[1:])
    lines = [f"| package (self samples) | {head} | {diffs} |", "| --- |" + " --- |" * (2 * len(names) - 1)]
    for key in keys[:top]:
        cells = " | ".join(f"{per[n].get(key, 0.0):.0f}" for n in names)
        deltas = " | ".join(f"{per[n].get(key, 0.0) - per[first.which].get(key, 0.0):+.0f}" for n in names[1:])
        lines.append(f"| `{key}` | {cells} | {deltas} |")
    totals = {n: sum(per[n].values()) for n in names}
    cells = " | ".join(f"**{totals[n]:.0f}**" for n in names)
    deltas = " | ".join(f"**{totals[n] - totals[first.which]:+.0f}**" for n in names[1:])
    lines.append(f"| all sampled | {cells} | {deltas} |")
    cells = " | ".join(f"{1000 * p.cpu_ms_per_request:.0f}" for p in profiles)
    deltas = " | ".join(f"{1000 * (p.cpu_ms_per_request - first.cpu_ms_per_request):+.0f}" for p in profiles[1:])
    lines.append(f"| process CPU from /proc | {cells} | {deltas} |")
    return "\n".join(lines)


def profile(which: list[str], args: argparse.Namespace, workdir: Path) -> int:
    """Profile each server in turn at saturation; print its hot spots, then, for two or more,
    the per-request CPU by package side by side."""
    import shutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    profiles = [sample(name, args, workdir, spy) for name in which]
    for found in profiles:
        _hot_tables(found, args)
    if len(profiles) > 1:
        print()
        print(compare_table(profiles))
    return 0


def _hot_tables(found: Profiled, args: argparse.Namespace) -> None:
    shape = next(s for s in SHAPES if s.key == args.shape)
    collapsed, which, out = found.collapsed, found.which, found.path
    total, ours = hot_spots(collapsed)
    print(
        f"py-spy, {which}, {shape.name}, {args.concurrency} concurrent, {total} samples over {found.requests} "
        f"requests; collapsed stacks: {out}"
    )
    print()
    print("| kvscope function (file) | inclusive | self |")
    print("| --- | --- | --- |")
    for key, inc, own in ours:
        print(f"| `{key}` | {100 * inc / total:.1f} % | {100 * own / total:.1f} % |")
    print()
    print("| where the CPU was (self, every package) | share |")
    print("| --- | --- |")
    for key, own in leaves(collapsed):
        print(f"| `{key}` | {100 * own / total:.1f} % |")


def paired_servers(parser: argparse.ArgumentParser, what: str) -> None:
    """--servers (the reference first, passthrough,default unless told) and --shape, for the
    benchmarks that compare servers on the mock engine (frontend_calls, frontend_together)."""
    parser.add_argument(
        "--servers",
        type=comma_list,
        default=["passthrough", "default"],
        help=f"servers {what}, the reference first (of {', '.join(KNOWN)}; default passthrough,default)",
    )
    parser.add_argument("--shape", default=SHAPES[0].key, choices=[s.key for s in SHAPES], help="request shape")


def run(args: argparse.Namespace, workdir: Path, server_cpus: list[int] | None, client_cpus: list[int] | None) -> int:
    """The servers booted together in `workdir` (their logs), measured, the table printed; 0 when no
    request failed."""
    with contextlib.ExitStack() as stack:
        otlp = stack.enter_context(otlp_sink())
        cpus = ",".join(map(str, server_cpus)) if server_cpus else None
        servers = {  # boot together
            which: start(which, workdir, args.chunk, otlp, cpus, step_ms=args.step_ms) for which in args.servers
        }
        for proc in servers.values():
            stack.callback(proc.stop)
        for which, proc in servers.items():
            proc.wait_ready("/health" if which in ("bare", "passthrough") else "/ready", 300)
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)  # after the servers began: they keep their own CPU
        result = measure(servers, args)
    result["settings"] = {k: v for k, v in vars(args).items() if k != "json"}
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    print()
    print(table(result, args.rounds, args.at, args.rate))
    for shape in SHAPES:
        if shape.name in result:
            held = "; ".join(
                f"{w} {', '.join(f'{m:.0f}' for m in v)}" for w, v in result[shape.name]["rss_mib"].items()
            )
            print(f"resident memory after each round, {shape.name} (MiB): {held}")
    failed = sum(v.get("failed", 0) for k, v in result.items() if k in {s.name for s in SHAPES})
    return 0 if failed == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--requests", type=int, default=600, help="requests per run (default 600)")
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop clients (default 32)")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (default 64)")
    parser.add_argument("--chunk", type=int, default=1, help="tokens per engine step (default 1, as #43469)")
    parser.add_argument(
        "--prompt-words", type=int, default=PROMPT_WORDS, help=f"words per prompt (default {PROMPT_WORDS}, ~32 tokens)"
    )
    parser.add_argument(
        "--shapes",
        type=comma_list,
        default=[s.key for s in SHAPES],
        help=f"request shapes to measure, comma-separated, of {', '.join(s.key for s in SHAPES)} (default all)",
    )
    parser.add_argument(
        "--servers",
        type=comma_list,
        default=list(SERVERS),
        help=f"servers to measure, bare first (default {','.join(SERVERS)}; also passthrough: kvscope serve "
        f"with its gateway stepped over; offload: default with every render on vLLM's thread pool; tuned-sampled: tuned with {TRACE_RATIO:g} of the traces kept)",
    )
    parser.add_argument(
        "--half-requests", type=int, help="requests per run at half the ceiling (default --requests; p99 wants more)"
    )
    parser.add_argument(
        "--at", type=float, default=0.5, help="the latency runs' rate, a fraction of bare's ceiling (default 0.5)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="the latency runs' rate in requests a second, the same for every round (instead of --at)",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="the mock engine's steps this far apart, as a GPU's decode steps (default 0: as fast as the frontend "
        "pulls); the ceiling is then the pace's, and CPU a request at --rate no longer moves with how requests overlap",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="servers on the last CPU this process may use, the client on the others (taskset): "
        "the client's work no longer lands on the measured server's core",
    )
    parser.add_argument("--smoke", action="store_true", help="one round, one shape, a few requests (CI)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--profile",
        type=comma_list,
        help=f"instead: sample these servers (of {', '.join(KNOWN)}, comma-separated) with py-spy at "
        "saturation, one after the other; two or more: CPU per request by package side by side",
    )
    parser.add_argument("--profile-seconds", type=int, default=30, help="how long to sample (default 30)")
    parser.add_argument("--shape", default=SHAPES[0].key, choices=[s.key for s in SHAPES], help="profiled shape")
    args = parser.parse_args(argv)
    if args.profile:
        if unknown := [name for name in args.profile if name not in KNOWN]:
            parser.error(f"--profile: no server {unknown[0]!r} (choose from {', '.join(KNOWN)})")
        return profile(args.profile, args, Path(tempfile.mkdtemp(prefix="kvscope-profile-")))
    if args.servers[0] != "bare" or len(args.servers) < 2 or any(n not in KNOWN for n in args.servers):
        parser.error(f"--servers: bare first, then one or more of {', '.join(KNOWN[1:])}")
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be positive")
    if args.step_ms < 0:
        parser.error("--step-ms must not be negative")
    if args.smoke:
        args.rounds, args.requests, args.concurrency, args.max_tokens = 1, 12, 4, 8
        args.half_requests = None
    args.half_requests = args.half_requests or args.requests
    server_cpus, client_cpus = split_cpus(sorted(os.sched_getaffinity(0))) if args.pin else (None, None)
    if args.pin and not client_cpus:
        parser.error("--pin needs two CPUs or more")
    return in_log_dir("kvscope-ceiling-", lambda workdir: run(args, workdir, server_cpus, client_cpus))


if __name__ == "__main__":
    sys.exit(main())
