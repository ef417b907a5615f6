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
