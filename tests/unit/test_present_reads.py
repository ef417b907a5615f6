"""The end of the window is fetched for what the checks judged there read, nothing more (issue
23: on a large fleet each GPU query reads every GPU's series). Each of those checks is run on GPUs
that carry every GPU measure, in states that make it fire and that keep it silent, and every
measure it reads must be in its READS; and no measure is fetched that no check reads."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from diagnosis.checks import Context
from diagnosis.measures import MEASURES, Entity, Value
from diagnosis.verdict import PRESENT_CHECKS, PRESENT_MEASURES
from tests.unit.test_diagnosis_checks import BASE_GPU, GPU, measurements

# every GPU measure, at a value that no check minds (a healthy, busy H100) where the checks' tests
# give none
EVERY_GPU_MEASURE = BASE_GPU | {
    m.name: {"app_sm_clock": 1590, "max_sm_clock": 1980, "power_limit": 700, "slowdown_temp": 90}.get(m.name, 0.0)
    for m in MEASURES
    if m.entity is Entity.GPU and m.name not in BASE_GPU
}
STATES = {
    "healthy": {},
    "idle": {"gpu_util_avg": 3, "sm_clock_avg": 300},
    "hot and slow": {"temp_max": 91, "sm_clock_avg": 1100},
    "at the power cap": {"power_avg": 695, "sm_clock_avg": 1200},
    "reasons held": {"clock_reasons": 0xFF, "throttle_active": 1.0, "clock_events": 3},
    "violations": {"power_violation": 9e8, "thermal_violation": 9e8},
    "link saturated": {"pcie_rx_avg": 45e9, "pcie_tx_avg": 45e9},
    "link degraded": {"pcie_gen": 3, "pcie_max_gen": 5, "pcie_width": 8, "pcie_max_width": 16},
    "replays": {"pcie_replay_rate": 50, "pcie_capacity": 3e10},
    "memory full and growing": {"fb_used_max": 80000, "fb_free_min": 1047, "fb_used_slope": 3.0},
    "an XID and a failed watch": {"xid_increase": 1, "xid_changed": 1, "xid_last": 79, "health_status": 20},
}


class Reads(defaultdict):
    """A GPU's view that remembers which measures were read from it."""

    def __init__(self, view: dict[str, list[Value]], seen: set[str]) -> None:
        super().__init__(list, view)
        self.seen = seen

    def __getitem__(self, key: str) -> Any:
        self.seen.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.seen.add(str(key))
        return super().__contains__(key)


@pytest.mark.parametrize("check", PRESENT_CHECKS, ids=lambda c: c.ID)
def test_a_check_judged_at_the_end_reads_only_its_reads(check):
    fired = 0
    for state in STATES.values():
        ctx = Context.of(measurements(gpu={**EVERY_GPU_MEASURE, **state}, config=0.9))
        seen: set[str] = set()
        ctx.gpus = {key: Reads(view, seen) for key, view in ctx.gpus.items()}
        fired += bool(check.check(ctx))
        gpu_measures = {name for name in seen if name in EVERY_GPU_MEASURE}
        assert gpu_measures <= set(check.READS), gpu_measures - set(check.READS)
    assert fired  # the states reach the check's firing paths, not only its early returns


def test_the_end_of_the_window_fetches_every_read_and_no_more():
    present = {m.name for m in PRESENT_MEASURES if m.entity is Entity.GPU}
    assert present == {name for check in PRESENT_CHECKS for name in check.READS}
    assert "xid_changed" not in present and "health_status" not in present  # judged over the whole window


def test_no_measure_is_fetched_that_no_check_reads():
    """Each measure is a fleet-wide query; one that nothing reads costs every diagnosis for nothing."""
    root = Path(__file__).resolve().parents[2] / "diagnosis"
    source = "".join(p.read_text() for p in root.rglob("*.py") if p.name != "measures.py")
    unread = [m.name for m in MEASURES if not re.search(rf"[\"']{m.name}[\"']", source)]
    assert not unread, unread


def test_gpu_labels_survive_the_recording_view():
    ctx = Context.of(measurements())
    view = next(iter(ctx.gpus.values()))
    assert Reads(view, set())["gpu_util_avg"][0].labels["UUID"] == GPU["UUID"]
