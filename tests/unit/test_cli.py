"""`kvscope` lists the architecture's subcommands; usage errors exit 64."""

import subprocess
import sys
from pathlib import Path

import pytest

from kvscope import exitcodes
from kvscope.cli import main

SUBCOMMANDS = ("serve", "export", "diagnose", "plan", "dashboards", "alerts", "drill")


def test_console_script_help_lists_every_subcommand():
    script = Path(sys.executable).parent / "kvscope"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert f" {name} " in result.stdout, name


def test_unknown_subcommand_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == exitcodes.USAGE
    assert "No such command" in capsys.readouterr().err


def test_unknown_option_is_a_usage_error(capsys):
    assert main(["demo-model", "--no-such-option"]) == exitcodes.USAGE
    assert "No such option" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["demo-model", "--help"], ["dashboards", "--help"]])
def test_help_exits_zero(argv):
    assert main(argv) == exitcodes.OK


def test_demo_model_prints_the_generated_folder(tmp_path, capsys):
    assert main(["demo-model", "--cache-dir", str(tmp_path)]) == exitcodes.OK
    folder = Path(capsys.readouterr().out.strip())
    assert folder.parent == tmp_path / "models"
    assert (folder / "config.json").is_file()
