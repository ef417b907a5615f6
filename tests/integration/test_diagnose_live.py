"""`kvscope diagnose --scrape` against a live `kvscope serve` whose tiny KV pool a burst of long
requests overruns: it must name kv_cache_exhaustion."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import httpx
import pytest

from kvscope.launcher import kvscope_server, running
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

        def burst() -> None:
            with httpx.Client(timeout=120) as client:
                while not stop.is_set():
                    threads = [
                        threading.Thread(
                            target=client.post,
                            args=(server.base_url + "/v1/completions",),
                            kwargs={
                                "json": {
                                    "model": SERVED_NAME,
                                    "prompt": [7] * 400,
                                    "max_tokens": 300,
                                    "ignore_eos": True,
                                }
                            },
                        )
                        for _ in range(24)
                    ]
                    for th in threads:
                        th.start()
                    for th in threads:
                        th.join()

        load = threading.Thread(target=burst, daemon=True)
        load.start()
        try:
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kvscope.cli",
                    "diagnose",
                    "--scrape",
                    server.base_url + "/metrics",
                    "--interval",
                    "4s",
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
        load.join(180)
