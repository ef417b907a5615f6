"""`kvscope diagnose --scrape` against a live `kvscope serve` whose tiny KV pool a burst of long
requests overruns: it must name kv_cache_exhaustion."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

from drill.launcher import kvscope_server, running
from kvscope import catalog, promtext
from serving.demo_model import SERVED_NAME

pytestmark = pytest.mark.integration


def test_a_burst_of_long_requests_on_a_tiny_pool_is_kv_cache_exhaustion(tmp_path):
    server = kvscope_server(
        tmp_path / "serve.log",
        extra_args=[
            "--enforce-eager",
            "--num-gpu-blocks-override",
            "80",
            "--block-size",
            "32",
            "--max-model-len",
            "2048",
        ],
    )
    with running(server, ready_path="/ready", timeout=240):
        stop = threading.Event()

        def worker() -> None:  # one of 24 clients, each with a long request always in flight
            with httpx.Client(timeout=120) as client:
                while not stop.is_set():
                    client.post(
                        server.base_url + "/v1/completions",
                        json={"model": SERVED_NAME, "prompt": [7] * 400, "max_tokens": 300, "ignore_eos": True},
                    )

        workers = [threading.Thread(target=worker, daemon=True) for _ in range(24)]
        for w in workers:
            w.start()
        try:
            # diagnose once the pool is overrun, not while the first prefills are still running
            assert preemptions(server.base_url, at_least=1, within=60), "the load never overran the pool"
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kvscope.cli",
                    "diagnose",
                    "--scrape",
                    server.base_url + "/metrics",
                    "--interval",
                    "6s",
                    "--format",
                    "json",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            stop.set()
        report = json.loads(result.stdout)
        assert report["bottleneck"] == "kv_cache_exhaustion", report["summary"]
        assert result.returncode == 2
        steps = {s["name"]: s["status"] for s in report["steps"]}
        assert steps["kv_cache"] == "fail" and steps["preemption"] == "fail"
        for w in workers:
            w.join(180)


def preemptions(base_url: str, at_least: float, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        page = promtext.parse(httpx.get(base_url + "/metrics", timeout=10).text)
        if promtext.total(page, catalog.VLLM_NUM_PREEMPTIONS.name) >= at_least:
            return True
        time.sleep(0.5)
    return False
