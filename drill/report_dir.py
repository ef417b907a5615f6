"""The drill's report folder: it writes only into a folder it created, or one it wrote before,
and on a rerun removes only what its previous run wrote (listed in a marker file). A folder
that holds anything else is refused: the drill never deletes what it did not create."""

from __future__ import annotations

import shutil
from pathlib import Path

MARKER = ".kvscope-drill"


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
        if self.path.is_dir() and any(self.path.iterdir()) and not self.marker.is_file():
            raise ReportDirRefused(
                f"--report {self.path} holds files kvscope drill did not write; choose an empty or new folder"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        for entry in self.entries():
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
