"""The mock engine core answers like an engine: max_tokens tokens per request, `chunk` per
step, the last one with a finish reason, nothing after an abort."""

from __future__ import annotations

import argparse
import asyncio

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
