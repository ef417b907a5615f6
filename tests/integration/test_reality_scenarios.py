"""The reality split (tests/scenarios/reality.py, written before the checks changed), backfilled
into a real Prometheus: every case names exactly its incidents, each on its own scope; the seed's
trigger is named; the JSON carries incidents, changes and sources."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from diagnosis.findings import VOCABULARY
from diagnosis.report import to_dict
from diagnosis.run import Request, run
from drill import prometheus_server as prometheus
from drill.launcher import running
from kvscope.promql import Selector
from tests.scenarios.fleet import Simulation, openmetrics
from tests.scenarios.library import scenarios
from tests.scenarios.reality import DIAGNOSE_AT, Case, cases, names_of, score

pytestmark = pytest.mark.integration
CASES = cases()


@pytest.fixture(scope="module")
def reality(tmp_path_factory) -> Iterator[tuple[str, float]]:
    work = tmp_path_factory.mktemp("reality")
    start = time.time() - 62 * 60
    sims = [Simulation(c.instances, {"scenario": c.name}, start=start) for c in CASES]
    (work / "reality.om").write_text(openmetrics(sims, start, 60))
    prometheus.backfill(work / "reality.om", work / "data")
    server = prometheus.start(work / "prometheus", {}, storage=work / "data", retention="30d")
    with running(server, ready_path="/-/ready", timeout=60) as ready:
        yield ready.base_url, start


def _run(reality, case: Case):
    url, start = reality
    return run(
        Request(prometheus=url, at=start + DIAGNOSE_AT * 60, window=900, selector=Selector.of(scenario=case.name))
    )


def test_both_libraries_cover_the_vocabulary():
    ids = {s.expected for s in scenarios()} | {i for c in CASES for i, _ in c.expected}
    assert ids == set(VOCABULARY)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_incident_and_nothing_else(reality, case):
    result = _run(reality, case)
    ok, why = score(case, [(i.id, names_of(i.affected)) for i in result.incidents])
    assert ok, f"{why}: {result.summary}"
    if case.trigger:
        assert case.trigger in str(result.incidents[0].trigger["signal"]), result.incidents[0].trigger
    if case.expected:
        assert result.bottleneck == result.incidents[0].id
        assert {f.id for f in result.findings} >= {i.id for i in result.incidents}


def test_two_faults_on_two_machines_are_two_incidents_in_the_json(reality):
    case = next(c for c in CASES if c.name == "xid-and-avalanche")
    report = json.loads(json.dumps(to_dict(_run(reality, case))))
    assert [i["id"] for i in report["incidents"]] == ["gpu_hardware_fault", "kv_cache_exhaustion"]
    assert report["bottleneck"] == "gpu_hardware_fault" and "1 more incident" in report["summary"]
    first = report["incidents"][0]
    assert {"id", "severity", "confidence", "onset", "summary", "affected", "explains", "trigger"} <= set(first)
    assert report["sources"][0]["status"] == "ok"


def test_the_seed_000_trigger_is_said_in_one_sentence(reality):
    case = next(c for c in CASES if c.name == "seed-000-longer-prompts")
    result = _run(reality, case)
    incident = result.incidents[0]
    assert incident.trigger and incident.trigger["signal"] == "prompt_tokens_mean"
    assert incident.trigger["after"] > 1.5 * incident.trigger["before"]
    assert "longer" in incident.summary and "at the same request rate" in incident.summary
    assert any(c.signal == "prompt_tokens_mean" for c in result.changes)


def test_a_symptom_on_the_same_machine_is_explained_not_listed(reality):
    case = next(c for c in CASES if c.name == "xid-explains-its-engine")
    incident = _run(reality, case).incidents[0]
    assert incident.id == "gpu_hardware_fault" and "capacity_saturation" in incident.explains
