"""The gateway in front of a stand-in for vLLM's app: every route guarded, hostile input a JSON
4xx, limits that cannot be walked around, quotas that cannot be gamed.

The stand-in records what reached "the engine"; the real engine is in
tests/integration/test_gateway_security.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from serving.admission import AdmissionPolicy
from serving.gateway import Gateway
from serving.gateway_config import GatewayConfig
from serving.metrics import ServingMetrics
from serving.prompts import TokenizerCounter
from serving.quota import TenantQuotas
from serving.request_tags import FinishedPart, RequestTags

KEY, ADMIN = "sk-acme", "sk-admin"
CONFIG = {
    "tiers": {"gold": {"max_tokens": 50, "tokens_per_minute": 10_000, "max_n": 4, "max_logprobs": 5}},
    "tenants": {"acme": {"tier": "gold", "api_keys": [KEY]}},
}


class _Words:
    def encode(self, text: str, /) -> list[int]:
        return [1] * max(1, len(text.split()))

    def apply_chat_template(self, messages: Any, /, **kwargs: Any) -> Any:
        raise NotImplementedError


class _Engine:
    """vLLM's app stand-in: answers 200 with what it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any] | None]] = []

    async def __call__(self, scope, receive, send) -> None:
        raw = b""
        if scope["type"] == "http":
            while True:
                message = await receive()
                raw += message.get("body", b"")
                if not message.get("more_body"):
                    break
        body = json.loads(raw) if raw else None
        self.seen.append((scope["method"], scope["path"], body))
        out = json.dumps({"ok": True}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out, "more_body": False})


def _gateway(config: dict[str, Any] | None = None, **kwargs: Any) -> tuple[Gateway, _Engine]:
    engine = _Engine()
    policy = AdmissionPolicy(
        GatewayConfig.model_validate(config if config is not None else CONFIG),
        max_model_len=1000,
        served_names=["m"],
        qos_enabled=True,
        quotas=TenantQuotas(),
    )

    async def abort(ids: list[str]) -> None:
        return None

    gateway = Gateway(
        engine,
        policy=policy,
        counter=kwargs.pop("counter", TokenizerCounter(_Words())),
        metrics=ServingMetrics(CollectorRegistry()),
        tags=RequestTags(),
        abort=abort,
        model_name="m",
        **kwargs,
    )
    gateway.ready = True
    return gateway, engine


def _request(
    gateway: Gateway,
    method: str,
    path: str,
    body: Any = None,
    *,
    key: str | bytes | None = KEY,
    raw: bytes | None = None,
    headers: dict[str, Any] | None = None,
) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            sent = dict(headers or {})
            if key is not None:
                sent["authorization"] = b"Bearer " + (key if isinstance(key, bytes) else key.encode())
            content = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            return await client.request(method, path, content=content, headers=sent)

    return asyncio.run(go())


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json", response.text
    return response.json()["error"]


COMPLETION = {"model": "m", "prompt": "zaba kelo", "max_tokens": 5}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "zaba"}], "max_tokens": 5}


# --- 1. deny by default ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", COMPLETION),
        ("/v1/chat/completions", CHAT),
        ("/invocations", COMPLETION),
        ("/invocations", CHAT),
        ("/v1/responses", {"model": "m", "input": "zaba", "max_output_tokens": 5}),
        ("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "zaba"}], "max_tokens": 5}),
        ("/v1/chat/completions/batch", {"model": "m", "messages": [CHAT["messages"]] * 2, "max_tokens": 5}),
    ],
)
def test_every_generation_route_needs_a_key_and_passes_admission(path, body):
    gateway, engine = _gateway()
    assert _request(gateway, "POST", path, body, key=None).status_code == 401
    assert (
        _request(
            gateway,
            "POST",
            path,
            {**body, "max_tokens": 100000, "max_output_tokens": 100000}
            if "input" in body
            else {**body, "max_tokens": 100000},
        ).status_code
        == 200
    )
    _method, seen_path, forwarded = engine.seen[-1]
    assert seen_path == path
    budget = "max_output_tokens" if "input" in body else "max_tokens"
    assert forwarded[budget] == 50  # clamped to the tier, not 100000 untouched
    assert len(engine.seen) == 1


def test_metadata_routes_need_a_key_and_metrics_stays_open():
    gateway, _engine = _gateway()
    for path in ("/v1/models", "/health", "/version"):
        assert _request(gateway, "GET", path, key=None).status_code == 401
        assert _request(gateway, "GET", path).status_code == 200
    assert _request(gateway, "POST", "/tokenize", {"prompt": "zaba"}, key=None).status_code == 401
    assert _request(gateway, "GET", "/metrics", key=None).status_code == 200
    assert _request(gateway, "GET", "/ready", key=None).json() == {"status": "ready"}


def test_admin_routes_are_404_unless_an_admin_key_is_configured():
    gateway, engine = _gateway()
    for path in ("/reset_prefix_cache", "/sleep", "/collective_rpc", "/v1/load_lora_adapter", "/start_profile"):
        response = _request(gateway, "POST", path, {})
        assert response.status_code == 404 and _error(response)["code"] == "not_found"
    gateway, engine = _gateway({**CONFIG, "admin_keys": [ADMIN]})
    assert _request(gateway, "POST", "/reset_prefix_cache", {}).status_code == 401  # a tenant key is not enough
    assert _request(gateway, "POST", "/reset_prefix_cache", {}, key=ADMIN).status_code == 200
    assert [p for _, p, _ in engine.seen] == ["/reset_prefix_cache"]


def test_unknown_routes_and_methods_are_json_404_and_405():
    gateway, engine = _gateway()
    response = _request(gateway, "POST", "/v1/nothing-here", {})
    assert response.status_code == 404 and "no route" in _error(response)["message"]
    response = _request(gateway, "GET", "/v1/completions")
    assert response.status_code == 405 and _error(response)["type"] == "invalid_request_error"
    assert not engine.seen


def test_root_path_is_stripped_before_classification():
    gateway, engine = _gateway(root_path="/api")
    assert _request(gateway, "POST", "/api/v1/chat/completions", CHAT, key=None).status_code == 401
    response = _request(gateway, "POST", "/api/v1/chat/completions", {**CHAT, "max_tokens": 9999})
    assert response.status_code == 200 and engine.seen[-1][2]["max_tokens"] == 50


# --- 2. count what the engine will see ---------------------------------------------------------


def test_the_length_check_comes_before_tokenising():
    class Counting(TokenizerCounter):
        calls = 0

        async def completion(self, body):
            Counting.calls += 1
            return await super().completion(body)

    gateway, engine = _gateway(counter=Counting(_Words()))
    huge = "x" * (1000 * 64 + 1)  # more bytes than any 1000-token context can hold
    response = _request(gateway, "POST", "/v1/completions", {"model": "m", "prompt": huge})
    assert response.status_code == 400 and _error(response)["code"] == "context_length_exceeded"
    assert Counting.calls == 0 and not engine.seen


def test_tools_are_charged_and_steer_the_qos_class():
    gateway, engine = _gateway()
    tools = [{"type": "function", "function": {"name": "f", "description": "kelo " * 900}}]
    response = _request(gateway, "POST", "/v1/chat/completions", {**CHAT, "tools": tools, "priority": 0})
    assert response.status_code == 200
    # 900 words of tool schema: the 'standard' class (513-4096 tokens), not 'interactive'
    assert engine.seen[-1][2]["priority"] >= 1000


# --- 3. bounded fields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {**COMPLETION, "n": 5}, "n"),
        ("/v1/completions", {**COMPLETION, "best_of": 9}, "best_of"),
        ("/v1/completions", {**COMPLETION, "logprobs": 6}, "logprobs"),
        ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 6}, "top_logprobs"),
        ("/v1/completions", {**COMPLETION, "priority": -5}, "priority"),
        ("/v1/completions", {**COMPLETION, "priority": 2**63}, "priority"),
        ("/v1/completions", {**COMPLETION, "max_tokens": 2**64}, "max_tokens"),
        ("/v1/completions", {**COMPLETION, "seed": 2**70}, "seed"),
    ],
)
def test_out_of_bounds_fields_are_400_naming_the_field(path, body, param):
    gateway, engine = _gateway()
    response = _request(gateway, "POST", path, body)
    assert response.status_code == 400
    assert _error(response)["param"] == param
    assert not engine.seen


def test_a_client_can_lower_its_priority_never_raise_it():
    gateway, engine = _gateway()
    _request(gateway, "POST", "/v1/completions", COMPLETION)
    _request(gateway, "POST", "/v1/completions", {**COMPLETION, "priority": 3})
    first, lowered = (body["priority"] for _, _, body in engine.seen)
    assert lowered > first


# --- 4. malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "raw", "code"),
    [
        ("100k-deep array", b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "invalid_json"),
        ("5000-digit integer", b'{"prompt": "a", "max_tokens": ' + b"9" * 5000 + b"}", "invalid_json"),
        ("lone surrogate", b'{"model": "m", "prompt": "a \\ud800 b"}', "invalid_request"),
        ("not UTF-8", b'{"prompt": "\xff\xfe"}', "invalid_json"),
        ("NaN", b'{"prompt": "a", "temperature": NaN}', "invalid_json"),
        ("overflowing float", b'{"prompt": "a", "temperature": 1e999}', "invalid_json"),
        ("empty", b"", "invalid_json"),
        ("array body", b"[1, 2]", "invalid_request"),
    ],
)
def test_malformed_bodies_are_json_400(case, raw, code):
    gateway, engine = _gateway()
    response = _request(gateway, "POST", "/v1/completions", raw=raw)
    assert response.status_code == 400, case
    assert _error(response)["code"] == code, case
    assert not engine.seen


def test_a_non_ascii_bearer_key_is_a_401():
    gateway, _ = _gateway()
    response = _request(gateway, "POST", "/v1/completions", COMPLETION, key="sk-\u00e9\u00e9".encode())
    assert response.status_code == 401 and _error(response)["type"] == "authentication_error"


def test_an_unexpected_failure_is_a_json_500_and_the_next_request_is_served():
    class Broken(TokenizerCounter):
        async def completion(self, body):
            raise RuntimeError("boom")

    gateway, _engine = _gateway(counter=Broken(_Words()))
    response = _request(gateway, "POST", "/v1/completions", COMPLETION)
    assert response.status_code == 500 and "internal error" in _error(response)["message"]
    assert _request(gateway, "POST", "/v1/chat/completions", CHAT).status_code == 200


def test_fields_the_gateway_owns_are_refused():
    gateway, engine = _gateway()
    for field, value in (("request_id", "cmpl-x"), ("kv_transfer_params", {"prompt_token_ids": [1]})):
        response = _request(gateway, "POST", "/v1/chat/completions", {**CHAT, field: value})
        assert response.status_code == 400 and _error(response)["param"] == field
    assert not engine.seen


# --- 5. quotas that cannot be gamed ----------------------------------------------------------


def test_rate_limit_headers_as_openai_sends_them():
    gateway, _ = _gateway()
    response = _request(gateway, "POST", "/v1/completions", COMPLETION)
    assert response.headers["x-ratelimit-limit-tokens"] == "10000"
    assert int(response.headers["x-ratelimit-remaining-tokens"]) < 10000
    assert response.headers["x-ratelimit-reset-tokens"].endswith(("ms", "s"))


def test_a_replayed_or_foreign_engine_id_refunds_nothing():
    gateway, _ = _gateway()
    _request(gateway, "POST", "/v1/completions", {**COMPLETION, "n": 2})
    (request_id,) = gateway.tags._tags  # the request's own tag, kept for late stats
    for engine_id in (f"chatcmpl-{request_id}", f"x-cmpl-{request_id}-0", f"cmpl-{request_id}-0-extra"):
        assert gateway.tags.claim(engine_id) is None  # not this request's engine id: no refund
    # n=2: the two samples of the prompt share its engine id, and count twice, no more
    assert gateway.tags.claim(f"cmpl-{request_id}-0") is not None
    assert gateway.tags.claim(f"cmpl-{request_id}-0-1a2b3c4d") is not None  # with the engine's suffix
    assert gateway.tags.claim(f"cmpl-{request_id}-0") is None  # a replay counts nothing
    assert gateway.tags.claim(f"cmpl-{request_id}-1") is None  # one prompt: there is no -1


class _Reporting(_Engine):
    """vLLM's app stand-in that, like vLLM, reports the request's finished part (the stat
    logger's claim) before its last byte goes out."""

    def __init__(self, tags: RequestTags) -> None:
        super().__init__()
        self.tags = tags

    async def __call__(self, scope, receive, send) -> None:
        async def reported(message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                (request_id,) = self.tags._tags
                _report(self.tags, f"cmpl-{request_id}-0")
            await send(message)

        await super().__call__(scope, receive, reported)


def _report(tags: RequestTags, engine_id: str) -> None:
    tag = tags.claim(engine_id)
    assert tag is not None and tag.on_finished is not None
    part = FinishedPart("length", 3, 5, 5, 0.01, 0.05, 0.2, 0.06)
    tag.finished.append(part)
    tag.on_finished(part)


def test_a_tag_is_dropped_once_its_parts_are_reported_not_kept_a_minute():
    gateway, _ = _gateway()
    gateway.app = _Reporting(gateway.tags)
    assert _request(gateway, "POST", "/v1/completions", COMPLETION).status_code == 200
    assert len(gateway.tags) == 0  # reported before the last byte, as vLLM does: nothing left to wait for

    gateway, _ = _gateway()  # reported after the response: kept until the part arrives, then dropped
    assert _request(gateway, "POST", "/v1/completions", COMPLETION).status_code == 200
    (request_id,) = gateway.tags._tags
    _report(gateway.tags, f"cmpl-{request_id}-0")
    assert len(gateway.tags) == 0
    assert gateway.tags.claim(f"cmpl-{request_id}-0") is None  # and a replay finds nothing


class _Streamer:
    """Streams `events` chunks, then waits for the client; `status` other than 200 refuses."""

    def __init__(self, events: int, status: int = 200, chat: bool = False) -> None:
        self.events, self.status, self.chat = events, status, chat

    async def __call__(self, scope, receive, send) -> None:
        await receive()  # the body
        if self.status != 200:
            await send({"type": "http.response.start", "status": self.status, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": {}}', "more_body": False})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        if self.chat:  # chat's first chunk: the role, no output
            role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
            await send({"type": "http.response.body", "body": role, "more_body": True})
        for i in range(self.events):
            field = f'"delta":{{"content":"t{i}"}}' if self.chat else f'"text":"t{i}"'
            chunk = f'data: {{"choices":[{{"index":0,{field}}}]}}\n\n'.encode()  # compact, as vLLM writes it
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await receive()  # the client goes away mid-stream


def _stream_once(engine: Any, path: str = "/v1/completions") -> tuple[Gateway, list[dict[str, Any]]]:
    """One streamed completion (prompt 'zaba kelo': 2 tokens, max_tokens 5), or chat, on a frozen clock."""
    gateway, _ = _gateway()
    gateway.app = engine
    gateway.policy.quotas = TenantQuotas(clock=lambda: 0.0)
    body = json.dumps({**(CHAT if path == "/v1/chat/completions" else COMPLETION), "stream": True}).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}, {"type": "http.disconnect"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"authorization", b"Bearer " + KEY.encode())],
    }
    asyncio.run(gateway(scope, receive, send))
    return gateway, sent


def test_a_failure_after_the_answer_began_sends_no_second_answer():
    class Failing(_Streamer):
        async def __call__(self, scope, receive, send) -> None:
            await receive()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send(
                {"type": "http.response.body", "body": b'data: {"choices":[{"text":"a"}]}\n\n', "more_body": True}
            )
            raise RuntimeError("the engine died mid-stream")

    _, sent = _stream_once(Failing(1))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]  # no 500 after a 200


def _charged(gateway: Gateway, kind: str) -> float:
    return (
        gateway.metrics.registry.get_sample_value("kvscope_gateway_tokens_total", {"tenant": "acme", "kind": kind})
        or 0.0
    )


def test_a_client_that_leaves_mid_stream_is_charged_for_what_it_was_sent():
    gateway, sent = _stream_once(_Streamer(events=3))
    assert sum(1 for m in sent if m["type"] == "http.response.body") == 3
    bucket = gateway.policy.quotas.get("acme")
    assert bucket.available() == 10_000 - 2 - 3  # the prompt and the 3 tokens sent, not max_tokens 5
    assert (_charged(gateway, "prompt"), _charged(gateway, "completion")) == (2, 3)


def test_a_chat_client_that_leaves_mid_stream_is_charged_for_the_content_it_was_sent():
    gateway, sent = _stream_once(_Streamer(events=3, chat=True), "/v1/chat/completions")
    assert sum(1 for m in sent if m["type"] == "http.response.body") == 4  # the role chunk and 3 tokens
    assert _charged(gateway, "completion") == 3  # not the role chunk


def test_a_request_the_engine_refuses_is_refunded_in_full():
    gateway, _sent = _stream_once(_Streamer(events=0, status=400))
    assert gateway.policy.quotas.get("acme").available() == 10_000
    assert (_charged(gateway, "prompt"), _charged(gateway, "completion")) == (0, 0)


def test_a_body_that_is_not_declared_json_is_a_415():
    gateway, engine = _gateway()
    response = _request(gateway, "POST", "/v1/completions", COMPLETION, headers={"content-type": "text/plain"})
    assert response.status_code == 415 and _error(response)["code"] == "unsupported_media_type"
    ok = _request(
        gateway, "POST", "/v1/completions", COMPLETION, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert ok.status_code == 200 and not engine.seen[:-1]


_EVENTS = [
    (b'data: {"choices":[{"index":0,"text":"ka","logprobs":null}]}\n\n', 1),
    (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', 0),  # chat's role chunk
    (b'data: {"choices":[{"delta":{"content":"ka"}}]}\n\ndata: {"choices":[{"delta":{"content":"lo"}}]}\n\n', 2),
    (b'event: response.created\ndata: {"type":"response.created"}\n\n', 0),
    (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"ka"}\n\n', 1),
    (b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"ka"}}\n\n', 1),
    (b'data: {"choices":[],"usage":{"completion_tokens":5}}\n\ndata: [DONE]\n\n', 0),
    (b'data: {"choices":[{"delta":{"content":"","tool_calls":[{"id":"c"}]}}]}\n\n', 1),  # a tool call
    (b'data: {"choices":[{"delta":{"content":""}}]}\n\ndata: {"choices":[{"text":"\\"q"}]}\n\n', 1),
    (b'data: {"choices":[{"delta":{"reasoning":"hm"}}]}', 1),  # an event split across chunks
    (b'data: {"choices":[{"text":"","finish_reason":"length"}]}\n\n', 0),  # the finish chunk
    (b'data: {"choices":[{"text":"","delta":{"content":"ka"}}]}\n\n', 1),  # an empty field, then text
    (b'data: {"choices":[{"text":"', 1),  # cut right after the field: the regex's answer too
    (b'data: {"choices":[{"delta":{"content":"ka"}}]}\n\ndata: [DONE]\n\n', 1),  # the last token and [DONE]
    (b'data: {"choices":[{"text":"ka"}]}\n\ndata: {"choices":[{"text":"lo"}]}\n\n', 2),
]


@pytest.mark.parametrize(("chunk", "events"), _EVENTS)
def test_only_events_with_generated_output_are_charged(chunk, events):
    from serving.gateway import _CHAT_COMMON, output_events

    assert output_events(chunk) == events
    assert output_events(chunk, _CHAT_COMMON) == events  # the order chat streams look in


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_what_a_stream_is_charged_is_what_its_chunks_carry(path):
    """The gateway's inline check on each chunk (vLLM's one-token events) and output_events on
    any other: a client gone mid-stream is charged the output events of every chunk it was sent."""

    class Chunks(_Streamer):
        async def __call__(self, scope, receive, send) -> None:
            await receive()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            for chunk, _ in _EVENTS:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": bytearray(_EVENTS[0][0]), "more_body": True})
            await receive()  # the client goes away mid-stream

    gateway, sent = _stream_once(Chunks(0), path)
    assert sum(1 for m in sent if m["type"] == "http.response.body") == len(_EVENTS) + 1
    assert _charged(gateway, "completion") == sum(events for _, events in _EVENTS) + 1


@pytest.mark.parametrize("common", ["completions", "chat"])
def test_the_fast_path_agrees_with_the_full_pattern_on_every_event(common):
    import itertools

    from serving.gateway import _CHAT_COMMON, _COMMON, _OUTPUT, _carries_output

    fields = _COMMON if common == "completions" else _CHAT_COMMON

    parts = [b'"text":"', b'"text":""', b'"content":"', b'"content":""', b"ka", b'"', b"{", b'"tool_calls":[']
    parts += [b'"reasoning":"x"', b"response.output_text.delta", b'"type":"content_block_delta"', b"\\"]
    for n in range(1, 4):
        for pieces in itertools.product(parts, repeat=n):
            event = b"data: " + b"".join(pieces)
            assert _carries_output(event, fields) == (_OUTPUT.search(event) is not None), event


def test_a_request_budget_gives_openais_request_headers_and_a_429():
    config = {**CONFIG, "tiers": {"gold": {**CONFIG["tiers"]["gold"], "requests_per_minute": 2}}}
    gateway, _ = _gateway(config)
    gateway.policy.request_quotas = TenantQuotas(clock=lambda: 0.0)
    first = _request(gateway, "POST", "/v1/completions", COMPLETION)
    assert first.headers["x-ratelimit-limit-requests"] == "2" and first.headers["x-ratelimit-remaining-requests"] == "1"
    assert "x-ratelimit-remaining-tokens" in first.headers
    assert _request(gateway, "POST", "/v1/completions", COMPLETION).status_code == 200
    third = _request(gateway, "POST", "/v1/completions", COMPLETION)
    assert third.status_code == 429 and _error(third)["code"] == "request_quota_exhausted"
    assert third.headers["x-ratelimit-remaining-requests"] == "0" and int(third.headers["retry-after"]) >= 1


def test_metadata_bodies_are_checked_as_strictly_as_generation_bodies():
    gateway, engine = _gateway()
    response = _request(gateway, "POST", "/tokenize", raw=b"[" * 10_000)
    assert response.status_code == 400 and _error(response)["code"] == "invalid_json"
    assert _request(gateway, "POST", "/tokenize", {"prompt": "zaba"}).status_code == 200
    assert engine.seen == [("POST", "/tokenize", {"prompt": "zaba"})]


def test_the_responses_api_is_charged_under_the_ids_vllm_gives_its_turns():
    gateway, engine = _gateway()
    _request(gateway, "POST", "/v1/responses", {"model": "m", "input": "zaba", "max_output_tokens": 5})
    (request_id,) = gateway.tags._tags
    assert engine.seen[-1][2]["request_id"] == f"resp_{request_id}"  # the body names the engine request
    assert gateway.tags.claim(f"resp_{request_id}_0") is not None  # vLLM's first turn
    assert gateway.tags.claim(f"resp_{request_id}_0") is None


def test_embeddings_take_the_whole_admission_path():
    config = {**CONFIG, "tiers": {"gold": {**CONFIG["tiers"]["gold"], "max_request_tokens": 5}}}
    gateway, engine = _gateway(config)
    assert _request(gateway, "POST", "/v1/embeddings", {"model": "m", "input": "zaba"}, key=None).status_code == 401
    response = _request(gateway, "POST", "/v1/embeddings", {"model": "m", "input": ["zaba kelo", "mu"]})
    assert response.status_code == 200 and response.headers["x-kvscope-prompt-tokens"] == "3"
    assert "max_tokens" not in engine.seen[-1][2]  # nothing to clamp
    over = _request(gateway, "POST", "/v1/embeddings", {"model": "m", "input": "a b c d e f"})
    assert over.status_code == 413 and _error(over)["code"] == "request_too_large"
    (request_id, *_) = gateway.tags._tags
    assert gateway.tags.claim(f"embd-{request_id}-0") is not None


def test_a_route_the_model_does_not_mount_is_a_json_404():
    gateway, engine = _gateway(mounted=frozenset({"/v1/embeddings", "/metrics"}))
    response = _request(gateway, "POST", "/v1/completions", COMPLETION)
    assert response.status_code == 404 and "not served for this model" in _error(response)["message"]
    assert _request(gateway, "GET", "/ready", key=None).status_code == 200
    assert not engine.seen


def test_each_answer_says_what_the_gateway_cost_it():
    import re

    gateway, _ = _gateway()
    response = _request(gateway, "POST", "/v1/completions", {"model": "m", "prompt": "zaba", "max_tokens": 5})
    assert response.status_code == 200
    overhead = float(response.headers["x-kvscope-overhead-ms"])
    timing = response.headers["server-timing"]
    parts = dict(re.findall(r"(\w+);dur=([0-9.]+)", timing))
    assert set(parts) == {"admission", "queue", "engine"}, timing
    assert float(parts["admission"]) == overhead >= 0 and float(parts["queue"]) >= 0
    # a refusal costs nothing of the engine's: no engine entry
    refused = _request(gateway, "POST", "/v1/completions", {"model": "m", "prompt": "zaba"}, key=None)
    assert refused.status_code == 401 and "engine;" not in refused.headers.get("server-timing", "")


class _Headers(_Engine):
    """The stand-in, also keeping the headers each request reached it with."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[dict[bytes, bytes]] = []

    async def __call__(self, scope, receive, send) -> None:
        self.headers.append(dict(scope["headers"]))
        await super().__call__(scope, receive, send)


TRACE_ID, SPAN_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def _forwarded_traceparents(tracer: Any, sent: list[dict[str, str]]) -> list[bytes | None]:
    engine = _Headers()
    gateway, _ = _gateway(tracer=tracer)
    gateway.app = engine
    for headers in sent:
        assert _request(gateway, "POST", "/v1/completions", COMPLETION, headers=headers).status_code == 200
    return [seen.get(b"traceparent") for seen in engine.headers]


def test_with_no_tracer_a_clients_trace_context_reaches_the_engine_unchanged():
    valid = f"00-{TRACE_ID}-{SPAN_ID}-01"
    forwarded = _forwarded_traceparents(None, [{"traceparent": valid}, {}, {"traceparent": "00-zz-yy-01"}])
    # the engine's spans join the client's trace; none is invented; a malformed one goes no further
    assert forwarded == [valid.encode(), None, None]


def test_with_a_tracer_the_engine_is_the_gateways_child_in_the_clients_trace():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from serving import tracing

    tracer, provider = tracing.make_tracer(InMemorySpanExporter())
    assert provider is not None
    try:
        joined, started = _forwarded_traceparents(tracer, [{"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01"}, {}])
    finally:
        provider.shutdown()
    assert joined is not None and started is not None
    _, trace_id, parent, flags = joined.decode().split("-")
    assert (trace_id, flags) == (TRACE_ID, "01") and parent != SPAN_ID  # the gateway's span, in the client's trace
    assert started.decode().split("-")[1] != TRACE_ID  # a request without one starts its own trace


def test_a_websocket_handshake_keeps_the_clients_header_spelling_and_is_still_read():
    """uvicorn's websocket handshake passes header names as the client spelled them (its HTTP
    parsers lowercase them): a websocket's Authorization is found in either spelling."""
    from serving.gateway import bearer

    for name in (b"authorization", b"Authorization", b"AUTHORIZATION"):
        assert bearer({"type": "websocket", "headers": [(name, b"Bearer sk-x")]}) == b"sk-x"
    assert bearer({"type": "http", "headers": [(b"authorization", b"Bearer sk-x")]}) == b"sk-x"
