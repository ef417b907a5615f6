"""Nothing outlives its drill: every server starts on a leash (drill/leash.py) that stops the
server's whole process group when the process that started it dies, SIGKILL included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.waiting import eventually

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A server that starts a child of its own (as vLLM's API server starts its engine core) and
# ignores nothing: it only sleeps.
SERVER = textwrap.dedent("""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)
""")

# A stand-in for a drill: starts two servers through the launcher, says their pids, then waits.
DRILL = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from drill.launcher import start_process
    logs = Path(sys.argv[1])
    servers = [start_process(f"s{i}", [sys.executable, "-c", sys.argv[2]], "http://x", logs / f"s{i}.log")
               for i in range(2)]
    pids = []
    for s in servers:
        pids.append(s.proc.pid)
        pids.append(s.pid)
    print(json.dumps(pids), flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _family(pids: list[int]) -> set[int]:
    """The processes and all their descendants, now."""
    out = set()
    for pid in pids:
        try:
            process = psutil.Process(pid)
            out |= {pid, *(c.pid for c in process.children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    return out


def test_a_drill_killed_with_sigkill_leaves_no_process_behind(tmp_path: Path):
    root = Path(__file__).resolve().parents[2]
    drill = subprocess.Popen(
        [sys.executable, "-c", DRILL, str(tmp_path), SERVER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert drill.stdout is not None
    pids = json.loads(drill.stdout.readline())
    eventually(lambda: len(_family(pids)) >= 6, timeout=60, what="two leashes, two servers, two grandchildren")
    family = _family(pids)
    drill.send_signal(signal.SIGKILL)
    drill.wait(30)
    eventually(lambda: not [p for p in family if _alive(p)], timeout=60, what="every process of the drill gone")


def test_the_leash_passes_the_exit_code_through(tmp_path: Path):
    from drill.launcher import start_process

    server = start_process("exit", [sys.executable, "-c", "raise SystemExit(3)"], "http://x", tmp_path / "x.log")
    assert server.proc.wait(60) == 3


def test_a_leash_whose_command_cannot_start_says_so(tmp_path: Path):
    from drill.launcher import start_process

    server = start_process("missing", [str(tmp_path / "no-such-program")], "http://x", tmp_path / "x.log")
    assert server.proc.wait(60) == 127
    assert "cannot start" in (tmp_path / "x.log").read_text()


def test_stopping_a_server_stops_its_children_too(tmp_path: Path):
    from drill.launcher import start_process

    server = start_process("s", [sys.executable, "-c", SERVER], "http://x", tmp_path / "x.log")
    eventually(lambda: len(_family([server.proc.pid])) >= 3, timeout=60, what="leash, server and its child")
    family = _family([server.proc.pid])
    server.stop(grace=5)
    eventually(lambda: not [p for p in family if _alive(p)], timeout=30, what="the group gone")
    assert not [p for p in family if _alive(p)]  # leash, server and its child
