"""The generated alert rules with time compressed for a drill.

Production rules wait minutes (`for: 5m`) and look at hour-long windows; a drill lasts a few
minutes. A drill loads the very rules `kvscope alerts build` generates, with every duration
(`for:`, range windows, subquery steps, offsets) divided by the same factor, so each alert
keeps its shape and thresholds and only its clock runs faster. The report states the factor.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from alerts import build

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_RANGE = re.compile(r"\[([0-9a-z]+)(?::([0-9a-z]+))?\]")
_OFFSET = re.compile(r"\boffset\s+([0-9a-z]+)")


def seconds(text: str) -> float:
    """A Prometheus duration ("1h30m", "15s") in seconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def duration(value: float) -> str:
    """Seconds as a Prometheus duration, whole seconds (at least 1 s)."""
    total = max(1, math.ceil(value))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total % size == 0:
            return f"{total // size}{unit}"
    return f"{total}s"


def scaled(text: str, speedup: float, floor: float = 0.0) -> str:
    """One duration as a drill sees it, e.g. scaled("5m", 20) == "15s"."""
    return duration(max(seconds(text) / speedup, floor))


def compress_expr(expr: str, speedup: float, min_range: float, min_step: float) -> str:
    def one_range(m: re.Match[str]) -> str:
        window = duration(max(seconds(m.group(1)) / speedup, min_range))
        if m.group(2) is None:
            return f"[{window}]"
        return f"[{window}:{duration(max(seconds(m.group(2)) / speedup, min_step))}]"

    expr = _RANGE.sub(one_range, expr)
    return _OFFSET.sub(lambda m: f"offset {duration(seconds(m.group(1)) / speedup)}", expr)


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
                rule["expr"] = compress_expr(rule["expr"], speedup, min_range, min_step)
                if "for" in rule:
                    rule["for"] = duration(seconds(rule["for"]) / speedup)
            out_rules.append(rule)
        groups.append({**group, "interval": duration(scrape_interval), "rules": out_rules})
    return {"groups": groups}


def write(path: Path, speedup: float, scrape_interval: float) -> Path:
    """The generated rule file (alerts/), compressed, written to `path`."""
    source = yaml.safe_load((build.ALERTS_DIR / build.RULES_FILE).read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(compress(source, speedup, scrape_interval), sort_keys=False, width=1000))
    return path
