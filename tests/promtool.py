"""promtool's rule unit tests, run as the suite runs them: one helper for every test that needs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from drill import prometheus_server


def rule_tests(folder: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """`promtool test rules FILES` in `folder`: the finished run (the caller asserts on it)."""
    return subprocess.run(
        [prometheus_server.binary("promtool"), "test", "rules", *files],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
