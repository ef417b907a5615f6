"""The generated alert rules with time compressed for a drill.

Production rules wait minutes (`for: 5m`) and look at hour-long windows; a drill lasts a few
minutes. A drill loads the very rules `kvscope alerts build` generates from the same config,
with every duration (`for:`, range windows, subquery steps, offsets) divided by the same
factor, so each alert keeps its shape and thresholds and only its clock runs faster. The
report states the factor.

A range window is never shorter than five scrapes, nor than PERIODS_PER_WINDOW of the scenario's
own period (the spacing of its bursts): in production a 5m window holds twenty bursts that come
15 s apart, and its p99 is their steady state; compressed 20x to 15 s it would hold one, the
quantile would rise as a burst's backlog finishes and fall before `for:` had passed, and a
slower engine, whose bursts the calibration spaces wider, would never be alerted on. The same
holds for an incident made by rare requests (kv-avalanche: one long prompt in a deck of 50): on
an engine at 1.6 req/s a deck takes 32 s, the pool fills and preempts in clumps that far apart,
and a 15 s window saw one clump's preemptions for less than VLLMPreemptionsHigh's 15 s `for:`
(2026-12-06, an AVX2 machine with a core taken); its period is a deck's time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alerts import build
from kvscope.config import Config
from kvscope.durations import format_duration, parse_duration
from kvscope.promql import scale_durations

PERIODS_PER_WINDOW = 2  # a compressed range window holds at least this many of the scenario's periods


def min_range(scrape_interval: float, period: float | None = None) -> float:
    """The shortest range window a compressed rule keeps, in seconds: five scrapes, and
    PERIODS_PER_WINDOW of the scenario's `period` (seconds between the events that make its
    incident, Scenario.recurrence; None: none)."""
    return max(5 * scrape_interval, PERIODS_PER_WINDOW * (period or 0.0))


def compress(
    rules: dict[str, Any], speedup: float, scrape_interval: float, period: float | None = None
) -> dict[str, Any]:
    """A copy of a rule-file document with its clock running `speedup` times faster; range
    windows no shorter than min_range(scrape_interval, period)."""
    if speedup < 1:
        raise ValueError(f"the alert speed-up must be at least 1, not {speedup:g}")
    if period is not None and period <= 0:
        raise ValueError(f"the scenario's period must be positive, not {period:g}")
    shortest, min_step = min_range(scrape_interval, period), scrape_interval
    groups = []
    for group in rules["groups"]:
        out_rules = []
        for rule in group["rules"]:
            rule = dict(rule)
            if speedup != 1:
                rule["expr"] = scale_durations(rule["expr"], speedup, shortest, min_step)
                if "for" in rule:
                    rule["for"] = format_duration(parse_duration(rule["for"]) / speedup)
            out_rules.append(rule)
        groups.append({**group, "interval": format_duration(scrape_interval), "rules": out_rules})
    return {"groups": groups}


def write(
    path: Path, speedup: float, scrape_interval: float, config: Config | None = None, period: float | None = None
) -> Path:
    """The rules `kvscope alerts build` makes from `config`, compressed, written to `path`."""
    rules, _ = build.build_rules(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(compress(rules, speedup, scrape_interval, period), sort_keys=False, width=1000))
    return path
