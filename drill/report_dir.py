"""The drill's report folder: it writes only into a folder it created, or one it wrote before,
and on a rerun removes only what its previous run wrote (listed in a marker file). A folder
that holds anything else is refused: the drill never deletes what it did not create."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

MARKER = ".kvscope-drill"
# What a drill writes into its folder. A folder without a marker (a report written before the
# marker existed) is a previous drill's only if it holds nothing else and its summary and results
# are a drill's.
_OWN = re.compile(r"summary\.md|results\.json|logs|(default|tuned)\.png|requests-(default|tuned)\.csv")


def _an_earlier_drills(folder: Path) -> bool:
    names = [p.name for p in folder.iterdir()]
    if not names or not all(_OWN.fullmatch(n) for n in names) or "summary.md" not in names:
        return False
    try:
        results = json.loads((folder / "results.json").read_text())
        summary = (folder / "summary.md").read_text(errors="replace")
    except (OSError, ValueError):
        return False
    logs = folder / "logs"
    layout = not logs.exists() or {p.name for p in logs.iterdir()} <= {"kvscope-rules.drill.yaml", "default", "tuned"}
    return isinstance(results, dict) and "scenario" in results and summary.startswith("# kvscope drill") and layout


class ReportDirRefused(ValueError):  # noqa: N818 - the user's folder, refused
    """The folder holds files kvscope drill did not write (one line)."""


class ReportDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.marker = path / MARKER

    def claim(self) -> None:
        """Make the folder ours for this run: create it, or clean what our previous run wrote."""
        if self.path.exists() and not self.path.is_dir():
            raise ReportDirRefused(f"--report {self.path} is a file, not a folder")
        previous: list[str] = []
        if self.path.is_dir() and not self.marker.is_file() and any(self.path.iterdir()):
            if not _an_earlier_drills(self.path):
                raise ReportDirRefused(
                    f"--report {self.path} holds files kvscope drill did not write; choose an empty or new folder"
                )
            previous = [p.name for p in self.path.iterdir()]
        self.path.mkdir(parents=True, exist_ok=True)
        for entry in [*self.entries(), *previous]:
            target = self.path / entry
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
        self.marker.write_text("")

    def entries(self) -> list[str]:
        """What the drill wrote here (relative paths), as its marker lists them."""
        if not self.marker.is_file():
            return []
        lines = [line.strip() for line in self.marker.read_text().splitlines()]
        # only names inside the folder: a damaged marker cannot point outside it
        return [e for e in lines if e and not Path(e).is_absolute() and ".." not in Path(e).parts]

    def track(self, relative: str) -> Path:
        """Record that the drill writes `relative` (a file or a folder it creates whole)."""
        if relative not in self.entries():
            with self.marker.open("a") as f:
                f.write(relative + "\n")
        return self.path / relative
