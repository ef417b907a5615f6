"""Durations and times, parsed and written one way everywhere: the CLI's `--window 15m`, the
alert rules' `for: 5m`, the drill's compressed clocks and the diagnosis report."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
# Largest first: a duration is written in the largest unit that divides it.
_WRITE = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


_ORDER = ("y", "w", "d", "h", "m", "s", "ms")


def parse_duration(text: str, strict: bool = False) -> float:
    """'15m', '1h30m', '90s', '250ms' -> seconds > 0; decimals accepted unless `strict`, which
    takes only what Prometheus itself parses (whole numbers, each unit once, largest first).

    ValueError with the accepted forms on anything else.
    """
    text = text.strip()
    if not text or _PART.sub("", text):
        raise ValueError(f"not a duration: {text!r} (use e.g. 15m, 1h, 90s)")
    if strict:
        units = [u for _, u in _PART.findall(text)]
        ordered = [_ORDER.index(u) for u in units]
        if "." in text or ordered != sorted(set(ordered)):
            raise ValueError(f"not a Prometheus duration: {text!r} (whole units, largest first, e.g. 1h30m)")
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"the duration must be positive, not {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration in one unit, to the nearest second (at least 1s)."""
    whole = max(1, round(seconds))
    for unit, size in _WRITE:
        if whole % size == 0:
            return f"{whole // size}{unit}"
    raise AssertionError("unreachable: every whole number of seconds divides by 1")


def scaled(text: str, speedup: float, floor: float = 0.0) -> str:
    """A duration with its clock running `speedup` times faster, e.g. scaled("5m", 20) == "15s"."""
    return format_duration(max(parse_duration(text) / speedup, floor))


def parse_time(text: str | None) -> float:
    """RFC 3339 or unix seconds -> unix seconds; None -> now."""
    if text is None:
        return datetime.now(UTC).timestamp()
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a time: {text!r} (unix seconds must be a positive number)")
        return value
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not a time: {text!r} (use RFC 3339, e.g. 2026-11-30T02:00:00Z, or unix seconds)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def rfc3339(at: float) -> str:
    """Unix seconds as RFC 3339 in UTC (`2026-11-30T02:00:00Z`)."""
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
