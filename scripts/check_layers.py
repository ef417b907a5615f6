"""The layering contract (docs/architecture: the ground, components side by side, drill and the
CLI on top), checked over every import statement, including those inside functions.

- `kvscope` (the ground) imports no component; only `kvscope.cli`, the composition root, imports
  the components' `cli` modules (and nothing else of theirs).
- each component (serving, exporter, diagnosis, alerts, dashboards) imports the ground and itself;
- `drill` (the top floor) imports the ground and any component, never `kvscope.cli`.

`python scripts/check_layers.py` prints each violation as `file:line: A imports B` and exits 1
when there is one; `make check` runs it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GROUND = "kvscope"
COMPONENTS = ("serving", "exporter", "diagnosis", "alerts", "dashboards")
TOP = "drill"
ROOT = "kvscope.cli"
PROJECT = (GROUND, *COMPONENTS, TOP)
OUTSIDE = ("tests", "bench", "scripts")  # the repository's other folders: never imported by the product


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    imported: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in the tree, relative ones resolved;
    `from pkg import name` counts as importing `pkg.name` (a submodule or a member of pkg)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"


def _top(name: str) -> str:
    return name.split(".")[0]


def allowed(importer: str, imported: str) -> bool:
    """Whether module `importer` may import module `imported` (both dotted names)."""
    src, dst = _top(importer), _top(imported)
    if dst in OUTSIDE:
        return src not in PROJECT  # the product never imports tests, benchmarks or scripts
    if dst not in PROJECT:
        return True
    if imported == ROOT or imported.startswith(ROOT + "."):
        return importer == ROOT  # nothing imports the composition root
    if importer == ROOT:
        # the root mounts the components' (and the drill's) sub-apps and reads the ground
        return dst == GROUND or imported == f"{dst}.cli" or imported.startswith(f"{dst}.cli.")
    if src == GROUND:
        return dst == GROUND
    if src in COMPONENTS:
        return dst in (GROUND, src)
    return True  # the drill (top floor), tests, bench, scripts


def check(root: Path) -> list[Violation]:
    found = []
    for package in PROJECT:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            tree = ast.parse(path.read_text(), str(path))
            for line, imported in imports(tree, module, path.name == "__init__.py"):
                if not allowed(module, imported):
                    found.append(Violation(path.relative_to(root), line, module, imported))
    return found


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    violations = check(root)
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} import(s) break the layering contract (scripts/check_layers.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
