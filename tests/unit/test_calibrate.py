"""A drill fits the engine it runs on: the rate from the measured capacity, the pool where the
baseline would not fit, the latency limits for a slower engine, and a plain line when the
baseline was not healthy or the trigger was not named."""

from __future__ import annotations

from dataclasses import replace as with_
from pathlib import Path

import pytest
import yaml

from drill import drill_config, scenarios
from drill.calibrate import BURST_SHARE, Probe, calibrate, expected_kv_tokens
from drill.observe import AlertLog, Fired, Series
from drill.results import ProfileRun
from drill.run import missing_trigger, quiet_notes, unhealthy_baseline
from drill.scenarios import SEEDS_MIX
from drill.traffic import Mix, Outcome
from kvscope import thresholds as t
from kvscope.config import load

FAST = Probe(
    requests=100,
    seconds=4.0,
    prompt_tokens=34_800,
    generated_tokens=3200,
    latency_s={"short": 1.1, "medium": 1.2, "long": 1.5},
)
SLOW = Probe(
    requests=50,
    seconds=20.0,
    prompt_tokens=17_400,
    generated_tokens=1600,
    latency_s={"short": 11.0, "medium": 12.0, "long": 15.0},
)


def test_the_mix_round_holds_its_shares_exactly():
    deck = Mix().round(50)
    assert (deck.count("short"), deck.count("medium"), deck.count("long")) == (45, 4, 1)
    assert deck[0] == "long"


def test_the_rate_is_the_scenarios_share_of_the_measured_capacity_on_any_machine():
    kv = scenarios.get("kv-avalanche")
    fast = calibrate(FAST, load=kv.load, mix=SEEDS_MIX, pool_tokens=kv.kv_pool_tokens)
    slow = calibrate(SLOW, load=kv.load, mix=SEEDS_MIX, pool_tokens=kv.kv_pool_tokens)
    assert fast.rate == pytest.approx(kv.load * 25.0, rel=1e-3) and slow.rate == pytest.approx(kv.load * 2.5, rel=1e-3)
    # Little's law: ten times slower, a tenth of the rate, the same requests in flight
    assert fast.expected_kv_peak == pytest.approx(slow.expected_kv_peak, rel=0.02)
    assert fast.kv_pool_tokens == slow.kv_pool_tokens == kv.kv_pool_tokens
    assert "sustains 25.0 req/s" in fast.line() and f"({kv.load:.0%} of that)" in fast.line()


def test_a_pool_the_baseline_would_nearly_fill_is_enlarged_and_said_so():
    busy = calibrate(FAST, load=0.9, mix=SEEDS_MIX, pool_tokens=8192)
    _, peak = expected_kv_tokens(busy.rate, SEEDS_MIX, FAST)
    assert busy.pool_from == "calibrated" and busy.kv_pool_tokens > 8192
    assert peak <= 0.6 * busy.kv_pool_tokens and busy.expected_kv_peak <= 0.6


def test_the_users_rate_and_pool_win_and_skip_the_probe():
    given = calibrate(None, load=0.4, mix=SEEDS_MIX, pool_tokens=20480, rate=3.0, pool_override=40960)
    assert (given.rate, given.kv_pool_tokens, given.rate_from, given.pool_from) == (
        3.0,
        40960,
        "--rate",
        "--kv-pool-tokens",
    )
    assert given.capacity_rps is None and given.latency_scale == 1.0
    assert "3.00 req/s (--rate)" in given.line()
    with pytest.raises(ValueError, match="probe"):
        calibrate(None, load=0.4, mix=SEEDS_MIX, pool_tokens=None)


def test_a_slower_engine_gets_looser_latency_limits_on_bucket_edges(tmp_path: Path):
    slow = calibrate(SLOW, load=0.4, mix=SEEDS_MIX, pool_tokens=None)
    assert slow.latency_scale == pytest.approx(drill_config.REFERENCE_CAPACITY_RPS / 2.5)
    config = drill_config.write(tmp_path / "kvscope.drill.yaml", load(None), 2.0)
    assert config.thresholds.value(t.TTFT_P99) == pytest.approx(2 * t.TTFT_P99.value)
    assert config.thresholds.value(t.QUEUE_TIME_P99) == pytest.approx(2 * t.QUEUE_TIME_P99.value)
    assert config.slo.ttft.seconds == 5.0 and config.slo.itl.seconds == 0.4  # vLLM's bucket edges
    assert config.thresholds.value(t.KV_USAGE_CRITICAL) == t.KV_USAGE_CRITICAL.value  # not a latency
    assert (tmp_path / "kvscope.drill.yaml").stat().st_mode & 0o077 == 0
    assert "2.00x looser" in drill_config.described(config, 2.0)
    # the QoS classes' leads are time too: twice as long on an engine twice as slow
    from kvscope import tuning
    from serving.gateway_config import GatewayConfig

    qos = config.section("gateway", GatewayConfig).qos
    assert {c.name: c.delay_ms for c in qos.classes} == {k: 2 * v.value for k, v in tuning.QOS_DELAY_MS.items()}
    assert qos.classes[-1].kv_share is not None  # the lane's share is not a time: kept
    assert "QoS delays interactive 0 s, standard 30 s, bulk 120 s" in drill_config.described(config, 2.0)


def test_the_users_own_file_is_kept_under_the_scaling(tmp_path: Path):
    mine = tmp_path / "kvscope.yaml"
    mine.write_text(
        yaml.safe_dump({"thresholds": {"ttft_p99": {"value": 4.0, "for": "10m"}, "kv_usage_critical": 0.95}})
    )
    config = drill_config.write(tmp_path / "drill.yaml", load(mine), 1.5)
    assert config.thresholds.value(t.TTFT_P99) == pytest.approx(6.0)
    assert config.thresholds.value(t.KV_USAGE_CRITICAL) == 0.95
    assert yaml.safe_load((tmp_path / "drill.yaml").read_text())["thresholds"]["ttft_p99"]["for"] == "10m"
    same = drill_config.write(tmp_path / "same.yaml", load(mine), 1.0)
    assert same.thresholds.value(t.TTFT_P99) == 4.0


def _run(fired_after: float | None, *info_after: float) -> ProfileRun:
    alerts = AlertLog()
    if fired_after is not None:
        alerts.fired[("a",)] = Fired("VLLMQueueTimeHigh", "warning", {}, "", 100.0 + fired_after)
    for i, after in enumerate(info_after):  # the same info alert on one GPU, then another
        alerts.fired[("b", str(i))] = Fired("GPUUtilLow", "info", {"gpu": str(i)}, "", 100.0 + after)
    outcomes = [Outcome("before", "short", 120, 60.0 + i, ttft=0.1, latency=0.5) for i in range(30)]
    outcomes += [Outcome("before", "short", 120, 90.0, error=None)]  # never answered
    return ProfileRun("default", 60.0, 100.0, 160.0, 160.0, outcomes, alerts, {}, "", Series(), 0.0, None, None)


def test_an_alert_before_the_change_fails_the_drill_in_one_line():
    capacity = calibrate(FAST, load=0.4, mix=SEEDS_MIX, pool_tokens=None)
    line = unhealthy_baseline(_run(-12.0), capacity)
    assert line is not None and "\n" not in line
    assert line.startswith("the baseline was not healthy on default: VLLMQueueTimeHigh fired 12 s before the change")
    assert "0.75 of the 0.78 req/s sent" in line and "measured capacity of 25.0 req/s" in line
    assert unhealthy_baseline(_run(+5.0), capacity) is None and unhealthy_baseline(_run(None), capacity) is None


def test_an_info_alert_before_the_change_is_said_but_pages_nobody_and_fails_nothing():
    # prefix-miss's baseline (8 % of capacity) leaves the GPU idle between requests: GPUUtilLow
    # (info, seed 002's consolidation hint) is right there, and names no incident
    capacity = calibrate(FAST, load=0.4, mix=SEEDS_MIX, pool_tokens=None)
    quiet = _run(None, -20.0, -18.0)
    assert unhealthy_baseline(quiet, capacity) is None
    note = quiet_notes(quiet)
    assert note is not None and "\n" not in note
    assert note.startswith("before the change on default, alerts that page nobody fired: GPUUtilLow (20 s before it)")
    # a paging alert still fails it, with the info one beside it
    both = _run(-12.0, -20.0)
    line = unhealthy_baseline(both, capacity)
    assert line is not None and line.startswith("the baseline was not healthy on default: VLLMQueueTimeHigh fired 12 s")
    assert "GPUUtilLow" not in line and "GPUUtilLow" in (quiet_notes(both) or "")
    assert quiet_notes(_run(-12.0)) is None and quiet_notes(_run(None, +5.0)) is None


def test_the_scenarios_trigger_must_be_named():
    kv = scenarios.get("kv-avalanche")
    said = {
        "summary": "KV cache full ..., after prompts 2.0x longer (350 -> 700 tokens) at the same request rate.",
        "incidents": [{"trigger": {"signal": "prompt_tokens_mean", "before": 350, "after": 700}}],
    }
    assert missing_trigger(kv, said) is None
    rate = {
        "summary": "KV cache full ..., after request rate 1.4x lower",
        "incidents": [{"trigger": {"signal": "request_rate"}}],
    }
    line = missing_trigger(kv, rate)
    assert line is not None and "named request_rate, not the change (prompt_tokens_mean" in line
    assert "named no trigger" in (missing_trigger(kv, {"summary": "", "incidents": [{}]}) or "")
    assert missing_trigger(scenarios.get("gpu-xid"), {"summary": ""}) is None  # a fault has none


def test_bursts_come_as_far_apart_as_the_engine_needs():
    hol = scenarios.get("prefill-hol")
    count, every = hol.bursts
    probe = Probe(100, 4.0, 34_800, 3200, {"short": 1.0}, burst_prompt_s=2.0)
    fast = calibrate(probe, load=hol.load, mix=SEEDS_MIX, pool_tokens=None)
    slow = calibrate(with_(probe, burst_prompt_s=5.0), load=hol.load, mix=SEEDS_MIX, pool_tokens=None)
    assert fast.burst_every(count, every) == every  # 3 x 2 s in 15 s: the reference's spacing
    assert slow.burst_every(count, every) == pytest.approx(count * 5.0 / BURST_SHARE)
    assert "one burst prompt alone takes 5.0 s" in slow.line()
    near = [t for t, _ in hol.phases(5.0, 120, fast.burst_every(count, every))[1].forced]
    far = [t for t, _ in hol.phases(2.0, 120, slow.burst_every(count, every))[1].forced]
    assert len(near) == 18 and len(far) == 9  # three every 15 s of 80, three every 37.5 s
    assert far[3] - far[0] == pytest.approx(2.5 * (near[3] - near[0]))
    assert calibrate(None, load=0.2, mix=SEEDS_MIX, pool_tokens=None, rate=2.0).burst_every(count, every) == every


def test_the_time_after_the_change_holds_a_whole_burst_period_on_a_slow_engine():
    """On an AVX2 engine one 12K-token prompt took 17 s to its first token (2026-12-06): bursts
    127.5 s apart. The CI variant's 40 s after the change ended mid-burst, its prompts aborted
    before the diagnosis could see them; the traffic after the change now holds one period."""
    hol = scenarios.get("prefill-hol")
    count, every = hol.bursts
    probe = Probe(100, 4.0, 34_800, 3200, {"short": 1.0}, burst_prompt_s=17.0)
    slow = calibrate(probe, load=hol.load, mix=SEEDS_MIX, pool_tokens=None)
    period = slow.burst_every(count, every)
    assert period == pytest.approx(127.5)
    before, after = hol.phases(0.9, 60, period)
    assert before.seconds == 20 and after.seconds == pytest.approx(period)  # 40 s stretched to a period
    assert [t for t, _ in after.forced] == pytest.approx([0.5, 0.6, 0.7])  # one burst, then its recovery
    assert hol.phases(5.0, 60, every)[1].seconds == 40  # the reference's spacing: the CI length as given
    kv = scenarios.get("kv-avalanche")  # no bursts: no period to hold
    assert kv.phases(12.0, 90, None)[1].seconds == 60


def test_a_scenario_with_a_trigger_sends_enough_requests_on_each_side_of_the_change():
    """kv-avalanche's trigger is a mean compared over MIN_FOR_MEAN requests a window: at 1.7
    req/s (an AVX2 engine with a core taken) its CI variant's 30 s before the change held too few."""
    from diagnosis.changes import MIN_FOR_MEAN
    from drill.scenarios import TRIGGER_REQUESTS

    kv = scenarios.get("kv-avalanche")
    assert kv.trigger is not None and TRIGGER_REQUESTS >= 2 * MIN_FOR_MEAN
    before, after = kv.phases(1.655, 90)
    assert before.seconds * before.rate >= TRIGGER_REQUESTS and after.seconds * after.rate >= TRIGGER_REQUESTS
    assert before.seconds == pytest.approx(TRIGGER_REQUESTS / 1.655, abs=0.1)
    assert "90 requests at 1.66 req/s, what the diagnosis compares" in kv.why_longer(before)
    fast = kv.phases(12.0, 90)  # the reference machine's rate: the CI length as given
    assert [p.seconds for p in fast] == [30, 60]
    miss = scenarios.get("prefix-miss")  # no trigger, no incident of rare requests: nothing stretched
    assert miss.trigger is None and sum(p.seconds for p in miss.phases(0.3, 100)) == 100


def test_kv_avalanche_runs_long_enough_after_the_change_for_its_long_prompts_to_build_it():
    """The pool is outgrown by the long prompts, one in a deck of 50: at 1.67 req/s (an AVX2
    engine with a core taken) the CI variant's 60 s after the change held two, and no KV alert
    fired before the traffic ended; three decks hold three, on any engine."""
    from drill.traffic import DECK

    kv = scenarios.get("kv-avalanche")
    assert kv.after_requests >= 3 * DECK and kv.after.long_tokens >= 0.5 * (kv.kv_pool_tokens or 0)
    _, after = kv.phases(1.67, 90)
    assert after.seconds * after.rate >= kv.after_requests and after.seconds == pytest.approx(90, abs=0.5)
    assert kv.why_longer(after) == "150 requests at 1.67 req/s, what the incident needs to build"
    assert [p.seconds for p in kv.phases(12.0, 90)] == [30, 60]  # the reference's rate: as given
    assert kv.phases(12.0, 600)[1].seconds == 400  # the full drill: as given
