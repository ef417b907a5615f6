"""`python -m drill.leash PARENT_PID -- COMMAND...`: run COMMAND so that it cannot outlive the
process that started it.

The launcher starts every server through this leash, as the leader of a process group of its
own. The leash asks Linux for a signal when its parent dies (PR_SET_PDEATHSIG) and also watches
its parent id; when the parent is gone (a drill killed with SIGKILL, a test runner that timed
out, a crash), it stops the whole group (SIGTERM, then SIGKILL after a grace period), so vLLM's
engine core and workers, which vLLM starts as children of the API server, go too. The command
itself gets a parent-death signal as well, in case the leash is killed on its own. Standard
library only: it runs before anything else is imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
GRACE = 10.0  # seconds between SIGTERM and SIGKILL for the group, once the parent is gone
STOP_GRACE = 30.0  # ... after a SIGTERM to the group (the launcher's own SIGKILL comes first)
WATCH = 0.5  # seconds between looks at the parent id


def set_parent_death_signal(sig: int) -> bool:
    """Ask for `sig` when the parent thread exits (Linux only; False where it cannot be had)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _child_setup() -> None:
    set_parent_death_signal(signal.SIGTERM)


def stop_group(grace: float = GRACE) -> None:
    """SIGTERM this process's group but itself, then SIGKILL whatever is left after `grace`."""
    group = os.getpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _others_in_group(group):
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)
    for pid in _others_in_group(group):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _others_in_group(group: int) -> list[int]:
    """The processes other than this one still in `group`, zombies left out (from /proc)."""
    me, found = os.getpid(), list[int]()
    try:
        entries = os.listdir("/proc")  # noqa: PTH208 (stdlib only, a hot loop)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:  # noqa: PTH123
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command: state, ppid, pgrp, ...; a zombie holds nothing
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != b"Z":
            found.append(int(entry))
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m drill.leash PARENT_PID -- COMMAND [ARG...]", file=sys.stderr)
        return 64
    parent, command = int(argv[0]), argv[2:]
    orphaned = False

    def on_parent_death(signum: int, frame: object) -> None:
        nonlocal orphaned
        # the signal also comes when only the thread that started the leash ends: check the process
        orphaned = orphaned or os.getppid() != parent

    signal.signal(signal.SIGUSR1, on_parent_death)
    set_parent_death_signal(signal.SIGUSR1)
    if os.getppid() != parent:  # it died before the signal was asked for
        return 1
    # SIGTERM/SIGINT reach the whole group (the launcher signals the group): the leash waits for
    # the command to act on it, and makes sure of it if it does not within the grace period
    stopping: list[float] = []
    signal.signal(signal.SIGTERM, lambda s, f: stopping.append(time.monotonic()))
    signal.signal(signal.SIGINT, lambda s, f: stopping.append(time.monotonic()))
    try:
        child = subprocess.Popen(command, preexec_fn=_child_setup)  # only a prctl between fork and exec
    except OSError as exc:
        print(f"drill.leash: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = child.wait(WATCH)
            if _others_in_group(os.getpgrp()):  # the command's own children outlived it
                stop_group(grace=2.0)
            return code if code >= 0 else 128 - code
        if orphaned or os.getppid() != parent:
            stop_group()
            return 137
        if stopping and time.monotonic() - stopping[0] > STOP_GRACE:
            stop_group(grace=1.0)
            return 137


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
