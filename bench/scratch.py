"""Folders a benchmark makes for itself under the system's temporary directory.

`scratch_dir`: scratch (a backfilled TSDB, its blocks) removed when the benchmark exits; what it
measured is printed, nothing in the folder is worth keeping. `in_log_dir`: the servers' logs of a
run, removed when the run ends well, kept and named when it fails, since they say why.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A new folder under the system's temporary directory, removed at the interpreter's exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def in_log_dir(prefix: str, run: Callable[[Path], int]) -> int:
    """`run(folder)` in a new folder, its exit status returned: the folder is removed when it is 0,
    kept and named on stderr when it is not or `run` raised (or was interrupted)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    status = 1
    try:
        status = run(path)
    finally:
        if status == 0:
            shutil.rmtree(path, ignore_errors=True)
        else:
            print(f"the servers' logs are kept in {path}", file=sys.stderr)
    return status
