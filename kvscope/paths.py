"""Where generators write: the folder the user names, else the current directory, or the
checkout's own folders when a command runs inside a kvscope checkout. Never the installed
package (site-packages)."""

from __future__ import annotations

import tomllib
from pathlib import Path


def checkout(cwd: Path | None = None) -> Path | None:
    """The root of the kvscope checkout that `cwd` is in (its pyproject names kvscope), or None."""
    start = (cwd or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        project = folder / "pyproject.toml"
        if not project.is_file():
            continue
        try:
            name = tomllib.loads(project.read_text()).get("project", {}).get("name")
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            return None
        return folder if name == "kvscope" and (folder / "kvscope" / "catalog.py").is_file() else None
    return None


def output(out: Path | None, checkout_folder: str, cwd: Path | None = None) -> Path:
    """`out` if given; else `checkout_folder` of the checkout we run in; else the current directory."""
    if out is not None:
        return out
    root = checkout(cwd)
    return root / checkout_folder if root is not None else (cwd or Path.cwd())
