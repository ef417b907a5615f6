"""The mock engine core answers like an engine: max_tokens tokens per request, `chunk` per
step, the last one with a finish reason, nothing after an abort."""

from __future__ import annotations

import argparse
import asyncio
import itertools

import pytest

from bench.mock_engine import MOCK_KV_BLOCKS, MockEngineCore


def _request(request_id: str, max_tokens: int) -> argparse.Namespace:
    return argparse.Namespace(request_id=request_id, sampling_params=argparse.Namespace(max_tokens=max_tokens))


def _config() -> argparse.Namespace:
    return argparse.Namespace(cache_config=argparse.Namespace(num_gpu_blocks=None))


def test_each_request_gets_its_max_tokens_in_chunks_and_one_finish():
    async def run() -> dict[str, list]:
        config = _config()
        engine = MockEngineCore(config, chunk=3)
        assert config.cache_config.num_gpu_blocks == MOCK_KV_BLOCKS
        await engine.add_request_async(_request("a", 7))
        await engine.add_request_async(_request("b", 2))
        seen: dict[str, list] = {"a": [], "b": []}
        while engine.dp_engines_running():
            step = await engine.get_output_async()
            for out in step.outputs:
                seen[out.request_id].append((len(out.new_token_ids), out.finish_reason is not None))
        return seen

    seen = asyncio.run(run())
    assert seen["a"] == [(3, False), (3, False), (1, True)]
    assert seen["b"] == [(2, True)]


def test_an_aborted_request_gets_nothing_more():
    async def run() -> list[str]:
        engine = MockEngineCore(_config(), chunk=1)
        await engine.add_request_async(_request("a", 5))
        await engine.add_request_async(_request("b", 5))
        first = await engine.get_output_async()
        await engine.abort_requests_async(["a"])
        second = await engine.get_output_async()
        return [o.request_id for o in first.outputs] + [o.request_id for o in second.outputs]

    assert asyncio.run(run()) == ["a", "b", "b"]


def test_an_idle_engine_waits_for_work_instead_of_spinning():
    async def run() -> bool:
        engine = MockEngineCore(_config(), chunk=1)
        step = engine.get_output_async()
        waiting = step.send(None)  # one step of the coroutine: it suspends on the arrival event
        step.close()
        await engine.add_request_async(_request("a", 1))
        found = await engine.get_output_async()
        return isinstance(waiting, asyncio.Future) and [o.request_id for o in found.outputs] == ["a"]

    assert asyncio.run(run())


def test_each_output_carries_its_requests_trace_headers_as_vllms_scheduler_does():
    """vLLM parents its request span on these; without them it copies the environment to look."""

    async def run() -> list[tuple[str, object]]:
        engine = MockEngineCore(_config(), chunk=1)
        traced = _request("a", 2)
        traced.trace_headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
        await engine.add_request_async(traced)
        await engine.add_request_async(_request("b", 2))  # a request with no trace headers
        found = []
        while engine.dp_engines_running():
            found += [(o.request_id, o.trace_headers) for o in (await engine.get_output_async()).outputs]
        return found

    headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert asyncio.run(run()) == [("a", headers), ("b", None)] * 2


def test_a_paced_engine_spaces_its_steps_a_period_apart():
    """--step-ms: a step no sooner than a period after the last, as a GPU's decode step (a busy
    machine only spaces them further, so the test bounds the gap from below)."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        engine = MockEngineCore(_config(), chunk=1, step_ms=20.0)
        await engine.add_request_async(_request("a", 4))
        times = []
        while engine.dp_engines_running():
            await engine.get_output_async()
            times.append(loop.time())
        return times

    times = asyncio.run(run())
    assert len(times) == 4
    assert all(later - earlier >= 0.0195 for earlier, later in itertools.pairwise(times))


@pytest.mark.parametrize(("step_ms", "waits"), [(0.0, False), (50.0, True)])
def test_only_a_paced_engine_waits_on_a_timer_between_steps(step_ms, waits):
    async def run() -> bool:
        engine = MockEngineCore(_config(), chunk=1, step_ms=step_ms)
        await engine.add_request_async(_request("a", 3))
        await engine.get_output_async()
        step = engine.get_output_async()
        suspended = step.send(None)  # unpaced: the bare yield of the socket read it models
        step.close()
        return isinstance(suspended, asyncio.Future)

    assert asyncio.run(run()) is waits
