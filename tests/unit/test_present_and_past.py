"""Present versus past: an incident whose signals all came back before the end of the window is
recovered (listed with its end, severity info, no effect on the verdict or the exit code); one
whose signals still hold, or that only a background condition keeps, stays active; a hardware
fault that needs a reset stays active when it goes quiet, an application-class XID long ago does
not; a latency tail is judged at the end of the window, not across two regimes."""

from __future__ import annotations

from typing import Any

from diagnosis import onset
from diagnosis.findings import Evidence, Finding, Severity
from diagnosis.incidents import Incident
from diagnosis.measures import BY_NAME, Measurements, Value
from diagnosis.sources.prometheus import PrometheusSource
from diagnosis.verdict import Diagnosis, conclude, diagnose
from kvscope import exitcodes
from tests.unit.test_diagnosis_checks import ENGINE, measurements

AT, SPAN, PRESENT = 3600.0, 1800.0, 300.0


class History:
    """A Prometheus client whose range query answers each measure's series from `values`."""

    name = "history"

    def __init__(self, values: dict[str, list[float]]) -> None:
        self.values = values

    def query_range(self, expr: str, start: float, end: float, step: float) -> Any:
        for measure, series in self.values.items():
            if any(name in expr for name in BY_NAME[measure].names):
                times = [start + i * (end - start) / (len(series) - 1) for i in range(len(series))]
                return [({}, list(zip(times, series, strict=True)))]
        return []


def _incident(kind: str, evidence: list[Evidence], severity: Severity = Severity.CRITICAL) -> Incident:
    cause = Finding(kind, severity, 0.9, f"{kind} on vllm-0.", [{"pod": "vllm-0"}], evidence, [])
    return Incident(kind, severity, 0.9, cause.summary, ["vllm-0"], cause)


def _found(
    kind: str, series: dict[str, list[float]], evidence: list[Evidence], severity: Severity = Severity.CRITICAL
) -> Incident:
    incident = _incident(kind, evidence, severity)
    source = PrometheusSource(History(series))  # type: ignore[arg-type]
    onset.find(source, [incident], AT, SPAN, PRESENT)
    return incident


QUEUE = Evidence("q", 9.5, 1.0, {"pod": "vllm-0"}, "queue_p99", True)
KV_NOT_FULL = Evidence("kv", 0.45, 0.9, {"pod": "vllm-0"}, "kv_usage_max", False)
XID = Evidence("x", 1.0, 0, {"pod": "vllm-0"}, "xid_changed", True)
# 31 steps over the span: each 60 s
BURST = [0.1] * 10 + [9.0] * 8 + [0.1] * 13  # held from step 10 to 17, clear for the last 13 minutes
LATE = [0.1] * 26 + [9.0] * 5  # holds at the end


def test_a_burst_that_cleared_is_recovered_and_says_when():
    incident = _found("capacity_saturation", {"queue_p99": BURST, "kv_usage_max": [0.45] * 31}, [QUEUE, KV_NOT_FULL])
    assert incident.status == "recovered"
    assert incident.ended == AT - SPAN + 18 * 60 and incident.onset == AT - SPAN + 10 * 60


def test_what_still_holds_is_active_and_a_background_condition_alone_keeps_nothing_active():
    assert _found("capacity_saturation", {"queue_p99": LATE}, [QUEUE]).status == "active"
    # the pool was never full (held at every step): it neither keeps the burst active nor ends it
    burst = _found("capacity_saturation", {"queue_p99": BURST, "kv_usage_max": [0.45] * 31}, [QUEUE, KV_NOT_FULL])
    assert burst.status == "recovered"
    assert _found("capacity_saturation", {"kv_usage_max": [0.45] * 31}, [KV_NOT_FULL]).status == "active"


def test_a_signal_without_history_claims_nothing():
    assert _found("capacity_saturation", {}, [QUEUE]).status == "active"


def test_a_hardware_fault_that_went_quiet_stays_active():
    assert _found("gpu_hardware_fault", {"xid_changed": [0] * 5 + [1] * 3 + [0] * 23}, [XID]).status == "active"


def test_an_application_xid_has_passed_once_older_than_the_default_window():
    # XID 13 (the check rates it a warning: the application's own bug can cause it), quiet since:
    # 52 minutes before the end of an hour's window it has passed; 22 minutes before, it has not,
    # as the default 30-minute window would see either (the verdict does not move with --window)
    def judged(quiet_minutes: int) -> str:
        series = [0.0] * (57 - quiet_minutes) + [1.0] * 3 + [0.0] * quiet_minutes  # a point a minute
        incident = _incident("gpu_hardware_fault", [XID], Severity.WARNING)
        onset.find(PrometheusSource(History({"xid_changed": series})), [incident], AT, 3540, PRESENT)  # type: ignore[arg-type]
        return incident.status

    assert judged(50) == "recovered" and judged(20) == "active"


def test_a_throughput_held_since_its_data_began_is_a_background_condition():
    # the first points of a rate read a window still filling: below the line, then above it to
    # the end; with the queue's burst over, the incident has recovered
    throughput = Evidence("g", 1000.0, 800.0, {"pod": "vllm-0"}, "generation_tps_recent", True)
    series = {"queue_p99": BURST, "generation_tps_recent": [300.0, 600.0] + [1000.0] * 29}
    assert _found("capacity_saturation", series, [QUEUE, throughput]).status == "recovered"


def _saturated_after_healthy_minutes() -> tuple[Measurements, Measurements]:
    """An hour's window whose last 20 minutes are a capped, refusing queue: over the whole window
    its TTFT p99 is 30x a median the healthy minutes set; over the last 5 minutes, 2.5x."""
    queue = {"waiting_max": 128, "queue_p99": 9.7, "rejection_rate": 1.1, "prompt_p99": 4468}
    window = measurements(engine={**queue, "ttft_p50": 0.32, "ttft_p99": 9.6})
    present = Measurements()
    for name, v in {"ttft_p50": 4.2, "ttft_p99": 10.5, "itl_p50": 0.02, "itl_p99": 0.05}.items():
        present.values[name] = [Value(v, dict(ENGINE), f"end:{name}")]
    return window, present


def test_a_tail_is_judged_where_it_holds_not_across_two_regimes():
    window, present = _saturated_after_healthy_minutes()
    assert diagnose(window, AT, 3600, "t").bottleneck == "prefill_head_of_line"  # the mixed window alone
    result = diagnose(window, AT, 3600, "t", present=present)
    assert result.bottleneck == "capacity_saturation", result.summary
    assert "prefill_head_of_line" not in {f.id for f in result.findings}


def test_only_active_incidents_set_the_verdict_and_the_exit_code():
    past, present = _incident("prefill_head_of_line", [QUEUE]), _incident("prefix_cache_miss", [QUEUE])
    past.ended = AT - 600
    d = Diagnosis(AT, SPAN, "history", "healthy", Severity.OK, 0.0, "", incidents=[past, present])
    conclude(d, [], "KV cache, queue, GPUs and hardware", 0.9)
    assert d.bottleneck == "prefix_cache_miss" and d.exit_code == exitcodes.CRITICAL
    assert [i.id for i in d.incidents] == ["prefix_cache_miss", "prefill_head_of_line"]
    assert past.severity is Severity.INFO and "recovered: cleared at" in past.summary
    assert "Recovered in the window: prefill_head_of_line on vllm-0." in d.summary
    only_past = Diagnosis(AT, SPAN, "history", "healthy", Severity.OK, 0.0, "", incidents=[past])
    conclude(only_past, [], "KV cache, queue, GPUs and hardware", 0.9)
    assert only_past.bottleneck == "healthy" and only_past.exit_code == exitcodes.OK
    assert only_past.summary.endswith("; recovered in the window: prefill_head_of_line on vllm-0")
