"""Benchmark (a''): the Python calls a request makes on the frontend's event loop, by server.

    .venv/bin/python -m bench.frontend_calls [--servers passthrough,default] \
        [--shape completions-stream] [--requests 200] [--max-tokens 64]

The CPU a request costs, as bench.frontend_ceiling reads it from /proc, spreads by a millisecond
from run to run on a shared 2-core machine; what the process does for a request does not. Each
server runs in turn on the mock engine (bench/mock_engine.py), warmed up, then cProfile counts
every call on its event loop's thread (vLLM's app, AsyncLLM's output handler, the gateway) over
`--requests` requests of `--concurrency` closed-loop clients. Printed: the calls a request made
on each server, and the functions whose count differs most from the first server's, side by
side. A count is not a time (cProfile's own cost distorts its times), but it does not move with
the machine's load: a function called once more for every streamed token shows as +64 calls on a
64-token stream, and a change that removes it shows as exactly that. Threads other than the
loop's (vLLM's render pool, the OTLP exporters) are not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pstats
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.frontend_ceiling import KNOWN, SHAPES, _prompts, ceiling, otlp_sink, paired_servers, start
from bench.scratch import in_log_dir

WARM_REQUESTS = 64
SIGNAL_WAIT_S = 60.0  # for the server to start or finish counting (a slow machine, a busy core)
Key = tuple[str, int, str]  # cProfile's (file, line, function)
STEP = ":get_output_async"  # the mock engine's step (bench/mock_engine.py)


@dataclass
class Counted:
    which: str
    requests: int
    failed: int
    calls: dict[str, int]  # by `where`: every call, recursive ones included

    def per_request(self, key: str) -> float:
        return self.calls.get(key, 0) / max(self.requests, 1)

    @property
    def total(self) -> float:
        return sum(self.calls.values()) / max(self.requests, 1)

    @property
    def steps(self) -> float:
        """Mock-engine steps a request: the counts compare like for like only where these match
        (each step's outputs carry one token of every running request)."""
        return sum(n for key, n in self.calls.items() if key.endswith(STEP)) / max(self.requests, 1)


def where(key: Key) -> str:
    """A function's short name: `file:line:function` from the package down, or the builtin's."""
    file, line, function = key
    if file == "~":  # a builtin: its type's address differs from process to process
        return re.sub(r" at 0x[0-9a-f]+", "", function)
    for marker in ("site-packages/", "/lib/python3."):
        if marker in file:
            file = file.split(marker, 1)[1]
            file = file.split("/", 1)[1] if marker.startswith("/lib") else file
            break
    else:
        with contextlib.suppress(ValueError):
            file = str(Path(file).relative_to(Path(__file__).resolve().parents[1]))
    return f"{file}:{line}:{function}"


def _wait_for(path: Path, server: Any, what: str) -> None:
    deadline = time.monotonic() + SIGNAL_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} did not {what} within {SIGNAL_WAIT_S:g} s:\n{server.log_tail()}")
        time.sleep(0.05)


def count(which: str, args: argparse.Namespace, workdir: Path) -> Counted:
    """One server: warmed, then counted over --requests requests."""
    shape = next(s for s in SHAPES if s.key == args.shape)
    stats = workdir / f"{which}.prof"
    with contextlib.ExitStack() as stack:
        otlp = stack.enter_context(otlp_sink())
        server = start(which, workdir, args.chunk, otlp, calls=stats)
        stack.callback(server.stop)
        server.wait_ready("/health" if which in ("bare", "passthrough") else "/ready", 300)
        ceiling(server, shape, _prompts(WARM_REQUESTS, 0), args.concurrency, args.max_tokens)
        server.signal_server(signal.SIGUSR1)
        _wait_for(stats.with_name(stats.name + ".on"), server, "start counting")
        run = ceiling(server, shape, _prompts(args.requests, 1), args.concurrency, args.max_tokens)
        server.signal_server(signal.SIGUSR2)
        _wait_for(stats, server, "write its counts")
    found = pstats.Stats(str(stats)).stats  # type: ignore[attr-defined]
    calls: dict[str, int] = {}
    for key, row in found.items():
        calls[where(key)] = calls.get(where(key), 0) + int(row[1])
    return Counted(which, run["completed"], run["failed"], calls)


def compare(counted: list[Counted], top: int) -> list[dict[str, Any]]:
    """The `top` functions whose calls a request differ most from the first server's."""
    first = counted[0]
    keys = {key for c in counted for key in c.calls}
    spread = {key: max(abs(c.per_request(key) - first.per_request(key)) for c in counted[1:]) for key in keys}
    ranked = sorted((key for key in keys if spread[key] >= 0.5), key=lambda key: (-spread[key], key))
    return [{"function": key, **{c.which: round(c.per_request(key), 2) for c in counted}} for key in ranked[:top]]


def table(counted: list[Counted], rows: list[dict[str, Any]], max_tokens: int, stream: bool) -> str:
    first, names = counted[0], [c.which for c in counted]
    lines = [
        f"| server | requests | failed | engine steps a request | calls a request | against {first.which} |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in counted:
        lines.append(
            f"| {c.which} | {c.requests} | {c.failed} | {c.steps:.1f} | {c.total:,.0f} | {c.total - first.total:+,.0f} |"
        )
    lines.append("")
    per_token = f" | a streamed token ({max_tokens})" if stream else ""
    head = " | ".join(names)
    diffs = " | ".join(f"{n} - {first.which}" for n in names[1:])
    lines.append(f"| function (calls a request) | {head} | {diffs}{per_token} |")
    lines.append("| --- |" + " --- |" * (2 * len(names) - 1 + bool(stream)))
    for row in rows:
        cells = " | ".join(f"{row[n]:.2f}" for n in names)
        deltas = [row[n] - row[first.which] for n in names[1:]]
        tail = f" | {deltas[-1] / max_tokens:+.2f}" if stream else ""
        lines.append(f"| `{row['function']}` | {cells} | " + " | ".join(f"{d:+.2f}" for d in deltas) + f"{tail} |")
    return "\n".join(lines)


def run(args: argparse.Namespace, workdir: Path) -> int:
    """One run, its servers' logs in `workdir`; 0 when it went well."""
    counted = [count(which, args, workdir) for which in args.servers]
    rows = compare(counted, args.top)
    stream = next(s for s in SHAPES if s.key == args.shape).stream
    if args.json:
        summary = {
            c.which: {"requests": c.requests, "failed": c.failed, "steps": c.steps, "calls": c.total} for c in counted
        }
        args.json.write_text(json.dumps({"servers": summary, "functions": rows, "settings": vars(args)}, default=str))
    print(table(counted, rows, args.max_tokens, stream))
    return 1 if any(c.failed for c in counted) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    paired_servers(parser, "to count")
    parser.add_argument("--requests", type=int, default=200, help="requests counted per server (default 200)")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop clients (default 8)")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (default 64)")
    parser.add_argument("--chunk", type=int, default=1, help="tokens per engine step (default 1)")
    parser.add_argument("--top", type=int, default=30, help="functions listed (default 30)")
    parser.add_argument("--json", type=Path, help="also write the counts here")
    args = parser.parse_args(argv)
    if unknown := [n for n in args.servers if n not in KNOWN]:
        parser.error(f"--servers: no server {unknown[0]!r} (choose from {', '.join(KNOWN)})")
    if len(args.servers) < 2:
        parser.error("--servers: two or more, the first the reference")
    if args.requests < 1 or args.concurrency < 1 or args.max_tokens < 1:
        parser.error("--requests, --concurrency and --max-tokens must be at least 1")
    return in_log_dir("kvscope-calls-", lambda workdir: run(args, workdir))


if __name__ == "__main__":
    sys.exit(main())
