"""The layered house is a contract: the ground imports no component, components import only the
ground and themselves, the drill is the top floor, only the CLI root mounts sub-apps. Checked
over every import statement, including those inside functions (scripts/check_layers.py)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_layers", ROOT / "scripts" / "check_layers.py")
assert spec is not None and spec.loader is not None
layers = importlib.util.module_from_spec(spec)
sys.modules["check_layers"] = layers
spec.loader.exec_module(layers)


def test_the_project_keeps_its_layers():
    assert [str(v) for v in layers.check(ROOT)] == []


def test_a_component_importing_another_inside_a_function_is_caught(tmp_path):
    for package in layers.PROJECT:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "diagnosis" / "checks.py").write_text(
        textwrap.dedent(
            """
            def advice():
                from serving.planner import plan  # a component reaching into another
                return plan
            """
        )
    )
    (tmp_path / "kvscope" / "catalog.py").write_text("from drill import run\n")  # the ground reaching up
    (tmp_path / "drill" / "run.py").write_text("from serving import cli\nfrom kvscope.cli import main\n")
    (tmp_path / "kvscope" / "cli.py").write_text(
        "from serving import cli\nfrom serving.server import run\nimport exporter\n"
    )
    (tmp_path / "exporter" / "fixtures.py").write_text("from tests.fakes import nvml\n")  # the product reaching tests
    found = {(v.importer, v.imported) for v in layers.check(tmp_path)}
    assert ("diagnosis.checks", "serving.planner.plan") in found
    assert ("kvscope.catalog", "drill.run") in found
    assert ("drill.run", "kvscope.cli.main") in found  # nothing imports the composition root
    assert ("kvscope.cli", "serving.server.run") in found  # the root mounts sub-apps, nothing else
    assert ("kvscope.cli", "exporter") in found
    assert ("exporter.fixtures", "tests.fakes.nvml") in found
    assert not any(importer == "drill.run" and imported.startswith("serving") for importer, imported in found)
    assert ("kvscope.cli", "serving.cli") not in found
