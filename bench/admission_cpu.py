"""Benchmark: the gateway's CPU per admitted request, after issue 11 (every route guarded,
strict JSON, bounded fields, prompts rendered by vLLM's own renderer).

    .venv/bin/python -m bench.admission_cpu [--requests 2000] [--prompt-words 1500] [--evict-mib 32]

In one process, the real Gateway in front of a stand-in for vLLM's app (it answers 200 at once),
with the counter `kvscope serve` uses: vLLM's OnlineRenderer on the demo model, no engine. Each
request is authenticated, read, parsed, bounded, rendered and counted, admitted (quota, QoS) and
forwarded. CPU time (process_time) per request is reported twice: with rendering, and without
it (the gateway's own work; rendering is work vLLM would otherwise do itself, as the ids are
forwarded so it is not done twice). Target: the gateway's own work under 0.5 ms per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from serving.admission import AdmissionPolicy
from serving.demo_model import SERVED_NAME, ensure_demo_model, synthetic_text
from serving.gateway import Gateway
from serving.gateway_config import GatewayConfig
from serving.inline_render import INLINE_RENDER_CHARS
from serving.metrics import ServingMetrics
from serving.prompts import Counted, VllmCounter, offline_renderer
from serving.quota import TenantQuotas
from serving.request_tags import RequestTags

KEY = b"sk-bench"
CONFIG = GatewayConfig.model_validate(
    {
        "tiers": {"paid": {"max_tokens": 256, "tokens_per_minute": 10**12, "max_request_tokens": 20000}},
        "tenants": {"bench": {"tier": "paid", "api_keys": [KEY.decode()]}},
    }
)


async def _engine(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def _events(path: str, tokens: int) -> list[bytes]:
    """What vLLM streams for `tokens` generated tokens on `path` (one SSE event a token, then [DONE])."""
    if path == "/v1/chat/completions":
        head = b'{"id":"chatcmpl-kvs-0123456789abcdef","object":"chat.completion.chunk","created":1764547200,'
        body = (
            b'"model":"%s","choices":[{"index":0,"delta":{"content":" word%d"},"logprobs":null,"finish_reason":null}]}'
        )
    else:
        head = b'{"id":"cmpl-kvs-0123456789abcdef","object":"text_completion","created":1764547200,'
        body = b'"model":"%s","choices":[{"index":0,"text":" word%d","logprobs":null,"finish_reason":null}]}'
    events = [b"data: " + head + body % (SERVED_NAME.encode(), i) + b"\n\n" for i in range(tokens)]
    return [*events, b"data: [DONE]\n\n"]


def _streaming_engine(events: list[bytes]) -> Any:
    """A stand-in for vLLM's app that streams `events` as StreamingResponse sends them."""

    async def engine(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return engine


class _Precounted:
    """The renderer's counts replayed: the gateway's work without the rendering."""

    def __init__(self, counted: dict[str, Counted]) -> None:
        self.counted = counted

    async def completion(self, body: dict[str, Any]) -> Counted:
        return self.counted["completions"]

    async def chat(self, body: dict[str, Any]) -> Counted:
        return self.counted["chat"]

    async def messages(self, body: dict[str, Any]) -> Counted:
        return self.counted["messages"]

    async def responses(self, body: dict[str, Any]) -> Counted:
        return self.counted["responses"]


def _gateway(counter: Any, engine: Any = _engine) -> Gateway:
    policy = AdmissionPolicy(
        CONFIG, max_model_len=16384, served_names=[SERVED_NAME], qos_enabled=True, quotas=TenantQuotas()
    )

    async def abort(ids: list[str]) -> None:
        return None

    gateway = Gateway(
        engine,
        policy=policy,
        counter=counter,
        metrics=ServingMetrics(CollectorRegistry()),
        tags=RequestTags(),
        abort=abort,
        model_name=SERVED_NAME,
    )
    gateway.ready = True
    return gateway


def _bodies(words: int) -> dict[str, tuple[str, bytes]]:
    import random

    text = synthetic_text(random.Random(3), words)  # 100: about 128 tokens
    tools = [{"type": "function", "function": {"name": "search", "description": synthetic_text(random.Random(4), 40)}}]
    user = [{"role": "user", "content": text}]
    bodies = {
        "completions": ("/v1/completions", {"model": SERVED_NAME, "prompt": text, "max_tokens": 32}),
        "chat": (
            "/v1/chat/completions",
            {"model": SERVED_NAME, "messages": user, "tools": tools, "tool_choice": "none", "max_tokens": 32},
        ),
        "messages": ("/v1/messages", {"model": SERVED_NAME, "messages": user, "max_tokens": 32}),
        "responses": ("/v1/responses", {"model": SERVED_NAME, "input": text, "max_output_tokens": 32}),
    }
    return {name: (path, json.dumps(body).encode()) for name, (path, body) in bodies.items()}


async def _one(gateway: Any, path: str, body: bytes) -> int:
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": "",
        "headers": [(b"authorization", b"Bearer " + KEY), (b"content-type", b"application/json")],
    }
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await gateway(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def _cpu_per_request(gateway: Any, path: str, body: bytes, requests: int) -> float:
    async def many() -> float:
        for _ in range(20):  # warm-up
            assert await _one(gateway, path, body) == 200
        started = time.process_time()
        for _ in range(requests):
            await _one(gateway, path, body)
        return (time.process_time() - started) / requests

    return asyncio.run(many())


def _cold_cpu_per_request(gateway: Any, path: str, body: bytes, requests: int, evict_mib: int) -> float:
    """CPU time (thread time) of each request alone, a buffer of `evict_mib` MiB written before
    each: the caches hold none of the gateway's code and objects, as on a server where vLLM's
    frontend ran for milliseconds between two of its requests. The median, in seconds."""
    buffer, zeros = bytearray(evict_mib << 20), bytes(evict_mib << 20)

    async def many() -> float:
        for _ in range(20):  # warm-up
            assert await _one(gateway, path, body) == 200
        times = []
        for _ in range(requests):
            buffer[:] = zeros
            started = time.thread_time_ns()
            await _one(gateway, path, body)
            times.append(time.thread_time_ns() - started)
        return statistics.median(times) / 1e9

    return asyncio.run(many())


def _count(counter: VllmCounter, name: str, body: bytes) -> Counted:
    """What the renderer counts for one body (the budget left out, as the gateway does)."""
    fields = {k: v for k, v in json.loads(body).items() if not k.startswith("max_")}
    if name == "messages":
        fields["max_tokens"] = 1
    method = "completion" if name == "completions" else name
    return asyncio.run(getattr(counter, method)(fields))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-words", type=int, default=100, help="words of each prompt (100: ~128 tokens)")
    parser.add_argument("--stream-tokens", type=int, default=64, help="tokens of each streamed answer (0: none)")
    parser.add_argument(
        "--inline-chars",
        type=int,
        default=INLINE_RENDER_CHARS,
        help=f"prompts of at most this many characters rendered in place (default {INLINE_RENDER_CHARS}; "
        "0: all in vLLM's thread pool, as vLLM does)",
    )
    parser.add_argument(
        "--evict-mib",
        type=int,
        default=0,
        help="also time each streamed request with this many MiB written before it, the caches emptied "
        "as a busy server's are (0: not; 32 is past this machine's last-level cache)",
    )
    args = parser.parse_args()
    renderer = offline_renderer(str(ensure_demo_model()), args.inline_chars, kv_cache_memory_bytes=1 << 30)
    counter = VllmCounter(renderer)
    bodies = _bodies(args.prompt_words)
    counted = {name: _count(counter, name, body) for name, (_, body) in bodies.items()}
    rendered, own = _gateway(counter), _gateway(_Precounted(counted))

    def median_ms(gateway: Any, path: str, body: bytes) -> float:
        return 1000 * statistics.median(
            _cpu_per_request(gateway, path, body, args.requests) for _ in range(args.rounds)
        )

    print("| route | prompt tokens | gateway's own work, ms CPU | with vLLM's rendering, ms CPU |")
    print("| --- | --- | --- | --- |")
    for name, (path, body) in bodies.items():
        tokens = sum(counted[name].counts)
        print(f"| {path} | {tokens} | {median_ms(own, path, body):.3f} | {median_ms(rendered, path, body):.3f} |")
    if args.stream_tokens:
        print(f"\nStreamed, {args.stream_tokens} tokens a request (one SSE event each), rendering left out:\n")
        _streamed_table(bodies, counted, args.stream_tokens, lambda app, path, body: median_ms(app, path, body))
    if args.stream_tokens and args.evict_mib:
        print(f"\nThe same, {args.evict_mib} MiB written before each request (a median of single requests):\n")
        _streamed_table(
            bodies,
            counted,
            args.stream_tokens,
            lambda app, path, body: 1000 * _cold_cpu_per_request(app, path, body, args.requests // 4, args.evict_mib),
        )


def _streamed_table(
    bodies: dict[str, tuple[str, bytes]], counted: dict[str, Counted], tokens: int, ms: Callable[..., float]
) -> None:
    """The stand-in alone and behind the gateway, streaming `tokens` events, timed by `ms`."""
    print("| route | the stand-in alone, ms CPU | through the gateway, ms CPU | the gateway's own, ms CPU |")
    print("| --- | --- | --- | --- |")
    for name in ("completions", "chat"):
        path, body = bodies[name]
        body = json.dumps({**json.loads(body), "stream": True}).encode()
        engine = _streaming_engine(_events(path, tokens))
        alone, through = ms(engine, path, body), ms(_gateway(_Precounted(counted), engine), path, body)
        print(f"| {path} | {alone:.3f} | {through:.3f} | {through - alone:.3f} |")


if __name__ == "__main__":
    main()
