"""What one live page can show (`kvscope diagnose --scrape` of one target, issue 20 item 9): the
spread of running and waiting requests across an instance's data-parallel engines, the reasons in
dcgm-exporter's DCGM_EXP_CLOCK_EVENTS_COUNT, and impossible readings dropped with a note."""

from __future__ import annotations

from diagnosis.measures import MEASURES
from diagnosis.sources.scrape import compute
from diagnosis.verdict import diagnose
from kvscope import catalog as c
from kvscope import promtext

ENGINE = 'instance="10.0.0.5:8000",model_name="llama",namespace="prod",pod="vllm-dp-0"'
GPU = 'gpu="{i}",UUID="GPU-{i}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'


def _engines(waiting: list[float], running: list[float], kv: list[float]) -> str:
    lines = []
    for n, (w, r, k) in enumerate(zip(waiting, running, kv, strict=True)):
        labels = f'{ENGINE},engine="{n}"'
        lines += [
            f"{c.VLLM_REQUESTS_WAITING.name}{{{labels}}} {w}",
            f"{c.VLLM_REQUESTS_RUNNING.name}{{{labels}}} {r}",
            f"{c.VLLM_KV_CACHE_USAGE.name}{{{labels}}} {k}",
        ]
    return "\n".join(lines) + "\n"


def _gpus(count: int, extra: str = "", util: float = 92.0, clock: float = 1980.0) -> str:
    lines = []
    for i in range(count):
        labels = GPU.format(i=i)
        lines += [
            f"{c.DCGM_GPU_UTIL.name}{{{labels}}} {util}",
            f"{c.DCGM_SM_CLOCK.name}{{{labels}}} {clock}",
            f"{c.DCGM_GPU_TEMP.name}{{{labels}}} 70",
            f"{c.DCGM_FB_USED.name}{{{labels}}} 70000",
            f"{c.DCGM_FB_FREE.name}{{{labels}}} 11000",
        ]
    return "\n".join(lines) + "\n" + extra


def _counted(finished: list[float], preempted: list[float]) -> str:
    """Each engine's finished requests and preemptions so far (counters)."""
    lines = []
    for n, (done, evicted) in enumerate(zip(finished, preempted, strict=True)):
        labels = f'{ENGINE},engine="{n}"'
        lines += [
            f'{c.VLLM_REQUEST_SUCCESS.name}{{{labels},finished_reason="stop"}} {done}',
            f"{c.VLLM_NUM_PREEMPTIONS.name}{{{labels}}} {evicted}",
        ]
    return "\n".join(lines) + "\n"


def _read(page: str):
    samples, _ = promtext.parse_lenient(page)
    return diagnose(compute(MEASURES, [(0.0, samples), (10.0, samples)], "pages"), 0, 10, "pages")


def test_one_of_four_dp_engines_swamped_while_its_siblings_idle_is_an_imbalance():
    result = _read(_engines([60, 0, 0, 0], [64, 3, 2, 4], [0.97, 0.1, 0.08, 0.12]) + _gpus(4))
    assert result.bottleneck == "load_imbalance", result.summary
    hot = result.incidents[0]
    assert {a.get("engine") for a in hot.cause.affected} >= {"0"}


def test_dp_engines_evenly_busy_are_no_imbalance():
    result = _read(_engines([10, 11, 9, 12], [64, 64, 63, 64], [0.7, 0.72, 0.69, 0.71]) + _gpus(4))
    assert "load_imbalance" not in {i.id for i in result.incidents}, result.summary


def test_thermal_events_in_the_exporters_window_are_read_from_one_page():
    labels = GPU.format(i=0)
    events = (
        f'{c.DCGM_EXP_CLOCK_EVENTS.name}{{{labels},clock_event="hw_thermal",window_size_in_ms="300000"}} 14\n'
        f'{c.DCGM_EXP_CLOCK_EVENTS.name}{{{labels},clock_event="sw_power_cap",window_size_in_ms="300000"}} 0\n'
    )
    result = _read(_engines([0], [20], [0.4]) + _gpus(1, events, clock=1200.0))
    thermal = [i for i in result.incidents if i.id == "thermal_power_throttling"]
    assert thermal and "temperature" in thermal[0].summary, result.summary


def test_impossible_readings_are_dropped_with_a_note_not_printed():
    page = _engines([0], [20], [1.7]) + _gpus(1)
    page += f"{c.DCGM_GR_ENGINE_ACTIVE.name}{{{GPU.format(i=0)}}} 3.5\n{c.DCGM_GPU_UTIL.name}{{{GPU.format(i=1)}}} -4\n"
    result = _read(page)
    assert "kv_cache_exhaustion" not in {i.id for i in result.incidents}, result.summary
    said = " ".join(result.notes)
    assert "kv_usage_max: 1 value(s) dropped (impossible: 1.7 outside 0..1)" in said, result.notes
    assert "gr_active_avg: 1 value(s) dropped (impossible: 3.5 outside 0..1)" in said
    assert "gpu_util_avg: 1 value(s) dropped (negative)" in said
    assert "170%" not in result.summary and "1.7" not in result.summary


def test_one_engine_saturated_at_the_same_request_rate_as_its_siblings_is_not_an_imbalance():
    # its own requests grew (longer prompts): the same arrivals everywhere, one pool full
    page = _engines([110, 0, 0, 0], [64, 30, 28, 31], [0.98, 0.45, 0.4, 0.5])
    first = promtext.parse_lenient(page + _counted([0, 0, 0, 0], [0, 0, 0, 0]))[0]
    last = promtext.parse_lenient(page + _counted([40, 40, 40, 40], [8, 0, 0, 0]))[0]
    result = diagnose(compute(MEASURES, [(0.0, first), (10.0, last)], "pages"), 0, 10, "pages")
    assert "load_imbalance" not in {i.id for i in result.incidents}, result.summary
    assert result.bottleneck == "kv_cache_exhaustion", result.summary


def test_saturated_dp_ranks_sent_far_more_than_siblings_with_room_are_an_imbalance():
    # vllm-project/vllm#36748: two ranks stacked (KV full, a queue), the others have room
    page = _engines([110, 110, 0, 0], [51, 51, 6, 6], [0.99, 0.99, 0.3, 0.3])
    first = promtext.parse_lenient(page + _counted([0, 0, 0, 0], [0, 0, 0, 0]))[0]
    last = promtext.parse_lenient(page + _counted([60, 60, 10, 10], [3, 3, 0, 0]))[0]
    result = diagnose(compute(MEASURES, [(0.0, first), (10.0, last)], "pages"), 0, 10, "pages")
    assert result.bottleneck == "load_imbalance", result.summary
    assert "have room and are sent 1.00 requests/s at most against 6.00/s" in result.summary
    assert "kv_cache_exhaustion" in result.incidents[0].explains
