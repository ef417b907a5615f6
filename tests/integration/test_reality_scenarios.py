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
from kvscope.promql import Selector
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics
from tests.scenarios.library import scenarios
from tests.scenarios.reality import DIAGNOSE_AT, Case, cases, diagnosed, names_of, recorded, score

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
CASES = cases()


@pytest.fixture(scope="module")
def reality(tmp_path_factory) -> Iterator[tuple[str, float]]:
    with recorded(tmp_path_factory.mktemp("reality"), CASES) as served:
        yield served


def _run(reality, case: Case):
    return diagnosed(reality, case)


def test_the_libraries_and_both_splits_cover_the_vocabulary():
    from tests.scenarios import reality2

    ids = {s.expected for s in scenarios()} | {i for c in CASES + reality2.cases() for i, _ in c.expected}
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
    assert sorted(i["id"] for i in report["incidents"]) == ["gpu_hardware_fault", "kv_cache_exhaustion"]
    # both critical, one machine each: the more confident first
    confidences = [i["confidence"] for i in report["incidents"]]
    assert confidences == sorted(confidences, reverse=True)
    assert report["bottleneck"] == report["incidents"][0]["id"] and "1 more incident" in report["summary"]
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


@pytest.fixture(scope="module")
def with_alerts(tmp_path_factory) -> Iterator[tuple[str, float]]:
    """The seed case with ALERTS series as Prometheus would have written them, and the kvscope
    rules loaded (their annotations name what explains each alert)."""
    from alerts.build import RULES_FILE, write

    work = tmp_path_factory.mktemp("alerts")
    write(work)
    case = next(c for c in CASES if c.name == "seed-000-longer-prompts")
    start = time.time() - 62 * 60
    text = openmetrics([Simulation(case.instances, {"scenario": case.name}, start=start)], start, 60)
    lines = ["# TYPE ALERTS gauge"]
    fired = [
        ("VLLMKVCacheExhausted", {"namespace": "prod", "pod": "vllm-seed-1", "instance": "vllm-seed-1:8000"}, 44),
        ("VLLMQueueTimeHigh", {"namespace": "prod", "pod": "vllm-seed-0", "instance": "vllm-seed-0:8000"}, 50),
        ("KvscopeTargetDown", {"instance": "node-seed-0:9400", "target": "http://x/metrics"}, 50),
    ]
    for name, labels, since in fired:
        body = ",".join(
            f'{k}="{v}"'
            for k, v in sorted(
                {
                    **labels,
                    "alertname": name,
                    "alertstate": "firing",
                    "scenario": case.name,
                    "severity": "warning",
                }.items()
            )
        )
        lines += [f"ALERTS{{{body}}} 1 {start + m * 60:.3f}" for m in range(since, 58)]
    series = text.replace("# EOF\n", "\n".join(lines) + "\n# EOF\n")
    with backfilled(work, series, rule_files=[work / RULES_FILE]) as ready:
        yield ready.base_url, start


def test_each_firing_alert_is_explained_or_said_why_not(with_alerts):
    url, start = with_alerts
    result = run(
        Request(
            prometheus=url,
            at=start + DIAGNOSE_AT * 60,
            window=900,
            selector=Selector.of(scenario="seed-000-longer-prompts"),
        )
    )
    by_name = {a["alertname"]: a for a in result.alerts}
    assert by_name["VLLMKVCacheExhausted"]["explained_by"] == "kv_cache_exhaustion"
    assert by_name["VLLMQueueTimeHigh"]["explained_by"] is None  # a healthy pod: nothing found there
    assert "nothing" in by_name["VLLMQueueTimeHigh"]["why"] or "no incident" in by_name["VLLMQueueTimeHigh"]["why"]
    assert by_name["KvscopeTargetDown"]["explained_by"] is None and "monitoring" in by_name["KvscopeTargetDown"]["why"]
    assert "Not explained: VLLMQueueTimeHigh" in result.summary
    assert json.loads(json.dumps(to_dict(result)))["alerts"] == result.alerts


@pytest.mark.parametrize(
    ("name", "incident", "minute"),
    [
        ("seed-000-longer-prompts", "kv_cache_exhaustion", 40),
        ("xid-and-avalanche", "gpu_hardware_fault", 50),
        ("xid-and-avalanche", "kv_cache_exhaustion", 35),
        ("prefix-fell-before-the-window", "prefix_cache_miss", 40),
        ("three-at-once", "thermal_power_throttling", 35),
    ],
)
def test_the_onset_is_when_the_fault_began(reality, name, incident, minute):
    _, start = reality
    result = _run(reality, next(c for c in CASES if c.name == name))
    found = next(i for i in result.incidents if i.id == incident)
    assert found.onset is not None, found
    assert abs((found.onset - start) / 60 - minute) <= 2, (found.onset - start) / 60


def test_the_trigger_says_when_the_load_changed(reality):
    _, start = reality
    result = _run(reality, next(c for c in CASES if c.name == "seed-000-longer-prompts"))
    trigger = result.incidents[0].trigger
    assert trigger and isinstance(trigger["at"], float) and abs((trigger["at"] - start) / 60 - 40) <= 2
    assert "since " in result.incidents[0].summary and "UTC" in result.summary
