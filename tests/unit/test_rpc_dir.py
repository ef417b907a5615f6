"""vLLM's IPC sockets go to a directory `kvscope serve` owns and removes, unless the user set one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from serving.rpc_dir import VARIABLE, private_rpc_dir


def test_the_sockets_get_a_directory_of_their_own_removed_at_exit(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    with private_rpc_dir() as path:
        assert os.environ[VARIABLE] == path and Path(path).is_dir()
        (Path(path) / "6f1c0d1e-socket").write_text("")  # what vLLM leaves there
    assert not Path(path).exists() and VARIABLE not in os.environ


def test_it_is_removed_when_the_server_fails_too(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    with pytest.raises(OSError), private_rpc_dir() as path:
        raise OSError("address in use")
    assert not Path(path).exists()


def test_a_directory_the_user_chose_is_used_and_kept(monkeypatch, tmp_path):
    monkeypatch.setenv(VARIABLE, str(tmp_path))
    (tmp_path / "theirs").write_text("")
    with private_rpc_dir() as path:
        assert path == str(tmp_path)
    assert (tmp_path / "theirs").exists() and os.environ[VARIABLE] == str(tmp_path)
