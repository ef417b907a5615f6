"""A real redis-server (Debian's) for the shared-quota tests: on a free port, in a temp dir, no
persistence; started and stopped by its PID. Tests that need it skip when it is not installed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from drill.launcher import DebianPackageMissing, debian_binary, free_port
from tests.waiting import eventually

try:
    REDIS_SERVER: str | None = debian_binary(["redis-server"], "redis-server")
except DebianPackageMissing:
    REDIS_SERVER = None


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))  # up, with or without a password


@dataclass
class RedisServer:
    """One redis-server process; `stop` and `start` again keep the port (an outage and its end)."""

    workdir: Path
    port: int = field(default_factory=free_port)
    password: str | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert REDIS_SERVER is not None
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.workdir), "--daemonize", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        with (self.workdir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            eventually(lambda: self.proc is not None and self.proc.poll() is None and _answers(self.port), 30, 0.05,
                       "redis-server answering PING")  # fmt: skip
        except BaseException:
            self.stop()  # never leave a server behind that the test cannot reach
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)  # an outage, not a shutdown: no final save either
            self.proc.wait(10)
        self.proc = None


@contextlib.contextmanager
def redis_server(workdir: Path, password: str | None = None) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisServer(workdir, password=password).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung Redis); yields the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
