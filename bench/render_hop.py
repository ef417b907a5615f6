"""Benchmark: one prompt encoded in place against the same encode on a one-thread pool, the
way vLLM's renderer offloads it (serving/inline_render.py).

    .venv/bin/python -m bench.render_hop [--calls 2000] [--chars 180]

The demo model's tokenizer, `tokenizer(text)` as vLLM's renderer calls it. Reported: CPU and
wall time per call (process_time: every thread of the process), alone and with the calling
thread busy in Python between calls, as a saturated event loop is.
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from serving.demo_model import ensure_demo_model, synthetic_text

BUSY_STEPS = 3000  # a Python loop of about 0.15 ms between calls, the loop's other work


def _busy() -> int:
    total = 0
    for step in range(BUSY_STEPS):
        total += step
    return total


def _timed(run: Callable[[], None], calls: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return 1e6 * (time.process_time() - cpu) / calls, 1e6 * (time.perf_counter() - wall) / calls


def _in_place(tokenizer: Any, text: str, calls: int, busy: bool) -> None:
    for _ in range(calls):
        tokenizer(text)
        if busy:
            _busy()


def _pooled(pool: ThreadPoolExecutor, tokenizer: Any, text: str, calls: int, busy: bool) -> None:
    pending: list[Future[Any]] = []
    for _ in range(calls):
        pending.append(pool.submit(tokenizer, text))
        if busy:
            _busy()
        else:
            pending.pop().result()
    for future in pending:
        future.result()


def measure(tokenizer: Any, text: str, calls: int) -> list[tuple[str, float, float]]:
    rows = []
    for busy in (False, True):
        suffix = ", caller busy" if busy else ""
        rows.append((f"in place{suffix}", *_timed(functools.partial(_in_place, tokenizer, text, calls, busy), calls)))
        with ThreadPoolExecutor(1) as pool:
            pool.submit(tokenizer, text).result()  # the thread started, the tokenizer warm
            run = functools.partial(_pooled, pool, tokenizer, text, calls, busy)
            rows.append((f"one-thread pool{suffix}", *_timed(run, calls)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--chars", type=int, default=180, help="characters of the prompt (default 180)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.chars < 1:
        parser.error("--calls and --chars must be at least 1")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_demo_model()))
    text = synthetic_text(random.Random(0), args.chars)[: args.chars]
    print(f"{len(tokenizer(text)['input_ids'])} tokens, {len(text)} characters, {args.calls} calls")
    print("| encode | CPU a call | wall a call |\n| --- | --- | --- |")
    for name, cpu, wall in measure(tokenizer, text, args.calls):
        print(f"| {name} | {cpu:.1f} us | {wall:.1f} us |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
