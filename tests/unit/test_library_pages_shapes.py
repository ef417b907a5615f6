"""Every library scenario as live pages (two scrapes a minute apart at minute 57) reads the same in
dcgm-exporter 4.8's names as in 4.9's and 4.10's (renamed, in base units): verdict, incidents and
evidence values (issue 21). The fourth reality split's PCIe links too: its busy-or-idle judgement
reads the utilisation, which 4.9 renamed and rescaled to a ratio."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from diagnosis.measures import MEASURES
from diagnosis.sources.scrape import compute
from diagnosis.verdict import diagnose
from kvscope import promtext
from tests.fakes.dcgm_shapes import reshape
from tests.scenarios.fleet import Simulation, page
from tests.scenarios.library import DIAGNOSE_AT, scenarios
from tests.scenarios.reality4 import cases as pcie_cases
from tests.unit.test_real_pages_diagnosis import _what_it_said

SCENARIOS = [
    *scenarios(),
    *(SimpleNamespace(name=c.name, instances=c.instances, kvscope_extras=False) for c in pcie_cases()),
]


def _pages(scenario) -> list[list[promtext.Sample]]:
    sim = Simulation(scenario.instances, kvscope_extras=scenario.kvscope_extras)
    snapshots = []
    for minute in (DIAGNOSE_AT, DIAGNOSE_AT + 1):
        while sim.minute < minute:
            sim.step(30.0)
        read, _ = promtext.parse_lenient(page(sim))
        snapshots.append(read)
    return snapshots


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_library_fleet_reads_the_same_in_every_dcgm_shape(scenario):
    pages = _pages(scenario)

    def said(shape: str):
        snaps = [(60.0 * i, reshape(samples, shape)) for i, samples in enumerate(pages)]
        return _what_it_said(diagnose(compute(MEASURES, snaps, "pages"), 0, 60, "pages"))

    old_names = {x.name for x in pages[0]}
    new_names = {x.name for x in reshape(pages[0], "4.9")}
    if "DCGM_FI_DEV_SM_CLOCK" in old_names:  # the page really changed its names
        assert "DCGM_FI_DEV_SM_CLOCK_HERTZ" in new_names and "DCGM_FI_DEV_SM_CLOCK" not in new_names
    base = said("4.8")
    assert said("4.9") == base and said("4.10") == base
