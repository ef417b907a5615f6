"""The fourth reality split (tests/scenarios/reality4.py: PCIe links below their best, on purpose
on idle GPUs and as a fault on busy ones; written before the PCIe check and alert changed for it),
backfilled into a real Prometheus."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scenarios.reality import diagnosed, recorded, scored
from tests.scenarios.reality4 import cases

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
CASES = cases()


@pytest.fixture(scope="module")
def split4(tmp_path_factory) -> Iterator[tuple[str, float]]:
    with recorded(tmp_path_factory.mktemp("split4"), CASES) as served:
        yield served


def test_the_split_cites_its_sources_and_holds_healthy_look_alikes():
    assert sum(not c.expected for c in CASES) >= 2 and sum(bool(c.expected) for c in CASES) >= 3
    assert all("#" in c.note or "HT513323" in c.note for c in CASES), [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_active_incident_and_nothing_else(split4, case):
    result = diagnosed(split4, case)
    ok, why = scored(case, result)
    assert ok, f"{why}: {result.summary}"


def test_a_busy_gpus_narrow_link_is_named_with_what_it_reached_and_how_busy_it_was(split4):
    result = diagnosed(split4, next(c for c in CASES if c.name == "busy-link-trained-at-x8"))
    assert result.bottleneck == "pcie_bottleneck" and result.severity.value == "warning"
    (incident,) = [i for i in result.incidents if i.id == "pcie_bottleneck"]
    assert "at best Gen5 x8" in incident.summary and "capable of Gen5 x16" in incident.summary
    finding = next(f for f in result.findings if f.id == "pcie_bottleneck")
    shown = {(e.value, e.threshold) for e in finding.evidence}
    assert (8.0, 16.0) in shown and (78.0, 20) in shown  # the best width it reached, and how busy it was
    assert any("max_over_time(DCGM_FI_DEV_PCIE_LINK_WIDTH" in e.query for e in finding.evidence)
    assert not any("PCIE_LINK_GEN" in e.query for e in finding.evidence)  # Gen5 of Gen5: nothing to show
