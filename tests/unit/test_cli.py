"""`kvscope` lists the architecture's subcommands; usage errors exit 64."""

import subprocess
import sys
from pathlib import Path

import pytest

from kvscope import exitcodes
from kvscope.cli import main

SUBCOMMANDS = ("serve", "export", "diagnose", "plan", "dashboards", "alerts", "drill", "config", "demo-model")


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


@pytest.mark.parametrize(
    ("argv", "files"),
    [
        (
            ["alerts", "build"],
            {
                "kvscope-rules.yaml",
                "kvscope-rules.test.yaml",
                "kvscope-rules.slow-burn.test.yaml",
                "prometheus-rule.yaml",
                "runbooks.md",
            },
        ),
        (
            ["dashboards", "build"],
            {"llm-serving-overview.json", "vllm-engines.json", "gpu-fleet.json", "triage.json", "tenants-qos.json"},
        ),
    ],
)
def test_generators_write_into_the_current_folder_outside_a_checkout(tmp_path, monkeypatch, capsys, argv, files):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == exitcodes.OK
    assert {p.name for p in tmp_path.iterdir()} == files
    assert all(str(tmp_path) in line for line in capsys.readouterr().out.splitlines())


def test_generators_write_where_they_are_told(tmp_path, capsys):
    out = tmp_path / "rules"
    assert main(["alerts", "build", "--out", str(out)]) == exitcodes.OK
    assert (out / "kvscope-rules.yaml").is_file() and (out / "runbooks.md").is_file()
    assert "site-packages" not in capsys.readouterr().out


def test_a_generator_that_cannot_write_says_so_in_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["dashboards", "build", "--out", str(blocker / "sub")]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip()
    assert "cannot write" in err and len(err.splitlines()) == 1
