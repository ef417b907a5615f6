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
