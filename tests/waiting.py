"""Synchronise by polling for the condition with a deadline, never by a fixed sleep: tests hold on
a busy 2-core machine, where how long anything takes is not known in advance."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float = 60.0, interval: float = 0.2, what: str = "") -> T:
    """The first truthy result of `check`, polled every `interval` until `timeout` seconds pass.

    Exceptions count as "not yet"; the last one is reported when time runs out.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if result:
                return result
            last = result
        except Exception as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what or 'true'} after {timeout:.0f} s (last: {last!r})")
        time.sleep(interval)


def holds(check: Callable[[], object], seconds: float, interval: float = 0.2, what: str = "") -> None:
    """`check` stays truthy for `seconds` (something that must not happen, watched for a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = check()
        assert result, f"{what or 'the condition'} stopped holding ({result!r})"
        time.sleep(interval)
