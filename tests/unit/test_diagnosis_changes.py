"""What changed against the baseline window: load, restarts, configuration, the model."""

from diagnosis.changes import changes, sentence
from diagnosis.checks import Context
from diagnosis.measures import Measurements, Value

POD = {"namespace": "prod", "pod": "vllm-0", "instance": "10.0.0.1:8000", "model_name": "m"}


def _m(now: dict, before: dict, labels: dict | None = None, before_labels: dict | None = None) -> Context:
    m = Measurements()
    for name, v in now.items():
        m.values[name] = [Value(float(v), dict(labels or POD), f"q:{name}")]
    for name, v in before.items():
        m.baseline[name] = [Value(float(v), dict(before_labels or POD), f"q:{name}")]
    return Context.of(m)


def test_longer_prompts_at_the_same_rate_are_one_sentence():
    found = changes(_m({"request_rate": 5.0, "prompt_mean": 11800}, {"request_rate": 5.1, "prompt_mean": 6400}))
    assert [c.signal for c in found] == ["prompt_tokens_mean"]
    assert sentence(found[0], found) == "prompts 1.8x longer (6,400 -> 11,800 tokens) at the same request rate"


def test_small_moves_are_not_changes():
    assert changes(_m({"request_rate": 5.0, "prompt_mean": 7000}, {"request_rate": 4.5, "prompt_mean": 6400})) == []


def test_a_restart_a_new_configuration_and_another_model_are_named():
    restarted = changes(_m({"start_time": 2000}, {"start_time": 1000}))
    assert [c.signal for c in restarted] == ["engine_restart"] and restarted[0].at == 2000
    config = {**POD, "gpu_memory_utilization": "0.9", "num_gpu_blocks": "100", "block_size": "16"}
    smaller = {**config, "num_gpu_blocks": "50"}
    moved = changes(_m({"cache_config": 1}, {"cache_config": 1}, labels=smaller, before_labels=config))
    assert [c.signal for c in moved] == ["cache_config"] and "num_gpu_blocks=50" in str(moved[0].after)
    other = changes(_m({"request_rate": 5}, {"request_rate": 5}, before_labels={**POD, "model_name": "old"}))
    assert [(c.signal, c.before, c.after) for c in other] == [("model", "old", "m")]


def test_fewer_finishes_while_the_queue_grows_is_the_same_offered_load():
    # the avalanche: 7.4 requests/s arrive before and after; once the engine is swamped only 5.1
    # finish and the other 2.4 a second wait (the queue grows): not "request rate 1.4x lower"
    now = {"request_rate": 5.1, "waiting_slope": 2.4, "prompt_mean": 1880}
    found = changes(_m(now, {"request_rate": 7.4, "waiting_slope": 0.0, "prompt_mean": 1410}))
    assert [c.signal for c in found] == ["prompt_tokens_mean"]
    assert sentence(found[0], found).endswith("at the same request rate")


def test_a_real_drop_in_arrivals_is_still_named():
    found = changes(_m({"request_rate": 3.0, "waiting_slope": 0.0}, {"request_rate": 7.4, "waiting_slope": 0.0}))
    assert [c.signal for c in found] == ["request_rate"]
    assert "request rate 2.5x lower (7.40 -> 3.00/s)" in sentence(found[0], found)


# kvscope serve counts arrivals at admission (kvscope_gateway_admitted_prompt_tokens): no engine label
GATEWAY = {k: v for k, v in POD.items()}
ENGINE0 = {**POD, "engine": "0"}


def _both(now: dict, before: dict) -> Context:
    """vLLM's finish-side measures on engine 0, kvscope's arrival-side ones on its instance."""
    m = Measurements()
    for store, values in ((m.values, now), (m.baseline, before)):
        for name, v in values.items():
            labels = GATEWAY if name.startswith("arrival_") else ENGINE0
            store[name] = [Value(float(v), dict(labels), f"q:{name}")]
    return Context.of(m)


def test_a_saturated_engine_whose_finishes_drop_while_arrivals_hold_names_the_longer_prompts():
    # seed 000 on a slow machine: 6 requests/s arrive before and after, prompts twice as long; the
    # swamped engine finishes 2.5/s of mostly short ones (vLLM counts a request when it ends), and
    # the queue's slope reads low where the window cut it: the arrivals are what tell the story
    now = {
        "request_rate": 2.5,
        "waiting_slope": 0.3,
        "prompt_mean": 420,
        "arrival_rate": 6.0,
        "arrival_prompt_mean": 700,
    }
    before = {
        "request_rate": 6.0,
        "waiting_slope": 0.0,
        "prompt_mean": 350,
        "arrival_rate": 6.1,
        "arrival_prompt_mean": 350,
    }
    found = changes(_both(now, before))
    assert [c.signal for c in found] == ["prompt_tokens_mean"]
    assert sentence(found[0], found) == "prompts 2.0x longer (350 -> 700 tokens) at the same request rate"


def test_without_arrival_counts_the_finishes_are_read_and_never_as_a_negative_rate():
    # plain vLLM: the queue drained faster than it grew (a negative slope) while few finished
    found = changes(_m({"request_rate": 0.2, "waiting_slope": -1.5}, {"request_rate": 1.4, "waiting_slope": 0.0}))
    assert [c.signal for c in found] == ["request_rate"]
    assert found[0].after == 0.0
    text = sentence(found[0], found)
    assert "(1.40 -> 0.00/s)" in text and "-0." not in text


def test_a_real_rise_in_arrivals_is_named_from_the_arrivals():
    now = {"request_rate": 6.0, "arrival_rate": 12.0, "arrival_prompt_mean": 350}
    before = {"request_rate": 6.0, "arrival_rate": 6.0, "arrival_prompt_mean": 350}
    found = changes(_both(now, before))
    assert [c.signal for c in found] == ["request_rate"]
    assert "request rate 2.0x higher (6.00 -> 12.00/s)" in sentence(found[0], found)


def test_the_gateways_own_view_of_an_instance_is_not_a_second_engine():
    now = {"request_rate": 2.5, "prompt_mean": 420, "arrival_rate": 6.0, "arrival_prompt_mean": 700}
    before = {"request_rate": 6.0, "prompt_mean": 350, "arrival_rate": 6.1, "arrival_prompt_mean": 350}
    ctx = _both(now, before)
    ctx.m.values["gateway_mean"] = [Value(0.001, dict(GATEWAY), "q:gateway_mean")]
    found = changes(Context.of(ctx.m))
    assert [(c.signal, c.scope.get("engine")) for c in found] == [("prompt_tokens_mean", "0")]


def _spanned(now: dict, before: dict, spans: tuple[float, float]) -> Context:
    ctx = _m(now, before)
    ctx.m.spans = spans
    return ctx


def test_a_rate_over_a_few_seconds_of_baseline_is_counting_noise():
    # the gpu-xid drill compressed 20x: 21 requests in a 6.7 s baseline read 3.25/s against 4.65/s
    # over 35 s, at one steady rate (said as "request rate 1.4x higher" before the noise guard)
    steady = ({"request_rate": 4.65, "prompt_p99": 8025}, {"request_rate": 3.25, "prompt_p99": 1935})
    assert changes(_spanned(*steady, spans=(35.0, 6.7))) == []
    # the same ratios over a real fleet's 15-minute windows are changes
    assert {c.signal for c in changes(_spanned(*steady, spans=(900.0, 900.0)))} == {
        "request_rate",
        "prompt_tokens_p99",
    }


def test_a_mean_needs_enough_requests_in_each_window():
    longer = ({"request_rate": 1.0, "prompt_mean": 3000}, {"request_rate": 1.0, "prompt_mean": 1500})
    assert changes(_spanned(*longer, spans=(20.0, 20.0))) == []  # 20 requests a window
    assert [c.signal for c in changes(_spanned(*longer, spans=(60.0, 60.0)))] == ["prompt_tokens_mean"]


def test_a_load_that_asks_less_sets_off_only_idle_gpus():
    from diagnosis.changes import Change
    from diagnosis.verdict import can_trigger

    shorter = Change("prompt_tokens_mean", {}, 429.0, 324.0)  # a CI hardware drill's finish-side drift
    longer = Change("prompt_tokens_mean", {}, 337.0, 687.0)  # seed 000's avalanche
    fewer_hits = Change("prefix_hit_rate", {}, 0.9, 0.3)
    quieter = Change("request_rate", {}, 6.0, 1.0)
    for incident in ("thermal_power_throttling", "kv_cache_exhaustion", "pcie_bottleneck"):
        assert not can_trigger(incident, shorter) and not can_trigger(incident, quieter)
        assert can_trigger(incident, longer) and can_trigger(incident, fewer_hits)
    assert can_trigger("gpu_underutilized", quieter) and not can_trigger("gpu_underutilized", longer)
    assert can_trigger("thermal_power_throttling", Change("cache_config", {}, "a", "b"))
