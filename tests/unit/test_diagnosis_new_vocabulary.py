"""The checks for what vLLM 0.32 fleets hit (issue 20): an engine that stalls while it answers,
speculative decoding that costs more than it saves, failing KV transfers; each fires on its
condition and stays silent just beside it."""

from diagnosis.checks import Context, kv_transfer, progress, speculative
from diagnosis.measures import Value
from diagnosis.verdict import diagnose
from kvscope import exitcodes
from kvscope import thresholds as t
from tests.unit.test_diagnosis_checks import ENGINE, measurements, one


def _with_baseline(engine: dict, before: dict):
    m = measurements(engine=engine)
    for name, v in before.items():
        m.baseline[name] = [Value(float(v), dict(ENGINE), f"q:{name}")]
    return m


STALLED = {"generation_tps_recent": 0.0, "prompt_tps_recent": 0.0, "running_last": 1, "waiting_last": 5}


def test_an_engine_with_requests_in_flight_and_no_tokens_is_stalled():
    found = one(progress.check, Context.of(measurements(engine=STALLED)))
    assert found is not None and found.id == "engine_stall" and "1 running and 5 waiting" in found.summary
    result = diagnose(measurements(engine=STALLED), 0, 900, "t")
    assert result.bottleneck == "engine_stall" and result.exit_code == exitcodes.CRITICAL


def test_an_idle_engine_or_a_slow_one_is_not_stalled():
    idle = {**STALLED, "running_last": 0, "waiting_last": 0}
    slow = {**STALLED, "generation_tps_recent": 0.4}
    prefilling = {**STALLED, "prompt_tps_recent": 300.0}  # one long prompt prefills before any token
    for engine in (idle, slow, prefilling):
        assert one(progress.check, Context.of(measurements(engine=engine))) is None, engine
    # every client gave up at once: the engine aborted them (a hung one could not) and went idle,
    # its gauges still holding the last step's counts
    aborted = {**STALLED, "aborted_recent": 0.8}
    assert one(progress.check, Context.of(measurements(engine=aborted))) is None
    # without the progress counters a scrape says nothing either way
    assert one(progress.check, Context.of(measurements(engine={**STALLED, "prompt_tps_recent": None}))) is None


SPEC = {"spec_draft_tps": 500.0, "tpot_p50": 0.0167, "itl_p50": 0.025, "spec_accept": 0.1}
SPEC_BEFORE = {"tpot_p50": 0.0056, "itl_p50": 0.025, "spec_accept": 0.7}


def test_rejected_drafts_raise_the_per_token_time_while_the_steps_hold():
    found = one(speculative.check, Context.of(_with_baseline(SPEC, SPEC_BEFORE)))
    assert found is not None and found.id == "spec_decode_inefficient"
    assert "3.0x what it was" in found.summary and "accepted 10% of the time, down from 70%" in found.summary
    assert any("num_speculative_tokens" in r for r in found.remediation)


def test_slower_steps_or_steady_acceptance_or_no_speculation_is_not_the_drafts():
    slower_steps = {**SPEC, "itl_p50": 0.075}  # everything slowed: not the drafts' doing
    steady = {**SPEC, "spec_accept": 0.65}
    off = {**SPEC, "spec_draft_tps": 0.0}
    small = {**SPEC, "tpot_p50": SPEC_BEFORE["tpot_p50"] * (t.SPEC_TPOT_RISE.value - 0.1)}
    for engine in (slower_steps, steady, off, small):
        assert one(speculative.check, Context.of(_with_baseline(engine, SPEC_BEFORE))) is None, engine
    assert one(speculative.check, Context.of(measurements(engine=SPEC))) is None  # no baseline to compare


def test_failing_kv_transfers_past_their_line():
    limit = t.KV_TRANSFER_FAILURE_RATE.value
    found = one(kv_transfer.check, Context.of(measurements(engine={"kv_transfer_failures": 3.0, "kv_transfer_p99": 8})))
    assert found is not None and "3.00 failed per second, the p99 transfer taking 8.00 s" in found.summary
    assert one(kv_transfer.check, Context.of(measurements(engine={"kv_transfer_failures": limit / 2}))) is None
    waiting = {"kv_transfer_failures": 3.0, "queue_p99": 10.0}
    assert one(kv_transfer.check, Context.of(measurements(engine=waiting))).severity.value == "critical"


def test_two_saturated_replicas_are_not_an_imbalance_because_one_just_emptied():
    from diagnosis.checks import imbalance
    from diagnosis.measures import Measurements

    m = Measurements()
    for pod, last in (("vllm-a", 0.12), ("vllm-b", 0.9)):
        labels = {**ENGINE, "pod": pod, "instance": f"{pod}:8000"}
        for name, v in {"kv_usage_max": 0.93, "kv_usage_avg": 0.8, "kv_usage_last": last, "waiting_max": 3,
                        "waiting_last": 0, "queue_p99": 0.5}.items():  # fmt: skip
            m.values.setdefault(name, []).append(Value(v, labels, f"q:{name}"))
    assert imbalance.check(Context.of(m)) == []


def test_an_engine_whose_cache_config_has_no_model_label_keeps_its_budget_at_the_end():
    # vllm:cache_config_info carries no model_name: its view must not read as an engine gone now
    from diagnosis.measures import Measurements
    from tests.unit.test_diagnosis_checks import GPU

    window = measurements(gpu={"fb_used_max": 0.955 * 81559, "fb_free_min": 0.04 * 81559})
    config = {k: v for k, v in {**ENGINE, "instance": GPU["instance"]}.items() if k != "model_name"}
    window.values["cache_config"] = [Value(1.0, {**config, "gpu_memory_utilization": "0.95"}, "q")]
    window.values["running_max"] = [Value(20.0, {**ENGINE, "instance": GPU["instance"]}, "q")]
    present = Measurements()
    for name in ("fb_used_max", "fb_free_min", "fb_reserved", "gpu_util_avg"):
        present.values[name] = list(window.values[name])
    present.values["running_max"] = list(window.values["running_max"])
    result = diagnose(window, 0, 900, "t", present=present)
    assert "gpu_memory_pressure" not in {f.id for f in result.findings}, result.summary


def test_engines_on_one_host_without_gpu_series_stay_apart():
    from diagnosis.scopes import Scopes

    a, b = {"instance": "node-a:8000"}, {"instance": "node-a:8001"}
    scopes = Scopes.of([a, b], [])
    assert (scopes.of_labels(a), scopes.of_labels(b), scopes.count()) == ("node-a:8000", "node-a:8001", 2)


def test_a_servers_own_aggregate_view_is_not_a_sibling_of_its_engine():
    # kvscope serve writes arrivals for the whole instance (no engine label) beside its engine's
    # series: a saturated engine and its own gateway view are one replica (the drills' shape)
    from diagnosis.checks import imbalance
    from diagnosis.measures import Measurements

    m = Measurements()
    engine = {"instance": "127.0.0.1:9400", "target": "http://127.0.0.1:8000/metrics", "model_name": "m"}
    for name, v in {"waiting_max": 25, "queue_p99": 9.0, "kv_usage_max": 0.5, "request_rate": 2.0}.items():
        m.values.setdefault(name, []).append(Value(v, {**engine, "engine": "0"}, "q"))
    m.values["arrival_rate"] = [Value(0.5, engine, "q")]
    m.baseline["arrival_rate"] = [Value(3.0, engine, "q")]
    m.baseline["request_rate"] = [Value(1.0, {**engine, "engine": "0"}, "q")]
    assert imbalance.check(Context.of(m)) == []
