"""Any Prometheus-compatible store: both scenario libraries (tests/scenarios/library.py and the
reality split) backfilled into a real Prometheus and imported into a real VictoriaMetrics
(Debian's `victoria-metrics`, /api/v1/import/prometheus), diagnosed from each: the same verdict,
incidents, findings, steps and changes case by case, onsets within one step of each other. A
bare VictoriaMetrics has no ruler: the alerts are left out, the verdict stands."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosis.run import Request, run
from kvscope.promql import Selector
from tests.scenarios import library, reality
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics
from tests.scenarios.victoria import imported, onsets, prometheus_text, verdict

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.no_engine]
SCENARIOS = library.scenarios()
CASES = reality.cases()
ONSET_STEP = 15.0  # the onset's range query reads a 30-minute span every 15 s (diagnosis/onset.py)

Stores = tuple[str, str, float]  # Prometheus URL, VictoriaMetrics URL, the series' start


@pytest.fixture(scope="module")
def library_stores(tmp_path_factory) -> Iterator[Stores]:
    start = time.time() - 62 * 60
    sims = [Simulation(s.instances, {"scenario": s.name}, s.kvscope_extras) for s in SCENARIOS]
    with _both(tmp_path_factory.mktemp("library"), openmetrics(sims, start, 60)) as urls:
        yield (*urls, start)


@pytest.fixture(scope="module")
def reality_stores(tmp_path_factory) -> Iterator[Stores]:
    start = time.time() - 62 * 60
    sims = [Simulation(c.instances, {"scenario": c.name}, start=start) for c in CASES]
    with _both(tmp_path_factory.mktemp("reality"), openmetrics(sims, start, 60)) as urls:
        yield (*urls, start)


@contextlib.contextmanager
def _both(work: Path, text: str) -> Iterator[tuple[str, str]]:
    """Prometheus (backfilled) and VictoriaMetrics (imported) holding the same series."""
    with backfilled(work, text) as prometheus, imported(work, text) as victoria:
        yield prometheus.base_url, victoria.base_url


def _both_diagnoses(stores: Stores, name: str, minute: float):
    prometheus, victoria, start = stores
    request = {"at": start + minute * 60, "window": 900.0, "selector": Selector.of(scenario=name)}
    return run(Request(prometheus=prometheus, **request)), run(Request(prometheus=victoria, **request))  # type: ignore[arg-type]


def _assert_the_same(from_prometheus, from_victoria) -> None:
    assert verdict(from_victoria) == verdict(from_prometheus), from_victoria.summary
    assert abs(from_victoria.confidence - from_prometheus.confidence) <= 0.05
    expected, found = onsets(from_prometheus), onsets(from_victoria)
    assert found.keys() == expected.keys()
    for key, at in expected.items():
        seen = found[key]
        if at is None or seen is None:
            assert at is seen is None, key
        else:
            assert abs(seen - at) <= ONSET_STEP, key


def test_the_import_writes_prometheus_text_with_millisecond_timestamps():
    text = '# TYPE g gauge\ng{modelName="NVIDIA H100 80GB HBM3",gpu="0"} 0.5 1796000000.125\n# EOF\n'
    assert list(prometheus_text(text.splitlines())) == [
        'g{modelName="NVIDIA H100 80GB HBM3",gpu="0"} 0.5 1796000000125\n'
    ]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_library_scenario_reads_the_same_from_victoria_metrics(library_stores, scenario):
    from_prometheus, from_victoria = _both_diagnoses(library_stores, scenario.name, library.DIAGNOSE_AT)
    assert from_victoria.bottleneck == scenario.expected, from_victoria.summary
    _assert_the_same(from_prometheus, from_victoria)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_reality_case_reads_the_same_from_victoria_metrics(reality_stores, case):
    from_prometheus, from_victoria = _both_diagnoses(reality_stores, case.name, reality.DIAGNOSE_AT)
    ok, why = reality.score(case, [(i.id, reality.names_of(i.affected)) for i in from_victoria.incidents])
    assert ok, f"{why}: {from_victoria.summary}"
    _assert_the_same(from_prometheus, from_victoria)


def test_without_a_ruler_the_alerts_are_left_out_and_the_verdict_stands(tmp_path):
    """ALERTS series as Prometheus writes them, imported into a bare VictoriaMetrics: its rules
    API answers no groups (there is no vmalert behind -vmalert.proxyURL), so no alert has an
    explaining incident to look for, and the diagnosis goes on without them."""
    case = next(c for c in CASES if c.name == "seed-000-longer-prompts")
    start = time.time() - 62 * 60
    text = openmetrics([Simulation(case.instances, {"scenario": case.name}, start=start)], start, 60)
    from kvscope import catalog

    labels = f'alertname="VLLMKVCacheExhausted",alertstate="firing",pod="vllm-seed-1",scenario="{case.name}"'
    fired = [f"{catalog.ALERTS.name}{{{labels}}} 1 {start + m * 60:.3f}" for m in range(44, 58)]
    text = text.replace("# EOF\n", "\n".join(fired) + "\n# EOF\n")
    with imported(tmp_path, text) as victoria:
        result = run(
            Request(
                prometheus=victoria.base_url,
                at=start + reality.DIAGNOSE_AT * 60,
                window=900,
                selector=Selector.of(scenario=case.name),
            )
        )
    assert result.alerts == [] and "Not explained" not in result.summary
    assert [(i.id, sorted(reality.names_of(i.affected))) for i in result.incidents] == [
        ("kv_cache_exhaustion", ["vllm-seed-1"])
    ]
    assert result.sources[0]["status"] == "ok"
