"""The side-by-side benchmark's arithmetic (bench/frontend_together.py): each server against the
first, round by round, and the loop thread's CPU read to the nanosecond."""

from __future__ import annotations

import os
import sys

import pytest

from bench.frontend_together import loop_seconds, summarise, table


def _round(**loops: float) -> dict[str, dict[str, float]]:
    return {n: {"loop_ms": v, "process_ms": v + 0.5, "p50_ms": 700.0, "failed": 0} for n, v in loops.items()}


def test_each_server_is_paired_with_the_first_round_by_round():
    # the machine slows by a millisecond in the second round: both servers alike
    rounds = [
        _round(passthrough=6.0, default=6.6),
        _round(passthrough=7.0, default=7.7),
        _round(passthrough=6.2, default=6.7),
    ]
    summary = summarise(rounds, ["passthrough", "default"])
    delta = summary["default"]["loop_ms_delta"]
    assert (round(delta["median"], 3), round(delta["min"], 3), round(delta["max"], 3)) == (0.6, 0.5, 0.7)
    assert summary["passthrough"]["loop_ms_delta"]["median"] == 0 and summary["default"]["loop_ms"] == 6.7
    text = table(summary, 3)
    assert round(summary["default"]["loop_ratio"], 3) == 1.1  # 6.6/6.0, 7.7/7.0, 6.7/6.2: 1.1 the median
    assert "| default | 6.700 | +0.600 (+0.500 to +0.700) | 1.100 | 7.200 | +0.600 (+0.500 to +0.700) | 0 |" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_loop_threads_cpu_grows_with_its_work():
    before = loop_seconds(os.getpid())
    sum(i * i for i in range(300_000))
    assert loop_seconds(os.getpid()) > before
