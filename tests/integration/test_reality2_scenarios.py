"""The second reality split (tests/scenarios/reality2.py: public incident threads, written before
the checks changed for it), backfilled into a real Prometheus. The cases the diagnosis gets right
must stay right; those it does not yet are strict xfails (with the issue's reason), so a change
that fixes one must say so here. A burst that cleared is listed as recovered and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvscope import exitcodes
from tests.scenarios.reality import Case, diagnosed, recorded, scored
from tests.scenarios.reality2 import cases

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
CASES = cases()
# not right yet (issue 20: what each needs), strict: a fix turns it into a failure to remove here
NOT_YET: dict[str, str] = {}


@pytest.fixture(scope="module")
def split2(tmp_path_factory) -> Iterator[tuple[str, float]]:
    with recorded(tmp_path_factory.mktemp("split2"), CASES) as served:
        yield served


def _run(split2, case: Case):
    return diagnosed(split2, case)


def test_the_split_cites_its_sources_and_holds_enough_healthy_fleets():
    assert len(CASES) >= 15 and sum(not c.expected for c in CASES) >= 8
    assert all("#" in c.note for c in CASES), [c.name for c in CASES if "#" not in c.note]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[c.name])) if c.name in NOT_YET else c
        for c in CASES
    ],
    ids=lambda c: c.name,
)
def test_every_active_incident_and_nothing_else(split2, case):
    result = _run(split2, case)
    ok, why = scored(case, result)
    assert ok, f"{why}: {result.summary}"


def test_a_burst_that_cleared_is_recovered_not_the_verdict(split2):
    result = _run(split2, next(c for c in CASES if c.name == "refusal-burst-cleared"))
    assert result.bottleneck == "healthy" and result.exit_code == exitcodes.OK
    recovered = [i for i in result.incidents if i.status == "recovered"]
    assert recovered and all(i.severity.value == "info" and i.ended is not None for i in recovered)
    assert "recovered in the window" in result.summary
