"""Where a diagnosis gets its data: a Prometheus (or compatible) API, live /metrics pages, or a
saved bundle. Sources fetch; they never decide."""

from __future__ import annotations


class SourceError(RuntimeError):
    """The source cannot be used at all (unreachable, refused, unreadable): exit 3."""
