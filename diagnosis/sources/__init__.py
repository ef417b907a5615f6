"""Where a diagnosis gets its data: a Prometheus (or compatible) API, live /metrics pages, or a
saved bundle. Sources fetch; they never decide."""

from __future__ import annotations

import re
from datetime import UTC, datetime


class SourceError(RuntimeError):
    """The source cannot be used at all (unreachable, refused, unreadable): exit 3."""


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """'15m', '1h30m', '90s' -> seconds. ValueError on anything else."""
    text = text.strip()
    if not text or _DURATION.sub("", text):
        raise ValueError(f"not a duration: {text!r} (use e.g. 15m, 1h, 90s)")
    seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
    if seconds <= 0:
        raise ValueError(f"the duration must be positive, not {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration (whole seconds)."""
    s = max(1, round(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def parse_time(text: str | None) -> float:
    """RFC 3339 or unix seconds -> unix seconds; None -> now."""
    if text is None:
        return datetime.now(UTC).timestamp()
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not a time: {text!r} (use RFC 3339, e.g. 2026-11-30T02:00:00Z, or unix seconds)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
