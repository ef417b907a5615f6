"""promtool's rule unit tests, run as the suite runs them: one helper for every test that needs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from drill import prometheus_server


def rule_tests(folder: Path, *files: str) -> None:
    """`promtool test rules FILES` in `folder`; fails the calling test with promtool's report."""
    result = subprocess.run(
        [prometheus_server.binary("promtool"), "test", "rules", *files],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
