"""A server is ready only when the answer on its port is its own: a port given to a server can
be taken by another before the server binds it, and a neighbour's answer must be an error, never
read as the server's (CI once timed and backfilled against another worker's Prometheus)."""

from __future__ import annotations

import contextlib
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from drill.launcher import ServerFailedError, free_port, running, start_process
from tests.waiting import eventually

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

HTTP = "import http.server, sys; http.server.test(http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind='127.0.0.1')"


@contextlib.contextmanager
def _neighbour(port: int) -> Iterator[None]:
    """Another process's server (this test's own, in a thread) answering 200 on `port`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_server_ports_are_below_the_ephemeral_range_and_free():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1
    if low > 11000:
        assert all(10000 <= p < low for p in ports), ports


def test_a_server_that_answers_on_its_port_is_ready(tmp_path):
    port = free_port()
    server = start_process(
        "http", [sys.executable, "-c", HTTP, str(port)], f"http://127.0.0.1:{port}", tmp_path / "s.log"
    )
    with running(server, ready_path="/", timeout=120) as ready:
        assert ready.proc.poll() is None


def test_a_neighbours_answer_on_the_port_is_an_error_not_readiness(tmp_path):
    port = free_port()
    with _neighbour(port):
        # a server that will never bind: started late, it would find the port taken
        server = start_process(
            "late",
            [sys.executable, "-c", "import signal; signal.pause()"],
            f"http://127.0.0.1:{port}",
            tmp_path / "l.log",
        )
        taken = f"port {port} answers, but another process listens"
        with pytest.raises(ServerFailedError, match=taken), running(server, ready_path="/", timeout=60):
            pass
    assert server.proc.poll() is not None  # stopped all the same


def test_a_folder_made_for_a_server_goes_with_it_and_it_sees_its_env(tmp_path):
    scratch = tmp_path / "rpc"
    scratch.mkdir()
    said = tmp_path / "said"
    code = (
        f"import os, pathlib, signal; pathlib.Path({str(said)!r}).write_text(os.environ['KVSCOPE_T']); signal.pause()"
    )
    server = start_process(
        "env", [sys.executable, "-c", code], "http://127.0.0.1:1", tmp_path / "e.log", {"KVSCOPE_T": "x"}, scratch
    )
    try:
        eventually(said.exists, timeout=60, what="the server started")
        assert said.read_text() == "x" and scratch.is_dir()
    finally:
        server.stop()
    assert not scratch.exists()
