"""The scenario library, backfilled into a real Prometheus (promtool tsdb create-blocks-from
openmetrics) and diagnosed at a past time: every vocabulary id is named, with only the faulty
instance or GPU as affected; healthy traps stay healthy. A subset also runs through --scrape
(live pages) and --bundle (saved evidence)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from diagnosis.findings import VOCABULARY
from diagnosis.measures import MEASURES
from diagnosis.run import Request, run
from diagnosis.sources.scrape import ScrapeSource
from diagnosis.verdict import diagnose
from drill.launcher import running
from kvscope import exitcodes
from kvscope.promql import Selector
from tests.fakes.pages import PageServer
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics, page
from tests.scenarios.library import DIAGNOSE_AT, WINDOW, Scenario, scenarios
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
SCENARIOS = scenarios()


def affected_names(diagnosis) -> set[str]:
    return {a.get("pod") or a.get("Hostname") for a in diagnosis.affected}


def expected_names(scenario: Scenario) -> set[str]:
    if scenario.affected or scenario.expected in ("healthy", "insufficient_data"):
        return scenario.affected
    fleet_wide = {i.name for i in scenario.instances}
    if scenario.expected == "gpu_underutilized":
        return {i.gpu_labels["Hostname"] for i in scenario.instances}
    return fleet_wide


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Iterator[tuple[str, float]]:
    """A Prometheus holding the whole library, one `scenario` label each; (url, start time)."""
    work = tmp_path_factory.mktemp("scenarios")
    start = time.time() - 62 * 60
    sims = [Simulation(s.instances, {"scenario": s.name}, s.kvscope_extras) for s in SCENARIOS]
    with backfilled(work, openmetrics(sims, start, 60)) as ready:
        yield ready.base_url, start


def test_the_library_covers_the_vocabulary_but_what_needs_replicas_or_new_counters():
    # these need data-parallel engines, replicas or vLLM 0.32's counters: the reality splits have them
    later = {"load_imbalance", "engine_stall", "spec_decode_inefficient", "kv_transfer_failure"}
    assert {s.expected for s in SCENARIOS} == set(VOCABULARY) - later


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario_is_diagnosed_with_its_bottleneck_and_affected(library, scenario):
    url, start = library
    result = run(
        Request(
            prometheus=url,
            at=start + DIAGNOSE_AT * 60,
            window=900,
            selector=Selector.of(scenario=scenario.name),
        )
    )
    assert result.bottleneck == scenario.expected, result.summary
    assert affected_names(result) == expected_names(scenario)
    assert [s.name for s in result.steps] == [
        "kv_cache",
        "queue",
        "gpu_memory_utilization",
        "preemption",
        "kernels",
    ]
    if scenario.expected not in ("healthy", "insufficient_data"):
        primary = result.findings[0]
        assert primary.evidence and primary.remediation and 0 < primary.confidence <= 1


def test_the_cli_prints_the_contract_json_and_exits_by_severity(library):
    url, start = library
    at = str(start + DIAGNOSE_AT * 60)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvscope.cli",
            "diagnose",
            "--prometheus",
            url,
            "--at",
            at,
            "--window",
            WINDOW,
            "--selector",
            '{scenario="kv-avalanche"}',
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == exitcodes.CRITICAL, out.stderr
    report = json.loads(out.stdout)
    assert report["schema"] == "kvscope.diagnosis/v1" and report["bottleneck"] == "kv_cache_exhaustion"
    assert report["window"] == "15m" and report["at"].endswith("Z")
    assert {"step", "name", "status", "detail"} <= set(report["steps"][0])
    finding = report["findings"][0]
    assert {
        "id",
        "severity",
        "confidence",
        "summary",
        "affected",
        "evidence",
        "remediation",
    } <= set(finding)
    assert {"query", "value", "threshold", "labels"} <= set(finding["evidence"][0])
    assert report["affected"] == [
        {"namespace": "prod", "pod": "vllm-kv-avalanche-2", "instance": "vllm-kv-avalanche-2:8000"}
    ]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("healthy", exitcodes.OK),
        ("saturation", exitcodes.WARNING),
        ("no-vllm", exitcodes.OK),
        ("nothing", exitcodes.UNDIAGNOSABLE),
        ("idle", exitcodes.OK),
    ],
)
def test_exit_codes(library, name, code):
    url, start = library
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvscope.cli",
            "diagnose",
            "--prometheus",
            url,
            "--at",
            str(start + DIAGNOSE_AT * 60),
            "--window",
            WINDOW,
            "--selector",
            f'{{scenario="{name}"}}',
            "--format",
            "markdown",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == code, out.stdout + out.stderr
    assert out.stdout.startswith("### kvscope diagnosis:")


def test_missing_series_name_what_is_missing(library):
    url, start = library
    result = run(
        Request(prometheus=url, at=start + DIAGNOSE_AT * 60, window=900, selector=Selector.of(scenario="nothing"))
    )
    assert result.bottleneck == "insufficient_data" and result.exit_code == exitcodes.UNDIAGNOSABLE
    assert any("vllm:kv_cache_usage_perc" in m for m in result.missing)


def test_an_empty_prometheus_is_undiagnosable(library):
    url, _ = library
    result = run(Request(prometheus=url, at=time.time() - 30 * 86400, window=900))
    assert result.bottleneck == "insufficient_data"


@pytest.mark.parametrize("name", ["kv-avalanche", "xid-79", "healthy", "prefill-hol"])
def test_a_saved_bundle_gives_the_same_verdict_offline(library, tmp_path, name):
    url, start = library
    bundle = tmp_path / "incident.json"
    live = run(
        Request(
            prometheus=url,
            at=start + DIAGNOSE_AT * 60,
            window=900,
            selector=Selector.of(scenario=name),
            save_bundle=bundle,
        )
    )
    offline = run(Request(bundle=bundle))
    assert (offline.bottleneck, offline.severity, offline.affected) == (
        live.bottleneck,
        live.severity,
        live.affected,
    )
    assert [f.summary for f in offline.findings] == [f.summary for f in live.findings]


# (scenario, minute of the first sample): a scrape sees what happens between its two samples,
# so the sticky XID gauge is sampled across the moment the GPU falls off the bus.
SCRAPED = [
    ("kv-avalanche", DIAGNOSE_AT),
    ("xid-79", 49.5),
    ("healthy", DIAGNOSE_AT),
    ("saturation", DIAGNOSE_AT),
    ("memory-leak", DIAGNOSE_AT),
]


@pytest.mark.parametrize(("name", "minute"), SCRAPED, ids=[n for n, _ in SCRAPED])
def test_live_pages_through_the_scrape_source(name, minute):
    scenario = next(s for s in SCENARIOS if s.name == name)
    sim = Simulation(scenario.instances)
    for _ in range(int(minute * 2)):  # 30 s steps up to the first sample
        sim.step(30)
    pages = PageServer(page(sim))
    sim.step(60)
    second = page(sim)
    clock = {"now": 0.0}

    def wait(seconds: float) -> None:  # the 60 s between the samples, without waiting them
        clock["now"] += seconds
        pages.page = second

    try:
        source = ScrapeSource([pages.url], interval=60, clock=lambda: clock["now"], sleep=wait)
        measurements = source.fetch(MEASURES)
    finally:
        pages.close()
    result = diagnose(measurements, time.time(), 60, "scrape")
    assert result.bottleneck == scenario.expected, result.summary
    assert affected_names(result) == expected_names(scenario)


def test_the_alertmanager_webhook_diagnoses_each_firing_alert(library, tmp_path):
    from drill.launcher import free_port, start_process

    url, start = library
    from tests.fakes.pages import Recorder

    received = Recorder()
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "kvscope.cli",
        "diagnose",
        "--prometheus",
        url,
        "--listen",
        f"127.0.0.1:{port}",
        "--selector",
        '{scenario="kv-avalanche"}',
        "--window",
        WINDOW,
        "--reports-dir",
        str(tmp_path / "reports"),
        "--forward",
        received.url,
    ]
    token = {"authorization": "Bearer webhook-s3cret"}
    server = start_process(
        "kvscope diagnose --listen",
        argv,
        f"http://127.0.0.1:{port}",
        tmp_path / "webhook.log",
        env={**os.environ, "KVSCOPE_WEBHOOK_TOKEN": "webhook-s3cret"},
    )
    from datetime import UTC, datetime

    started = datetime.fromtimestamp(start + (DIAGNOSE_AT - 2) * 60, UTC).isoformat().replace("+00:00", "Z")
    payload = {
        "version": "4",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "VLLMKVCacheNearlyFull", "namespace": "prod"},
                "annotations": {},
                "startsAt": started,
            },
            {"status": "resolved", "labels": {"alertname": "GPUUtilLow"}, "startsAt": started},
        ],
    }
    import httpx

    try:
        with running(server, ready_path="/-/healthy", timeout=60):
            assert httpx.post(server.base_url + "/", json=payload, timeout=10).status_code == 401
            answer = httpx.post(server.base_url + "/", json=payload, headers=token, timeout=10)
            assert answer.status_code == 202 and answer.json()["skipped_resolved"] == 1
            (report_id,) = answer.json()["accepted"]

            def diagnosed() -> list:
                listed = httpx.get(server.base_url + "/reports", headers=token, timeout=10).json()["reports"]
                return listed if listed and listed[0]["state"] == "done" else []

            listed = eventually(diagnosed, timeout=120, what="the queued diagnosis")
            assert listed[0]["id"] == report_id and listed[0]["alertname"] == "VLLMKVCacheNearlyFull"
            assert listed[0]["bottleneck"] == "kv_cache_exhaustion"
            full = httpx.get(server.base_url + f"/reports/{report_id}", headers=token, timeout=10).json()
            assert full["selector"] == '{scenario="kv-avalanche",namespace="prod"}'
            assert (tmp_path / "reports" / f"kvscope-report-{report_id}.json").is_file()
            eventually(lambda: received.bodies, timeout=30, what="the forwarded report")
            assert received.bodies[0]["diagnosis"]["bottleneck"] == "kv_cache_exhaustion"
            bad = httpx.post(server.base_url + "/", content=b"{}", headers=token, timeout=10)
            assert bad.status_code == 400
    finally:
        received.close()
