"""An engine core that answers without compute, for measuring the frontend alone.

    python -m bench.mock_engine [--chunk N] vllm  VLLM-SERVE-ARGS...   # vLLM's own OpenAI server
    python -m bench.mock_engine [--chunk N] kvscope KVSCOPE-SERVE-ARGS...  # kvscope serve
    python -m bench.mock_engine --count-calls FILE ...  # cProfile the loop from SIGUSR1 to SIGUSR2

Everything above the engine core is vLLM's own and unchanged: the OpenAI app, the renderer
and tokenizer, `AsyncLLM` with its output processor and detokenizer, its stat loggers (and
kvscope's). Only `EngineCoreClient.make_async_mp_client` is replaced, in this process, by a
client whose "engine" emits `chunk` tokens per step for every running request, as fast as the
frontend pulls them, until the request's `max_tokens`, each output with the request's trace
headers as vLLM's scheduler sends them; each step's `EngineCoreOutputs` goes
through vLLM's msgpack encoder and decoder, as it would over the engine's ZMQ socket. So the
frontend does all it does for a real engine and nothing waits for a GPU: the throughput it
reaches is the frontend's ceiling (vllm-project/vllm#43469 measures vLLM's the same way, with
a mock engine behind the external-engine transport).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Pool size the mock reports, so that admission and KV lanes see a large, never-full cache.
MOCK_KV_BLOCKS = 1 << 16


@dataclass
class _Running:
    request_id: str
    remaining: int
    trace_headers: Any = None  # the request's, on each of its outputs, as vLLM's scheduler sends them


class MockEngineCore:
    """The subset of vLLM's `EngineCoreClient` that `AsyncLLM` uses while serving."""

    def __init__(self, vllm_config: Any, chunk: int, step_ms: float = 0.0) -> None:
        from vllm.v1.engine import EngineCoreOutputs
        from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

        self.chunk = chunk
        self.step_s = step_ms / 1000.0  # 0: a step as soon as the frontend asks for one
        self._next_step = 0.0  # when the next paced step is due (the loop's clock)
        self.engine_ranks_managed = [0]
        self.resources = argparse.Namespace(engine_dead=False)
        self._running: dict[str, _Running] = {}
        self._arrived = asyncio.Event()
        self._encoder = MsgpackEncoder()
        self._decoder = MsgpackDecoder(EngineCoreOutputs)
        self._tokens = list(range(1000, 1000 + 64))  # ordinary vocabulary ids: detokenized as text
        vllm_config.cache_config.num_gpu_blocks = MOCK_KV_BLOCKS

    async def get_supported_tasks_async(self) -> tuple[str, ...]:
        return ("generate",)

    async def add_request_async(self, request: Any) -> None:
        params = request.sampling_params
        wanted = params.max_tokens if params is not None and params.max_tokens else 16
        headers = getattr(request, "trace_headers", None)
        self._running[request.request_id] = _Running(request.request_id, int(wanted), headers)
        self._arrived.set()

    async def abort_requests_async(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            self._running.pop(request_id, None)

    async def get_output_async(self) -> Any:
        from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

        while not self._running:
            self._arrived.clear()
            await self._arrived.wait()
        if self.step_s:
            await self._pace()
        outputs = []
        for running in list(self._running.values()):
            n = min(self.chunk, running.remaining)
            running.remaining -= n
            done = running.remaining <= 0
            tokens = [self._tokens[(running.remaining + i) % len(self._tokens)] for i in range(n)]
            outputs.append(
                EngineCoreOutput(
                    request_id=running.request_id,
                    new_token_ids=tokens,
                    finish_reason=FinishReason.LENGTH if done else None,
                    trace_headers=running.trace_headers,
                )
            )
            if done:
                del self._running[running.request_id]
        await asyncio.sleep(0)  # the socket read a real client awaits
        return self._decoder.decode(self._encoder.encode(EngineCoreOutputs(outputs=outputs)))

    async def _pace(self) -> None:
        """Hold each step to its period after the last, as a GPU's decode step would; a frontend
        too slow to ask in time gets the step at once (no catching up in a burst)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._next_step > now:
            await asyncio.sleep(self._next_step - now)
            now = loop.time()
        self._next_step = max(self._next_step, now) + self.step_s

    async def reset_mm_cache_async(self) -> None:
        return None

    async def reset_prefix_cache_async(self, *_: Any, **__: Any) -> bool:
        return True

    async def is_sleeping_async(self) -> bool:
        return False

    def dp_engines_running(self) -> bool:
        return bool(self._running)

    def get_kv_event_sources(self) -> dict[int, Any]:
        return {}

    def shutdown(self, timeout: float | None = None) -> None:
        self._running.clear()


def install(chunk: int, step_ms: float = 0.0) -> None:
    """Make every `AsyncLLM` built in this process use a `MockEngineCore`."""
    from vllm.v1.engine.core_client import EngineCoreClient

    def make_async_mp_client(vllm_config: Any, *_: Any, **__: Any) -> MockEngineCore:
        return MockEngineCore(vllm_config, chunk, step_ms)

    EngineCoreClient.make_async_mp_client = staticmethod(make_async_mp_client)  # type: ignore[method-assign,assignment]


def skip_gateway() -> None:
    """Hand uvicorn the app behind any Gateway it is given (a benchmark's A/B, never served)."""
    import uvicorn

    from serving.gateway import Gateway

    build = uvicorn.Config.__init__

    def config(self: uvicorn.Config, app: Any, *args: Any, **kwargs: Any) -> None:
        build(self, app.app if isinstance(app, Gateway) else app, *args, **kwargs)

    uvicorn.Config.__init__ = config  # type: ignore[method-assign]


def count_calls(path: Path) -> None:
    """cProfile this process's main thread (the event loop) from SIGUSR1 until SIGUSR2, then
    write its stats to `path` (whole: written aside and renamed); `path` + ".on" says it began."""
    import cProfile
    import signal

    profiler = cProfile.Profile()

    def begin(*_: Any) -> None:
        profiler.enable()
        path.with_name(path.name + ".on").touch()  # the benchmark waits for this before it sends

    def end(*_: Any) -> None:
        profiler.disable()
        aside = path.with_name(path.name + ".part")
        profiler.dump_stats(aside)
        aside.replace(path)

    signal.signal(signal.SIGUSR1, begin)
    signal.signal(signal.SIGUSR2, end)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk", type=int, default=1, help="tokens per request per engine step (default 1)")
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="pace the engine's steps this far apart, as a GPU's decode step (default 0: as fast as pulled)",
    )
    parser.add_argument(
        "--skip-gateway",
        action="store_true",
        help="kvscope: uvicorn serves vLLM's app, the gateway built but stepped over (the rest of the process's cost)",
    )
    parser.add_argument(
        "--count-calls", type=Path, metavar="FILE", help="cProfile the event loop from SIGUSR1 to SIGUSR2 into FILE"
    )
    parser.add_argument("server", choices=("vllm", "kvscope"))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.chunk < 1:
        parser.error("--chunk must be at least 1")
    if args.step_ms < 0:
        parser.error("--step-ms must not be negative")
    install(args.chunk, args.step_ms)
    if args.count_calls:
        count_calls(args.count_calls)
    if args.skip_gateway:
        skip_gateway()
    if args.server == "kvscope":
        from kvscope.cli import main as kvscope_main

        return int(kvscope_main(["serve", *args.args]) or 0)
    from vllm.entrypoints.launchers.api_server import entry

    sys.argv = ["vllm", *args.args]
    entry.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
