"""The whole observability path: `kvscope serve` -> `kvscope export --gpu emulated` -> a real
Prometheus loaded with the generated rules. After a short load every query of the overview
and GPU fleet dashboards returns data, and injected faults fire their alerts: with the GPU
series in dcgm-exporter 4.8's names and in 4.10's (renamed, in base units)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from alerts import build as alert_build
from dashboards import build as dash_build
from drill import prometheus_server
from drill.launcher import ServerProcess, free_port, kvscope_exporter, running
from kvscope.prometheus import PrometheusClient
from serving.demo_model import SERVED_NAME
from tests.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["4.8", "4.10"], ids=lambda shape: f"dcgm-{shape}")
def stack(kvscope, tmp_path_factory, request) -> Iterator[tuple[ServerProcess, PrometheusClient]]:
    work = tmp_path_factory.mktemp("stack")
    port = free_port()
    args = (
        "--gpu",
        "emulated",
        "--emulated-gpus",
        "2",
        "--vllm",
        kvscope.base_url + "/metrics",
        "--collect-interval",
        "1",
        "--dcgm-names",
        request.param,
    )
    exporter = kvscope_exporter(work / "export.log", *args, port=port)
    rules = alert_build.ALERTS_DIR / alert_build.RULES_FILE
    with running(exporter, ready_path="/-/healthy", timeout=60):
        prom = prometheus_server.start(
            work / "prometheus", {"kvscope": [f"127.0.0.1:{port}"]}, interval="1s", rule_files=[rules]
        )
        with running(prom, ready_path="/-/ready", timeout=60):
            api = PrometheusClient(prom.base_url)
            api.wait_for_scrapes("kvscope")
            yield exporter, api


def load(kvscope) -> None:
    client = OpenAI(base_url=kvscope.base_url + "/v1", api_key="sk-acme", timeout=60, max_retries=0)
    for i in range(12):
        client.completions.create(model=SERVED_NAME, prompt=f"zaba kelo {i} " * 60, max_tokens=24)
    httpx.post(
        kvscope.base_url + "/v1/completions",
        json={"model": SERVED_NAME, "prompt": [7] * 17000},
        headers={"authorization": "Bearer sk-acme"},
        timeout=60,
    )  # one rejection for the gateway panels


# panels about MIG instances: this stack's emulated GPUs are whole cards; they are queried
# against an exporter of MIG-partitioned GPUs below
MIG_ONLY = ("Memory used per MIG instance", "MIG layout")


def queries(board: str) -> list[tuple[str, str]]:
    data = json.loads(dash_build.render(board))
    out = []
    for p in data["panels"]:
        for target in p.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "30s").replace("$__range", "10m")
            out.append((p["title"], re.sub(r"\$\{?(namespace|instance|model_name|gpu|hostname)\}?", ".*", expr)))
    return out


def test_every_overview_and_gpu_panel_query_returns_data(stack, kvscope):
    exporter, api = stack
    load(kvscope)
    # An application XID (13): the GPU keeps answering, so dcgm-exporter's sticky series shows it.
    for fault in ({"gpu": 0, "fault": "thermal", "temp_c": 93}, {"gpu": 0, "fault": "xid", "xid": 13}):
        assert httpx.post(exporter.base_url + "/-/faults", json=fault, timeout=10).status_code == 201

    def empty_panels() -> list[str]:
        load(kvscope)  # a fresh round of requests in the panels' windows
        return [
            f"{board} / {title}: {expr[:160]}"
            for board in ("llm-serving-overview", "gpu-fleet")
            for title, expr in queries(board)
            if title not in MIG_ONLY and not api.query(expr)
        ]

    deadline, empty = time.monotonic() + 120, empty_panels()
    while empty and time.monotonic() < deadline:  # scrapes and rule evaluations catch up
        empty = empty_panels()
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_an_injected_xid_fires_its_alert(stack):
    exporter, api = stack
    assert (
        httpx.post(exporter.base_url + "/-/faults", json={"gpu": 1, "fault": "xid", "xid": 79}, timeout=10).status_code
        == 201
    )
    firing = eventually(
        lambda: [a for a in api.alerts() if a["labels"]["alertname"] == "GPUXidDrainNode" and a["state"] == "firing"],
        timeout=120,
        what="GPUXidDrainNode firing",
    )
    assert firing[0]["labels"]["gpu"] == "1" and firing[0]["labels"]["xid"] == "79"
    assert "kvscope diagnose --prometheus" in firing[0]["annotations"]["description"]
    assert firing[0]["annotations"]["runbook_url"].endswith("#gpuxiddrainnode")


@pytest.mark.parametrize("shape", ["4.8", "4.10"])
def test_the_mig_panels_return_data_on_mig_partitioned_gpus(tmp_path, shape):
    port = free_port()
    args = ("--gpu", "emulated", "--emulated-gpus", "1", "--emulated-mig", "3g.40gb,1g.10gb")
    exporter = kvscope_exporter(
        tmp_path / "export.log", *args, "--collect-interval", "1", "--dcgm-names", shape, port=port
    )
    with running(exporter, ready_path="/-/healthy", timeout=60):
        prom = prometheus_server.start(tmp_path / "prometheus", {"kvscope": [f"127.0.0.1:{port}"]}, interval="1s")
        with running(prom, ready_path="/-/ready", timeout=60):
            api = PrometheusClient(prom.base_url)
            api.wait_for_scrapes("kvscope")
            mig = [(title, expr) for title, expr in queries("gpu-fleet") if title in MIG_ONLY]
            assert {title for title, _ in mig} == set(MIG_ONLY)

            def results() -> dict[str, list]:
                return {title: api.query(expr) for title, expr in mig}

            answered = eventually(lambda: (r := results()) and all(r.values()) and r, 60, what="MIG panels' data")
            profiles = {labels.get("GPU_I_PROFILE") for rows in answered.values() for labels, _ in rows}
            assert {"3g.40gb", "1g.10gb"} <= profiles, answered
            api.close()
