"""The generated alert rules with time compressed for a drill.

Production rules wait minutes (`for: 5m`) and look at hour-long windows; a drill lasts a few
minutes. A drill loads the very rules `kvscope alerts build` generates from the same config,
with every duration (`for:`, range windows, subquery steps, offsets) divided by the same
factor, so each alert keeps its shape and thresholds and only its clock runs faster. The
report states the factor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alerts import build
from kvscope.config import Config
from kvscope.durations import format_duration, parse_duration
from kvscope.promql import scale_durations


def compress(rules: dict[str, Any], speedup: float, scrape_interval: float) -> dict[str, Any]:
    """A copy of a rule-file document with its clock running `speedup` times faster."""
    if speedup < 1:
        raise ValueError(f"the alert speed-up must be at least 1, not {speedup:g}")
    min_range, min_step = 5 * scrape_interval, scrape_interval
    groups = []
    for group in rules["groups"]:
        out_rules = []
        for rule in group["rules"]:
            rule = dict(rule)
            if speedup != 1:
                rule["expr"] = scale_durations(rule["expr"], speedup, min_range, min_step)
                if "for" in rule:
                    rule["for"] = format_duration(parse_duration(rule["for"]) / speedup)
            out_rules.append(rule)
        groups.append({**group, "interval": format_duration(scrape_interval), "rules": out_rules})
    return {"groups": groups}


def write(path: Path, speedup: float, scrape_interval: float, config: Config | None = None) -> Path:
    """The rules `kvscope alerts build` makes from `config`, compressed, written to `path`."""
    rules, _ = build.build_rules(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(compress(rules, speedup, scrape_interval), sort_keys=False, width=1000))
    return path
