"""The third reality split (tests/scenarios/reality3.py: a KV pool that stays full while requests
queue for it without being evicted, and the fleets that look like it; written before the KV check
changed for it), backfilled into a real Prometheus."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scenarios.reality import diagnosed, recorded, scored
from tests.scenarios.reality3 import cases

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
CASES = cases()


@pytest.fixture(scope="module")
def split3(tmp_path_factory) -> Iterator[tuple[str, float]]:
    with recorded(tmp_path_factory.mktemp("split3"), CASES) as served:
        yield served


def test_the_split_cites_its_sources_and_holds_healthy_look_alikes():
    assert sum(not c.expected for c in CASES) >= 3 and sum(bool(c.expected) for c in CASES) >= 3
    assert all("#" in c.note for c in CASES), [c.name for c in CASES if "#" not in c.note]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_active_incident_and_nothing_else(split3, case):
    result = diagnosed(split3, case)
    ok, why = scored(case, result)
    assert ok, f"{why}: {result.summary}"
    if case.trigger:
        assert case.trigger in str(result.incidents[0].trigger["signal"]), result.incidents[0].trigger


def test_the_queue_at_a_full_pool_is_said_as_such(split3):
    result = diagnosed(split3, next(c for c in CASES if c.name == "kv-full-admission-queue"))
    assert result.bottleneck == "kv_cache_exhaustion" and result.severity.value == "warning"
    assert "nothing is evicted" in result.summary and "prompts" in result.summary
