"""A working folder for a benchmark's own scratch (a backfilled TSDB, its blocks), removed when
the benchmark exits: what it measured is printed, nothing in the folder is worth keeping."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A new folder under the system's temporary directory, removed at the interpreter's exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
