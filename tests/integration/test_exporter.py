"""`kvscope export --gpu emulated` scraping a live `kvscope serve`, scraped by a real Prometheus."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from drill import prometheus_server
from drill.launcher import ServerProcess, kvscope_exporter, kvscope_server, running
from kvscope import catalog
from kvscope.prometheus import PrometheusClient
from serving.demo_model import SERVED_NAME
from tests.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[ServerProcess]:
    """A kvscope serve of this module's own: the last test kills it."""
    server = kvscope_server(tmp_path_factory.mktemp("target") / "serve.log", extra_args=["--enforce-eager"])
    with running(server, ready_path="/ready", timeout=240) as ready:
        yield ready


@pytest.fixture(scope="module")
def exporter(target, tmp_path_factory) -> Iterator[ServerProcess]:
    args = (
        "--gpu",
        "emulated",
        "--emulated-gpus",
        "4",
        "--vllm",
        target.base_url + "/metrics",
        "--collect-interval",
        "1",
    )
    server = kvscope_exporter(tmp_path_factory.mktemp("export") / "export.log", *args)
    with running(server, ready_path="/-/healthy", timeout=60) as ready:
        yield ready


@pytest.fixture(scope="module")
def prom(exporter, tmp_path_factory) -> Iterator[PrometheusClient]:
    host = exporter.base_url.removeprefix("http://")
    server = prometheus_server.start(tmp_path_factory.mktemp("prometheus"), {"kvscope": [host]}, interval="1s")
    with running(server, ready_path="/-/ready", timeout=60) as ready, PrometheusClient(ready.base_url) as client:
        yield client


def test_prometheus_sees_vllm_and_gpu_series_on_one_endpoint(prom, target):
    eventually(lambda: prom.query(f"{catalog.TARGET_UP.name} == 1"))
    kv = eventually(lambda: prom.query(catalog.VLLM_KV_CACHE_USAGE.name))
    assert kv[0][0]["target"] == target.base_url + "/metrics"
    gpus = eventually(lambda: prom.query(f'{catalog.DCGM_GPU_UTIL.name}{{emulated="true"}}'))
    assert {labels["gpu"] for labels, _ in gpus} == {"0", "1", "2", "3"}
    collectors = prom.query(f"{catalog.EXPORTER_COLLECTOR_SUCCESS.name} == 1")
    assert {labels["collector"] for labels, _ in collectors} >= {
        "vllm",
        "emulated",
        "xid",
        "topology",
        "host",
    }


def test_emulated_gpus_get_busy_when_the_engine_does(prom, target):
    client = OpenAI(base_url=target.base_url + "/v1", api_key="x", timeout=60)
    deadline = time.monotonic() + 90
    busy = []
    while time.monotonic() < deadline and not busy:
        client.completions.create(
            model=SERVED_NAME, prompt="zaba " * 400, max_tokens=200, extra_body={"ignore_eos": True}
        )
        busy = prom.query(f'max_over_time({catalog.DCGM_GPU_UTIL.name}{{gpu="0"}}[30s]) > 50')
    assert busy, "GPU utilisation never followed the engine"


def test_injected_xid_79_shows_as_an_increase_on_that_gpu_only(prom, exporter):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvscope.cli",
            "export",
            "inject",
            "xid",
            "--gpu",
            "3",
            "--set",
            "xid=79",
            "--url",
            exporter.base_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    query = f'increase({catalog.GPU_XID_ERRORS.name}{{xid="79"}}[5m]) > 0'
    hits = eventually(lambda: prom.query(query))
    assert {labels["gpu"] for labels, _ in hits} == {"3"}
    listed = httpx.get(exporter.base_url + "/-/faults", timeout=10).json()["faults"]
    assert listed == [{"gpu": 3, "fault": "xid", "xid": 79}]


def test_a_bad_fault_gets_a_json_400(exporter):
    response = httpx.post(exporter.base_url + "/-/faults", json={"gpu": 0, "fault": "meltdown"}, timeout=10)
    assert response.status_code == 400 and "fault" in response.json()["error"]


def test_killing_the_vllm_target_flips_target_up_while_gpu_series_keep_flowing(prom, target):
    target.stop()
    eventually(lambda: prom.query(f"{catalog.TARGET_UP.name} == 0"), what="the target down")

    def gpus_fresh() -> set[str]:
        fresh = prom.query(f"time() - timestamp({catalog.DCGM_GPU_TEMP.name}) < 5")
        gpus = {labels["gpu"] for labels, _ in fresh}
        return gpus if gpus >= {"0", "1", "2"} else set()

    assert eventually(gpus_fresh, what="fresh GPU samples after the target died") >= {"0", "1", "2"}
    # the dead target's series go stale in Prometheus once the exporter stops serving them
    eventually(lambda: not prom.query(f"{catalog.VLLM_KV_CACHE_USAGE.name}"), what="the dead target's series gone")


def test_once_prints_a_single_scrape(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "kvscope.cli", "export", "--gpu", "none", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert catalog.HOST_MEMORY_AVAILABLE.name in result.stdout


def test_once_with_emulated_mig_writes_instances_and_the_chosen_host_label():
    result = subprocess.run(
        [sys.executable, "-m", "kvscope.cli", "export", "--gpu", "emulated", "--emulated-gpus", "1",
         "--emulated-mig", "3g.40gb,1g.10gb", "--hostname-label", "Hostname", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    used = [line for line in result.stdout.splitlines() if line.startswith(catalog.DCGM_FB_USED.name + "{")]
    assert len(used) == 3 and sum('GPU_I_PROFILE="1g.10gb",GPU_I_ID="2",Hostname=' in line for line in used) == 1
    assert catalog.DCGM_EXP_HEALTH.name in result.stdout and "hostname=" not in result.stdout


def test_an_explicit_backend_that_is_not_there_is_one_line_and_exit_69():
    result = subprocess.run(
        [sys.executable, "-m", "kvscope.cli", "export", "--gpu", "nvml", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 69
    assert result.stderr.strip().startswith("kvscope export: --gpu nvml: NVML unavailable")
    assert len(result.stderr.strip().splitlines()) == 1
