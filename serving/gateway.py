"""The gateway: ASGI middleware in front of vLLM's own OpenAI app (the API is not rewritten).

For POST /v1/completions and /v1/chat/completions it authenticates the tenant, reads and
checks the body, counts prompt tokens with the model's tokenizer, applies admission (limits,
quota, QoS priority), tags the request for the stat logger, opens a trace span, propagates
`traceparent`, and enforces the tier's deadline by aborting the request inside the engine
(its KV blocks are freed). Every refusal is an OpenAI-format JSON error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from opentelemetry import trace

from serving import tracing
from serving.admission import Admission, AdmissionPolicy
from serving.errors import Rejection, error_body
from serving.lanes import KvLane
from serving.metrics import ServingMetrics
from serving.request_tags import FinishedPart, RequestTag, RequestTags, new_request_id
from serving.tokens import CHAT, COMPLETIONS, PromptTokens, Tokenizer, prompt_tokens

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GUARDED = (COMPLETIONS, CHAT)
TAG_RETENTION_SECONDS = 60.0  # finished-request stats can trail the response a little
SPAN_WAIT_SECONDS = 5.0
_THREAD_TOKENIZE_BYTES = 64 << 10  # tokenise big prompts off the event loop
_UNKNOWN_TENANT = "unknown"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def send_json(send: Send, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Rejection(400, "client_disconnected", "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Rejection(413, "body_too_large", f"the request body is over {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


@dataclass
class _Exchange:
    """One admitted request on its way through the engine."""

    request_id: str
    path: str
    tenant: str
    tier: str
    admission: Admission
    tag: RequestTag
    deadline: float | None
    status: int | None = None
    started: bool = False
    done: bool = False
    streaming: bool = False
    aborted: bool = False
    held: bool = False  # waited at the gateway for its QoS class's KV share
    span_ended: bool = field(default=False, repr=False)

    @property
    def engine_ids(self) -> list[str]:
        if self.path == COMPLETIONS:
            return [f"cmpl-{self.request_id}-{i}" for i in range(len(self.admission.prompt_tokens))]
        return [f"chatcmpl-{self.request_id}"]

    @property
    def expected_parts(self) -> int:
        return len(self.admission.prompt_tokens) * self.admission.n


def _lane_reading(lane: KvLane, attr: str) -> float:
    return float(getattr(lane, attr))


def _leave(lane: KvLane, waiter: asyncio.Future[bool], tokens: int) -> None:
    """Give up a lane wait: return a grant already made, or withdraw from the queue."""
    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
        lane.release(tokens)
    else:
        waiter.cancel()  # KvLane.acquire hands on a grant that races the cancellation


class ClientGoneError(Exception):
    """The client disconnected while its request waited at the gateway."""


class Gateway:
    """Wraps vLLM's FastAPI app; `ready` and `draining` are set by the server's lifecycle."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        policy: AdmissionPolicy,
        tokenizer: Tokenizer,
        metrics: ServingMetrics,
        tags: RequestTags,
        abort: Callable[[list[str]], Awaitable[None]],
        model_name: str,
        tracer: trace.Tracer | None = None,
        kv_pool_tokens: int | None = None,
    ) -> None:
        self.app = app
        self.policy = policy
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.tags = tags
        self.abort = abort
        self.model_name = model_name
        self.tracer = tracer or trace.NoOpTracer()
        self.ready = False
        self.draining = False
        self.inflight = 0
        self._epoch = time.monotonic()
        self.lanes = self._lanes(kv_pool_tokens)

    def _lanes(self, kv_pool_tokens: int | None) -> dict[str, KvLane]:
        """A KV lane per QoS class with a kv_share, when QoS is on and the pool is known."""
        if not self.policy.qos_enabled or not kv_pool_tokens:
            return {}
        lanes = {}
        for qos_class in self.policy.config.qos.classes:
            if qos_class.kv_share is None:
                continue
            name = qos_class.name
            lane = lanes[name] = KvLane(name, max(1, int(qos_class.kv_share * kv_pool_tokens)))
            self.metrics.lane_tokens.labels(name, "capacity").set(lane.capacity)
            self.metrics.lane_tokens.labels(name, "used").set_function(partial(_lane_reading, lane, "in_use"))
            self.metrics.lane_waiting.labels(name).set_function(partial(_lane_reading, lane, "waiting"))
        return lanes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == "/ready":
            return await self._ready(send)
        if path.startswith("/v1/"):
            if scope["method"] == "POST" and path in GUARDED:
                return await self._guarded(scope, receive, send)
            try:
                self._refuse_when_draining()
                self._authenticate(scope)
            except Rejection as rejection:
                self.metrics.rejections.labels(rejection.reason, _UNKNOWN_TENANT).inc()
                return await send_json(send, rejection.status, rejection.body(), rejection.headers)
        return await self.app(scope, receive, send)

    async def _ready(self, send: Send) -> None:
        state = "draining" if self.draining else "ready" if self.ready else "starting"
        status = 200 if state == "ready" else 503
        await send_json(send, status, json.dumps({"status": state}).encode())

    def _refuse_when_draining(self) -> None:
        if self.draining:
            raise Rejection(503, "draining", "the server is shutting down; retry on another replica")

    def _authenticate(self, scope: Scope) -> tuple[str, str]:
        header = _header(scope, b"authorization") or ""
        key = header[7:].strip() if header[:7].lower() == "bearer " else None
        found = self.policy.config.authenticate(key)
        if found is None:
            message = "invalid API key" if key else "missing API key (Authorization: Bearer <key>)"
            raise Rejection(401, "unauthorized", message)
        return found

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived = time.perf_counter()
        tenant = _UNKNOWN_TENANT
        try:
            self._refuse_when_draining()
            tenant, tier = self._authenticate(scope)
            raw = await read_body(receive, self.policy.config.max_body_bytes)
            try:
                parsed = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise Rejection(400, "invalid_json", f"the request body is not valid JSON: {exc}") from exc
            body = self.policy.check_shape(parsed)
            path = scope["path"]
            tokens: PromptTokens
            if len(raw) > _THREAD_TOKENIZE_BYTES:
                tokens = await asyncio.to_thread(prompt_tokens, path, body, self.tokenizer)
            else:
                tokens = prompt_tokens(path, body, self.tokenizer)
            arrival_ms = int((time.monotonic() - self._epoch) * 1000)
            admission = self.policy.admit(path, body, tenant, tier, tokens.counts, arrival_ms)
        except Rejection as rejection:
            self.metrics.rejections.labels(rejection.reason, tenant).inc()
            return await send_json(send, rejection.status, rejection.body(), rejection.headers)
        forwarded = admission.body
        if tokens.ids is not None:  # vLLM takes the ids and does not tokenise a second time
            forwarded = {**forwarded, "prompt": tokens.ids}
        await self._forward(scope, receive, send, tenant, tier, admission, forwarded, arrived)

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        tenant: str,
        tier: str,
        admission: Admission,
        forwarded_body: dict[str, Any],
        arrived: float,
    ) -> None:
        request_id = new_request_id()
        span = self.tracer.start_span(
            f"POST {scope['path']}",
            context=tracing.extract({k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}),
            kind=trace.SpanKind.SERVER,
            attributes={
                "gen_ai.request.id": request_id,
                "gen_ai.request.model": self.model_name,
                "gen_ai.request.max_tokens": admission.max_tokens,
                "gen_ai.usage.prompt_tokens": sum(admission.prompt_tokens),
                "kvscope.tenant": tenant,
                "kvscope.tier": tier,
                "kvscope.qos_class": admission.qos_class,
                "kvscope.priority": admission.priority,
            },
        )
        tag = RequestTag(tenant, tier, admission.qos_class, admission.priority, span)
        deadline = self.policy.config.tiers[tier].deadline_seconds
        exchange = _Exchange(request_id, scope["path"], tenant, tier, admission, tag, deadline)
        tag.on_finished = lambda part: self._on_part_finished(exchange, part)
        self.tags.add(request_id, tag)

        body = json.dumps(forwarded_body, separators=(",", ":")).encode()
        headers = [
            (k, v)
            for k, v in scope["headers"]
            if k.lower()
            not in (
                b"content-length",
                b"transfer-encoding",
                b"x-request-id",
                b"traceparent",
                b"tracestate",
            )
        ]
        headers += [
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
        ]
        headers += [(k.encode(), v.encode()) for k, v in tracing.inject(span).items()]
        delivered = False

        async def receive_body() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def send_tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.started, exchange.status = True, message["status"]
                extra = [(b"x-request-id", request_id.encode())]
                if admission.clamped_from is not None:
                    extra.append(
                        (
                            b"x-kvscope-max-tokens-clamped",
                            f"{admission.clamped_from}->{admission.max_tokens}".encode(),
                        )
                    )
                message = {**message, "headers": [*message.get("headers", []), *extra]}
                exchange.streaming = any(
                    k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in message["headers"]
                )
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                exchange.done = True
            await send(message)

        self.metrics.requests.labels(tenant, tier, admission.qos_class).inc()
        self.metrics.tokens.labels(tenant, "prompt").inc(sum(admission.prompt_tokens))
        self.metrics.inflight.labels(tenant).inc()
        self._publish_quota(tenant, tier)
        self.inflight += 1
        forwarded = {**scope, "headers": headers}
        self.metrics.gateway_seconds.labels(self.model_name).observe(time.perf_counter() - arrived)
        lane = self.lanes.get(admission.qos_class)
        try:
            async with contextlib.AsyncExitStack() as stack:
                if deadline is not None:
                    remaining = max(0.0, deadline - (time.perf_counter() - arrived))
                    await stack.enter_async_context(asyncio.timeout(remaining))
                if lane is not None:
                    await stack.enter_async_context(self._in_lane(lane, exchange, receive))
                await self.app(forwarded, receive_body, send_tracked)
        except TimeoutError:
            await self._deadline_passed(exchange, send)
        except ClientGoneError:
            exchange.status = 499  # nginx's "client closed request": nothing to send
            self.metrics.rejections.labels("client_disconnected", tenant).inc()
        finally:
            self.inflight -= 1
            self.metrics.inflight.labels(tenant).dec()
            self._settle(exchange)

    @contextlib.asynccontextmanager
    async def _in_lane(self, lane: KvLane, exchange: _Exchange, receive: Receive) -> AsyncIterator[None]:
        """Hold the request until its class's KV share has room; give the room back after."""
        tokens = exchange.admission.reserved_tokens
        if not lane.try_acquire(tokens):
            exchange.held = True
            started = time.perf_counter()
            waiter = asyncio.ensure_future(lane.acquire(tokens, exchange.admission.priority))
            gone = asyncio.ensure_future(receive())  # the body is read: the next message is a disconnect
            try:
                await asyncio.wait((waiter, gone), return_when=asyncio.FIRST_COMPLETED)
            except BaseException:  # the deadline (or shutdown) cancelled the wait
                _leave(lane, waiter, tokens)
                raise
            finally:
                gone.cancel()
            if gone.done() and not gone.cancelled():
                _leave(lane, waiter, tokens)
                raise ClientGoneError
            waited = time.perf_counter() - started
            self.metrics.lane_wait.labels(lane.name).observe(waited)
            exchange.tag.span.set_attribute("kvscope.lane_wait_seconds", waited)
        try:
            yield
        finally:
            lane.release(tokens)

    async def _deadline_passed(self, exchange: _Exchange, send: Send) -> None:
        """Abort inside the engine (frees its KV blocks) and tell the client why."""
        with contextlib.suppress(Exception):
            await self.abort(exchange.engine_ids)
        exchange.aborted = True
        self.metrics.rejections.labels("deadline", exchange.tenant).inc()
        where = (
            f"while waiting at the gateway for the '{exchange.admission.qos_class}' class's KV share"
            if exchange.held and not exchange.started
            else "and was aborted in the engine"
        )
        message = f"the request ran past its deadline of {exchange.deadline:g} s (tier '{exchange.tier}') {where}"
        if not exchange.started:
            exchange.status = 504
            await send_json(send, 504, error_body(504, message, code="deadline_exceeded"))
        elif not exchange.done:
            event = {"error": json.loads(error_body(504, message, code="deadline_exceeded"))["error"]}
            chunk = f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": False})
        exchange.done = True
        exchange.tag.span.set_status(trace.Status(trace.StatusCode.ERROR, "deadline exceeded"))

    def _on_part_finished(self, exchange: _Exchange, part: FinishedPart) -> None:
        bucket = self._bucket(exchange)
        if bucket is not None:
            bucket.refund(exchange.admission.max_tokens - part.generation_tokens)
        if exchange.done and len(exchange.tag.finished) >= exchange.expected_parts:
            self._end_span(exchange)

    def _settle(self, exchange: _Exchange) -> None:
        """After the response: refund what was reserved and not used, end or schedule the span.

        vLLM reports no finished stats for requests aborted from outside (deadline, client
        gone), so their refund happens here: the prompt stays charged, the output is returned.
        """
        bucket = self._bucket(exchange)
        if bucket is not None and not exchange.tag.finished:
            admission = exchange.admission
            if exchange.aborted:
                bucket.refund(admission.reserved_tokens - sum(admission.prompt_tokens))
            elif exchange.status != 200:
                bucket.refund(admission.reserved_tokens)
        loop = asyncio.get_running_loop()
        if exchange.status != 200 or len(exchange.tag.finished) >= exchange.expected_parts:
            self._end_span(exchange)
        else:
            loop.call_later(SPAN_WAIT_SECONDS, self._end_span, exchange)
        loop.call_later(TAG_RETENTION_SECONDS, self.tags.pop, exchange.request_id)

    def _end_span(self, exchange: _Exchange) -> None:
        if exchange.span_ended:
            return
        exchange.span_ended = True
        span, parts = exchange.tag.span, exchange.tag.finished
        span.set_attribute("http.response.status_code", exchange.status or 0)
        span.set_attribute("gen_ai.response.stream", exchange.streaming)
        if parts:
            span.set_attribute("gen_ai.usage.completion_tokens", sum(p.generation_tokens for p in parts))
            span.set_attribute("gen_ai.response.finish_reasons", [p.finish_reason for p in parts])
            span.set_attribute("gen_ai.latency.time_in_queue", max(p.queue_seconds for p in parts))
            for name, values in (
                ("gen_ai.latency.time_in_model_prefill", [p.prefill_seconds for p in parts]),
                ("gen_ai.latency.time_in_model_decode", [p.decode_seconds for p in parts]),
                ("gen_ai.latency.time_to_first_token", [p.ttft_seconds for p in parts]),
            ):
                known = [v for v in values if v is not None]
                if known:
                    span.set_attribute(name, max(known))
        if exchange.status and exchange.status >= 400:
            span.set_status(trace.Status(trace.StatusCode.ERROR, f"HTTP {exchange.status}"))
        span.end()

    def _bucket(self, exchange: _Exchange) -> Any:
        if self.policy.config.tiers[exchange.tier].tokens_per_minute is None:
            return None
        return self.policy.quotas.get(exchange.tenant)

    def _publish_quota(self, tenant: str, tier: str) -> None:
        per_minute = self.policy.config.tiers[tier].tokens_per_minute
        bucket = self.policy.quotas.get(tenant)
        if per_minute is None or bucket is None:
            return
        self.metrics.quota_limit.labels(tenant).set(per_minute)
        self.metrics.quota_remaining.labels(tenant).set_function(bucket.available)
