"""The first phase's screen (diagnosis/screen.py): which engines' latency quantiles the second
phase reads, from the rollups' bounds."""

from __future__ import annotations

from diagnosis import screen
from diagnosis.measures import MEASURES, Measurements, Value
from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.prometheus import QueryFailed
from kvscope.promql import ANY
from kvscope.thresholds import DEFAULTS, Thresholds


def _engine(n: int) -> dict[str, str]:
    return {"namespace": "prod", "pod": f"vllm-{n}", "instance": f"10.0.0.{n}:8000", "model_name": "m"}


def _first_phase(engines: int, **extra: dict[int, float]) -> Measurements:
    m = Measurements()
    m.values["kv_usage_max"] = [Value(0.5, _engine(n), "q") for n in range(engines)]
    for name, per in extra.items():
        m.values[name] = [Value(v, _engine(n), "q") for n, v in per.items()]
    return m


def _query(p99s: dict[str, dict[int, float]]):
    """A Prometheus that answers the bound queries: each rollup's largest p99 per engine."""
    asked: list[str] = []

    def query(expr: str, at: float):
        asked.append(expr)
        for bound in screen.BOUNDS:
            if bound.rollup.name in expr:
                return [(_engine(n), v) for n, v in p99s.get(bound.measure, {}).items()]
        return []

    return query, asked


def _quiet(engines: int) -> dict[str, dict[int, float]]:
    return {
        "ttft_p99": dict.fromkeys(range(engines), 0.2),
        "itl_p99": dict.fromkeys(range(engines), 0.02),
        "queue_p99": dict.fromkeys(range(engines), 0.0),
    }


def test_a_quiet_fleet_reads_no_latency_at_all():
    query, asked = _query(_quiet(100))
    found = screen.screen(query, _first_phase(100), 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert found.selector is None and found.cleared == 100
    assert all(b.rollup.name in q for b, q in zip(screen.BOUNDS, asked, strict=True))
    assert "100 of 100 engines cleared" in found.detail


def test_an_engine_near_a_line_is_read_with_its_instance_only():
    p99s = _quiet(100)
    # 0.8 of the queue-time line: one five-minute span may have crossed it over the whole window
    p99s["queue_p99"][7] = screen.SCREEN_MARGIN * t.QUEUE_TIME_P99.value
    p99s["ttft_p99"][9] = t.TTFT_P99.value * 3
    query, _ = _query(p99s)
    found = screen.screen(query, _first_phase(100), 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert str(found.selector) == '{instance=~"10\\\\.0\\\\.0\\\\.7:8000|10\\\\.0\\\\.0\\\\.9:8000"}'
    assert found.cleared == 98 and found.read == 2


def test_no_bound_refusals_or_speculative_decoding_are_never_cleared():
    p99s = _quiet(100)
    del p99s["itl_p99"][3]  # the rules did not record it: nothing bounds its ITL
    query, _ = _query(p99s)
    first = _first_phase(100, rejection_rate={5: 0.2, 6: 0.0}, spec_accept={8: 0.0})
    found = screen.screen(query, first, 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert found.cleared == 97  # 3 (no bound), 5 (refusing), 8 (speculating, even at 0 accepted)
    assert "10\\\\.0\\\\.0\\\\.6:8000" not in str(found.selector)


def test_the_lines_are_the_configured_ones():
    p99s = _quiet(10)
    p99s["ttft_p99"] = dict.fromkeys(range(10), 0.9)  # under 0.8 of the default lines
    query, _ = _query(p99s)
    tight = Thresholds({t.TTFT_P99.key: (1.0, None)}, "kvscope.yaml")
    assert screen.screen(query, _first_phase(10), 0.0, 1800, ANY, DEFAULTS, recorded=True).selector is None
    assert screen.screen(query, _first_phase(10), 0.0, 1800, ANY, tight, recorded=True).selector == ANY


def test_most_of_the_fleet_uncleared_reads_the_fleet():
    p99s = _quiet(10)
    p99s["queue_p99"] = dict.fromkeys(range(10), 60.0)
    query, _ = _query(p99s)
    found = screen.screen(query, _first_phase(10), 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert found.selector == ANY and "read for the fleet" in found.detail


def test_without_the_rules_the_bound_is_the_rules_expression_as_a_subquery():
    for bound in screen.BOUNDS:
        expr = screen.bound_query(bound, 1800, ANY, recorded=False)
        assert f"[{c.ROLLUP_RATE_WINDOW}]" in expr and f"[30m:{c.ROLLUP_INTERVAL}]" in expr
        assert bound.rollup.name not in expr


def test_the_phases_split_the_measures():
    first, deferred = screen.split(MEASURES)
    assert {m.name for m in deferred} == set(screen.DEFERRED)
    assert len(first) + len(deferred) == len(MEASURES)


def test_a_ttft_tail_past_its_floor_matters_only_with_long_prompts():
    p99s = _quiet(10)
    p99s["ttft_p99"] = dict.fromkeys(range(10), 2 * t.TTFT_TAIL_FLOOR.value)  # far under TTFT_P99
    query, _ = _query(p99s)
    long = t.LONG_PROMPT_TOKENS.value
    first = _first_phase(10, prompt_p50={n: 500.0 for n in range(10)}, prompt_p99={n: 900.0 for n in range(10)})
    assert screen.screen(query, first, 0.0, 1800, ANY, DEFAULTS, recorded=True).selector is None
    first.values["prompt_p99"][4] = Value(long, _engine(4), "q")  # head-of-line is possible there
    found = screen.screen(query, first, 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert found.read == 1 and "10\\\\.0\\\\.0\\\\.4:8000" in str(found.selector)


def test_a_store_that_refuses_the_screen_reads_in_one_phase_or_the_whole_fleet():
    def refuse(expr: str, at: float):
        raise QueryFailed("bad_data: unknown function")

    assert screen.rollups_loaded(refuse, 0.0, ANY) == 0
    found = screen.screen(refuse, _first_phase(5), 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert found.selector == ANY and found.cleared == 0


def test_with_long_prompts_an_even_tail_is_cleared_by_its_medians():
    p99s = _quiet(10)
    p99s["ttft_p99"] = dict.fromkeys(range(10), 0.65)  # past the floor, far under TTFT_P99
    p99s["ttft_p50"] = dict.fromkeys(range(10), 0.3)  # the tail: at most 0.65 / 0.3 = 2.2x its median
    p99s["itl_p50"] = dict.fromkeys(range(10), 0.02)  # decode: at most 0.02 / 0.02 = 1x
    p99s["ttft_p50"][6] = 0.05  # 13x: head-of-line blocking may be there
    query, _ = _query(p99s)
    prompts = {n: float(t.LONG_PROMPT_TOKENS.value) for n in range(10)}
    first = _first_phase(10, prompt_p50={n: 800.0 for n in range(10)}, prompt_p99=prompts)
    found = screen.screen(query, first, 0.0, 1800, ANY, DEFAULTS, recorded=True)
    assert found.read == 1 and "10\\\\.0\\\\.0\\\\.6:8000" in str(found.selector), found
