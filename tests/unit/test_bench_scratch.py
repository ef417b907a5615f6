"""A benchmark's folders: scratch gone at exit; servers' logs gone after a run that went well,
kept and named after one that failed, raised or was interrupted."""

from __future__ import annotations

import pytest

from bench.scratch import in_log_dir


@pytest.fixture(autouse=True)
def own_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again


def run_writing_a_log(status: int):
    def run(folder):
        (folder / "server.log").write_text("the server's last words\n")
        return status

    return run


def test_a_run_that_went_well_leaves_nothing(tmp_path, capsys):
    assert in_log_dir("kvscope-x-", run_writing_a_log(0)) == 0
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err == ""


def test_a_failed_run_keeps_its_logs_and_says_where(tmp_path, capsys):
    assert in_log_dir("kvscope-x-", run_writing_a_log(1)) == 1
    (kept,) = tmp_path.iterdir()
    assert (kept / "server.log").read_text() == "the server's last words\n"
    assert capsys.readouterr().err == f"the servers' logs are kept in {kept}\n"


@pytest.mark.parametrize("raised", [RuntimeError("no server came up"), KeyboardInterrupt()])
def test_a_run_that_raised_keeps_its_logs(tmp_path, capsys, raised):
    def run(folder):
        (folder / "server.log").write_text("traceback\n")
        raise raised

    with pytest.raises(type(raised)):
        in_log_dir("kvscope-x-", run)
    (kept,) = tmp_path.iterdir()
    assert (kept / "server.log").exists()
    assert str(kept) in capsys.readouterr().err
