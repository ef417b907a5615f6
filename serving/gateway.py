"""The gateway: ASGI middleware in front of vLLM's own OpenAI app (the API is not rewritten).

Every request is classified by its route (serving/routes.py, deny by default): generation
routes pass the key check and the whole admission path; metadata routes need a key when keys
are configured; /metrics and /ready stay open; admin routes are 404 unless an admin key is
configured; anything else is a 404. Admission authenticates the tenant, reads and checks the
body (serving/bodies.py), counts the prompt as the engine will see it (serving/prompts.py),
applies limits, quota and QoS priority, tags the request for the stat logger, opens a trace
span, propagates `traceparent`, and enforces the tier's deadline by aborting the request inside
the engine (its KV blocks are freed). Every refusal is an OpenAI-format JSON error; an
unexpected failure is a JSON 500 and the engine keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
from opentelemetry import trace
from starlette._utils import get_route_path

from serving import request_handoff, routes, tracing
from serving.admission import Admission, AdmissionPolicy
from serving.bodies import parse_json, read_body
from serving.errors import Rejection, error_body
from serving.genai_metrics import GenAiMetrics, Outcome
from serving.lanes import KvLane
from serving.metrics import ServingMetrics
from serving.pooling_prompts import POOLING_SHAPES, engine_prefix
from serving.prompts import Counted, PromptCounter, TooLong, bad
from serving.quota_redis import Reservation, SharedQuotas
from serving.render_memo import Rendered, RenderMemo
from serving.request_tags import FinishedPart, RequestTag, RequestTags, new_request_id
from serving.routes import Access, Shape

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("kvscope.serve")
TAG_RETENTION_SECONDS = 60.0  # how long a tag waits for stats still to come after its response
SPAN_WAIT_SECONDS = 5.0
RESPONSES_TURNS = 8  # the Responses API's engine requests are resp_<id>_0, _1, ...: the turns charged
_UNKNOWN_TENANT = "unknown"
# Fields the gateway owns: a client's value would walk around its accounting.
_OWNED_FIELDS = ("request_id", "kv_transfer_params")
_BUDGET_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
# A token is at least one byte: a prompt with more bytes than this many per token, times the
# context, cannot fit, and is refused before it is tokenised.
MAX_BYTES_PER_TOKEN = 64
# request headers the gateway sets on the forwarded request (names lowercase, as ASGI gives them)
_REPLACED_HEADERS = frozenset(
    (b"content-length", b"content-type", b"transfer-encoding", b"x-request-id", b"traceparent", b"tracestate")
)
_encode = msgspec.json.Encoder().encode  # the forwarded body (UTF-8, compact; any int JSON held)


def _header(scope: Scope, name: bytes) -> bytes | None:
    """A request header by its lowercase name. uvicorn's HTTP parsers lowercase header names (the
    ASGI spec's "header names must be lowercased"; Starlette's Headers reads them so too), so an
    HTTP request's are compared as they come; its websocket handshake (websockets' sans-I/O
    implementation) keeps the client's spelling, so a websocket's are lowercased first."""
    if scope.get("type") == "websocket":
        for key, value in scope.get("headers", ()):
            if key.lower() == name:
                return bytes(value)
        return None
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def bearer(scope: Scope) -> bytes | None:
    """The bearer token of the Authorization header, as bytes (None when absent)."""
    header = _header(scope, b"authorization") or b""
    if header[:7].lower() == b"bearer ":
        return header[7:].strip() or None
    return None


# gen_ai.operation.name of each route's shape: the conventions' well-known values where one fits,
# else the shape's own name (score, rerank, classify, pool)
_OPERATIONS = {
    Shape.COMPLETIONS: "text_completion",
    Shape.CHAT: "chat",
    Shape.CHAT_BATCH: "chat",
    Shape.RESPONSES: "chat",
    Shape.MESSAGES: "chat",
    Shape.INVOCATIONS: "chat",
    Shape.EMBED: "embeddings",
    Shape.COHERE_EMBED: "embeddings",
}


def _port(scope: Scope) -> int | None:
    server = scope.get("server")
    return int(server[1]) if server and len(server) > 1 and server[1] is not None else None


def timing_headers(arrived: float, admitted: float, entered: float | None, started: float) -> list[tuple[bytes, bytes]]:
    """What the gateway's own work cost this request, as it answers (perf_counter seconds):
    `x-kvscope-overhead-ms` (its wall time from the request's arrival to forwarding it: reading,
    checking, counting, admitting; as LiteLLM's x-litellm-overhead-duration-ms), and a W3C
    Server-Timing header with that, the wait in its QoS lane, and the engine until its response
    began. The histogram of the overhead is catalog.REQUEST_GATEWAY_SECONDS in /metrics."""
    entered = admitted if entered is None else entered
    own, lane, engine = ((b - a) * 1000 for a, b in ((arrived, admitted), (admitted, entered), (entered, started)))
    timing = (
        f'admission;dur={own:.2f};desc="kvscope admission", queue;dur={lane:.2f};desc="QoS lane", '
        f"engine;dur={engine:.2f}"
    )
    return [(b"x-kvscope-overhead-ms", f"{own:.2f}".encode()), (b"server-timing", timing.encode())]


async def send_json(send: Send, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of every string in a body (its prompts' text, at most)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item.encode("utf-8", "surrogatepass"))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


class _Answer:
    """Whether a response has begun on this connection (a crash after it cannot send a 500)."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        self.started = False

    def watching(self, send: Send) -> Send:
        async def watched(message: Message) -> None:
            self.started = self.started or message["type"] in (
                "http.response.start",
                "websocket.accept",
                "websocket.close",
            )
            await send(message)

        return watched


@dataclass
class _Exchange:
    """One admitted request on its way through the engine."""

    request_id: str
    shape: Shape
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
    entered: bool = False  # handed to vLLM (not only held at the gateway)
    entered_at: float | None = None  # perf_counter when it was
    arrived: float = 0.0  # perf_counter when the request reached the gateway
    ended_at: float | None = None  # ... when its last byte was sent
    port: int | None = None  # the port it reached (server.port)
    reservation: Reservation | None = None  # what the shared quota backend holds for it
    streamed: int = 0  # SSE events that carried generated output (what a disconnect is charged)
    span_ended: bool = field(default=False, repr=False)
    settled: bool = False  # its response is over: a part reported after it drops the tag

    @property
    def engine_ids(self) -> list[str]:
        """The ids vLLM gives this request's engine requests (to abort them on the deadline)."""
        prompts = range(len(self.admission.prompt_tokens))
        match self.shape:
            case Shape.COMPLETIONS:
                return [f"cmpl-{self.request_id}-{i}" for i in prompts]
            case Shape.CHAT_BATCH:
                return [f"chatcmpl-{self.request_id}_{i}" for i in prompts]
            case Shape.RESPONSES:  # one engine request per turn of a built-in tool loop
                return [f"resp_{self.request_id}_{turn}" for turn in range(RESPONSES_TURNS)]
        if self.shape in POOLING_SHAPES:
            return [f"{engine_prefix(self.shape)}-{self.request_id}-{i}" for i in prompts]
        return [f"chatcmpl-{self.request_id}"]

    @property
    def expected_parts(self) -> int:
        return len(self.admission.prompt_tokens) * self.admission.n


def _resolved(shape: Shape, body: dict[str, Any]) -> Shape:
    """SageMaker's /invocations runs a completions or a chat body: which one this is."""
    if shape is not Shape.INVOCATIONS:
        return shape
    if "messages" in body and "prompt" not in body:
        return Shape.CHAT
    if "prompt" in body and "messages" not in body:
        return Shape.COMPLETIONS
    raise bad("an /invocations body carries either 'messages' (chat) or 'prompt' (completions)", "messages")


# An SSE event carries generated output (vLLM sends one per token step and choice) when it has
# text, a content or reasoning delta, a tool call, or is a Responses / Anthropic delta event; the
# role chunk, `response.created` and the usage chunk carry none.
_OUTPUT = re.compile(
    rb'"(?:text|content|reasoning_content|reasoning)":"(?!")'  # a string field, not empty
    rb'|"tool_calls":\[|response\.output_text\.delta|response\.reasoning_text\.delta|"type":"content_block_delta"'
)


# The two fields nearly every streamed token carries (completions' and Anthropic's text, chat's
# content): two substring finds settle those events, 0.2-0.3 us against the regex's 1.7-1.9. A
# chat stream looks for its content first (the other find would scan the whole event in vain).
_COMMON = (b'"text":"', b'"content":"')
_CHAT_COMMON = (b'"content":"', b'"text":"')


def _carries_output(event: bytes, common: tuple[bytes, bytes] = _COMMON) -> bool:
    for name in common:
        at = event.find(name)
        if at >= 0 and event[at + len(name) : at + len(name) + 1] != b'"':
            return True  # what _OUTPUT would match: the field, not empty
    return _OUTPUT.search(event) is not None


def output_events(chunk: bytes, common: tuple[bytes, bytes] = _COMMON) -> int:
    """How many events of an SSE chunk carry generated output. vLLM sends one event per chunk,
    so this runs on every streamed token: a newline search and one substring find or two."""
    # one event: its first newline ends it (JSON holds no raw one), or a single blank line at most
    if chunk.find(b"\n") >= len(chunk) - 2 or chunk.count(b"\n\n") <= 1:
        return 1 if _carries_output(chunk, common) else 0
    return sum(1 for event in chunk.split(b"\n\n") if _carries_output(event, common))


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app: the body (already read) first, then the client's next messages."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _json_content(scope: Scope) -> None:
    """A generation body is JSON: another declared type is a 415 (no type at all is read as JSON)."""
    declared = _header(scope, b"content-type")
    if declared is None:
        return
    kind = declared.split(b";")[0].strip().lower()
    if kind != b"application/json":
        shown = kind.decode("latin-1")[:60]
        raise Rejection(415, "unsupported_media_type", f"the body must be application/json, not {shown!r}")


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
        counter: PromptCounter,
        metrics: ServingMetrics,
        tags: RequestTags,
        abort: Callable[[list[str]], Awaitable[None]],
        model_name: str,
        tracer: trace.Tracer | None = None,
        kv_pool_tokens: int | None = None,
        root_path: str = "",
        mounted: frozenset[str] | None = None,
        genai: GenAiMetrics | None = None,
        memo: RenderMemo | None = None,
        handoff: bool = False,
    ) -> None:
        self.app = app
        self.memo = memo  # renders held for vLLM's completion route (None: vLLM renders again)
        self.handoff = handoff  # validated requests handed to vLLM's routes (request_handoff.install)
        self.policy = policy
        self.counter = counter
        self.metrics = metrics
        self.tags = tags
        self.abort = abort
        self.model_name = model_name
        self.tracer = tracer or trace.NoOpTracer()
        self._untraced = isinstance(self.tracer, trace.NoOpTracer)
        self._published: dict[str, tuple[int, Any]] = {}  # tenant -> the quota its gauges read
        self.genai = genai  # OpenTelemetry's GenAI metrics over OTLP (None: not configured)
        self.root_path = root_path.rstrip("/")
        self.mounted = mounted  # the route templates vLLM's app mounts for this model (None: all)
        self.ready = False
        self.draining = False
        self.inflight = 0
        self._epoch = time.monotonic()
        self.lanes = self._lanes(kv_pool_tokens)
        self.shared = (
            SharedQuotas(policy.config, on_error=lambda reason: metrics.quota_backend_errors.labels(reason).inc())
            if policy.config.quota_backend is not None
            else None
        )

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

    def route_path(self, scope: Scope) -> str:
        """The path the app routes on: after Starlette's root-path handling (--root-path)."""
        if self.root_path and not scope.get("root_path"):
            scope = {**scope, "root_path": self.root_path}
        return get_route_path(scope) or "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)  # lifespan
        answer = _Answer()
        try:
            await self._dispatch(scope, receive, send, answer)
        except Exception:
            log.exception("the gateway failed on %s %s", scope.get("method", "WS"), scope.get("path"))
            if not answer.started and scope["type"] == "http":
                await send_json(send, 500, error_body(500, "internal error in the gateway; the request was not run"))

    async def _dispatch(self, scope: Scope, receive: Receive, raw_send: Send, answer: _Answer) -> None:
        # an admitted request's stream is watched by _forward's own wrapper (one per chunk, not two)
        send = answer.watching(raw_send)
        path = self.route_path(scope)
        method = "WS" if scope["type"] == "websocket" else str(scope.get("method", ""))
        route = routes.classify(method, path)
        try:
            if route is None:
                if routes.known_path(path):
                    raise Rejection(405, "method_not_allowed", f"{method} is not allowed on {path}")
                raise Rejection(404, "not_found", f"no route {path}")
            if self.mounted is not None and route.template not in self.mounted and route.template != "/ready":
                raise Rejection(404, "not_found", f"{path} is not served for this model")
            if route.access is Access.OPEN:
                if path == "/ready":
                    return await self._ready(send)
                if not self.policy.config.metrics_allowed(bearer(scope)):
                    raise Rejection(401, "unauthorized", "/metrics needs its bearer token")
                return await self.app(scope, receive, send)
            if route.access is Access.REFUSED:
                raise Rejection(404, "not_served", f"{path} is not served through kvscope's gateway: {route.why}")
            if route.access is Access.ADMIN:
                if not self.policy.config.admin_keys:
                    raise Rejection(404, "not_found", f"no route {path}")
                if not self.policy.config.is_admin(bearer(scope)):
                    raise Rejection(401, "unauthorized", "this route needs an admin key")
                return await self.app(scope, await self._buffered(scope, receive), send)
            if route.access is Access.KEY:
                self._authenticate(scope)
                return await self.app(scope, await self._buffered(scope, receive), send)
        except Rejection as rejection:
            self.metrics.rejections.labels(rejection.reason, _UNKNOWN_TENANT).inc()
            return await self._refuse(scope, receive, send, rejection)
        assert route.shape is not None
        return await self._admitted(scope, receive, raw_send, answer, route.shape)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, rejection: Rejection) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008, "reason": rejection.message[:120]})
            return
        await send_json(send, rejection.status, rejection.body(), rejection.headers)

    async def _buffered(self, scope: Scope, receive: Receive) -> Receive:
        """The body read here, up to the cap, checked as strict JSON when there is one, and
        replayed to vLLM (whose own parser would answer a bad one outside OpenAI's envelope)."""
        if scope["type"] != "http":
            return receive
        body = await read_body(receive, self.policy.config.max_body_bytes)
        if body:
            _json_content(scope)
            parse_json(body, self.policy.config.max_json_depth)
        return _replay(body, receive)

    async def _ready(self, send: Send) -> None:
        state = "draining" if self.draining else "ready" if self.ready else "starting"
        status = 200 if state == "ready" else 503
        await send_json(send, status, json.dumps({"status": state}).encode())

    def _refuse_when_draining(self) -> None:
        if self.draining:
            raise Rejection(503, "draining", "the server is shutting down; retry on another replica")

    def _authenticate(self, scope: Scope) -> tuple[str, str]:
        key = bearer(scope)
        found = self.policy.config.authenticate(key)
        if found is None:
            message = "invalid API key" if key else "missing API key (Authorization: Bearer <key>)"
            raise Rejection(401, "unauthorized", message)
        return found

    async def _admitted(self, scope: Scope, receive: Receive, send: Send, answer: _Answer, shape: Shape) -> None:
        arrived = time.perf_counter()
        tenant = _UNKNOWN_TENANT
        try:
            self._refuse_when_draining()
            tenant, tier = self._authenticate(scope)
            _json_content(scope)
            config = self.policy.config
            raw = await read_body(receive, config.max_body_bytes)
            body = self.policy.check_shape(parse_json(raw, config.max_json_depth))
            shape = _resolved(shape, body)
            for owned in _OWNED_FIELDS:
                if owned in body:
                    raise bad(f"'{owned}' is set by the gateway, not by clients", owned)
            self._short_enough(body, len(raw))
            counted = await self._count(shape, body)
            arrival_ms = int((time.monotonic() - self._epoch) * 1000)
            admission = self.policy.admit(shape, body, tenant, tier, counted.counts, arrival_ms)
            reservation = None
            if self.shared is not None:
                reservation = await self.shared.reserve(tenant, tier, admission.reserved_tokens)
        except Rejection as rejection:
            self.metrics.rejections.labels(rejection.reason, tenant).inc()
            return await send_json(answer.watching(send), rejection.status, rejection.body(), rejection.headers)
        await self._forward(
            scope,
            receive,
            send,
            answer,
            tenant,
            tier,
            admission,
            {**admission.body, **counted.patch},
            arrived,
            shape,
            reservation,
            counted.rendered,
            (counted.request, body),
        )

    def _short_enough(self, body: dict[str, Any], raw_bytes: int) -> None:
        """Refuse, before tokenising, a body whose text cannot fit the context at any tokenisation."""
        limit = self.policy.max_model_len * MAX_BYTES_PER_TOKEN
        if raw_bytes <= limit:  # JSON spells each character in at least its UTF-8 bytes
            return
        size = _text_bytes({k: v for k, v in body.items() if k not in ("model", "stop", "logit_bias")})
        if size > limit:
            raise Rejection(
                400,
                "context_length_exceeded",
                f"the request holds {size} bytes of text: more than any {self.policy.max_model_len}-token context "
                "can take",
                "prompt",
            )

    async def _count(self, shape: Shape, body: dict[str, Any]) -> Counted:
        # the output budget is admission's to clamp: vLLM's own validation would refuse it first
        counted = {k: v for k, v in body.items() if k not in _BUDGET_FIELDS}
        if shape is Shape.MESSAGES:
            counted["max_tokens"] = 1  # Anthropic's schema requires one; its value does not change the count
        try:
            return await self._count_shape(shape, counted)
        except TooLong as too_long:  # admission refuses it, saying by how much
            return Counted([too_long.tokens])

    async def _count_shape(self, shape: Shape, body: dict[str, Any]) -> Counted:
        match shape:
            case Shape.COMPLETIONS:
                return await self.counter.completion(body)
            case Shape.CHAT:
                return await self.counter.chat(body)
            case Shape.MESSAGES:
                return await self.counter.messages(body)
            case Shape.RESPONSES:
                return await self.counter.responses(body)
            case shape if shape in POOLING_SHAPES:
                return await self.counter.pooling(shape, body)
            case Shape.CHAT_BATCH:
                conversations = body.get("messages")
                if not isinstance(conversations, list) or not conversations:
                    raise bad("'messages' must be a non-empty list of conversations", "messages")
                counts = []
                for conversation in conversations:
                    counts += (await self.counter.chat({**body, "messages": conversation})).counts
                return Counted(counts)
        raise bad(f"the body of this route cannot be read ({shape})")

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        answer: _Answer,
        tenant: str,
        tier: str,
        admission: Admission,
        forwarded_body: dict[str, Any],
        arrived: float,
        shape: Shape,
        reservation: Reservation | None = None,
        rendered: Rendered | None = None,
        validated: tuple[Any, dict[str, Any]] = (None, {}),
    ) -> None:
        request_id = new_request_id()
        if shape is Shape.RESPONSES:  # the Responses API names its engine request after the body's id
            forwarded_body = {**forwarded_body, "request_id": f"resp_{request_id}"}
        elif rendered is not None and self.memo is not None:  # vLLM's route takes the gateway's render
            forwarded_body = {**forwarded_body, "request_id": request_id}
        # vLLM's route takes the request the gateway validated (the body is not parsed again)
        request, client_body = validated
        if request is not None and self.handoff and self.route_path(scope) in request_handoff.ROUTES:
            counted = {k: v for k, v in client_body.items() if k not in _BUDGET_FIELDS}
            request = request_handoff.handed(request, counted, forwarded_body)
        else:
            request = None
        span = self._span(scope, request_id, admission, tenant, tier)
        tag = RequestTag(tenant, tier, admission.qos_class, admission.priority, span)
        deadline = self.policy.config.tiers[tier].deadline_seconds
        exchange = _Exchange(request_id, shape, tenant, tier, admission, tag, deadline, reservation=reservation)
        exchange.arrived, exchange.port = arrived, _port(scope)
        tag.expected = dict.fromkeys(exchange.engine_ids, admission.n)
        tag.on_finished = lambda part: self._on_part_finished(exchange, part)
        self.tags.add(request_id, tag)

        body = _encode(forwarded_body)  # compact UTF-8: a 2K-token id prompt costs 9 us, not 100
        headers = [(k, v) for k, v in scope["headers"] if k not in _REPLACED_HEADERS]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
        ]
        if span is not trace.INVALID_SPAN:  # an invalid span injects nothing
            headers += [(k.encode(), v.encode()) for k, v in tracing.inject(span).items()]
        receive_body = _replay(body, receive)

        common = _CHAT_COMMON if shape in (Shape.CHAT, Shape.CHAT_BATCH) else _COMMON
        field_name, value_at = common[0], len(common[0])

        def send_tracked(message: Message) -> Awaitable[None]:
            """Not a coroutine: it hands back the transport's own send, one frame less a chunk."""
            if message["type"] == "http.response.body":  # every streamed token: the short path first
                if exchange.streaming:
                    chunk = message.get("body", b"")
                    if type(chunk) is not bytes:
                        chunk = bytes(chunk)
                    # vLLM's usual token event, settled here without a call: one event (its first
                    # newline ends it), its common field not empty; anything else is read whole
                    at = chunk.find(field_name)
                    if (
                        at >= 0
                        and chunk.find(b"\n") >= len(chunk) - 2
                        and chunk[at + value_at : at + value_at + 1] != b'"'
                    ):
                        exchange.streamed += 1
                    else:
                        exchange.streamed += output_events(chunk, common)
                if not message.get("more_body", False):
                    exchange.done, exchange.ended_at = True, time.perf_counter()
                return send(message)
            if message["type"] == "http.response.start":
                exchange.started, exchange.status = True, message["status"]
                answer.started = True
                extra = [
                    (b"x-request-id", request_id.encode()),
                    *timing_headers(arrived, admitted, exchange.entered_at, time.perf_counter()),
                    # what the request holds of the tenant's budget: its prompt, and prompt + output
                    (b"x-kvscope-prompt-tokens", str(sum(admission.prompt_tokens)).encode()),
                    (b"x-kvscope-reserved-tokens", str(admission.reserved_tokens).encode()),
                ]
                if admission.clamped_from is not None:
                    extra.append(
                        (
                            b"x-kvscope-max-tokens-clamped",
                            f"{admission.clamped_from}->{admission.max_tokens}".encode(),
                        )
                    )
                extra += [(k.encode(), v.encode()) for k, v in self._rate_headers(tenant, tier).items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
                exchange.streaming = any(
                    k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in message["headers"]
                )
            return send(message)

        self.metrics.child(self.metrics.requests, tenant, tier, admission.qos_class).inc()
        arrivals = self.metrics.child(self.metrics.admitted_prompt_tokens, self.model_name)
        for prompt_tokens in admission.prompt_tokens:  # a batch of prompts is that many requests to vLLM
            arrivals.observe(prompt_tokens)
        self.metrics.child(self.metrics.inflight, tenant).inc()
        self._publish_quota(tenant, tier)
        self.inflight += 1
        forwarded = {**scope, "headers": headers}
        if request is not None:
            forwarded[request_handoff.SCOPE_KEY] = request
        admitted = time.perf_counter()
        self.metrics.child(self.metrics.gateway_seconds, self.model_name).observe(admitted - arrived)
        lane = self.lanes.get(admission.qos_class)
        if rendered is not None and self.memo is not None:  # held from here; the finally drops it
            self.memo.keep(request_id, *rendered)
        try:
            async with contextlib.AsyncExitStack() as stack:
                if deadline is not None:
                    remaining = max(0.0, deadline - (time.perf_counter() - arrived))
                    await stack.enter_async_context(asyncio.timeout(remaining))
                if lane is not None:
                    await stack.enter_async_context(self._in_lane(lane, exchange, receive))
                exchange.entered, exchange.entered_at = True, time.perf_counter()
                await self.app(forwarded, receive_body, send_tracked)
        except TimeoutError:
            await self._deadline_passed(exchange, answer.watching(send))
        except ClientGoneError:
            exchange.status = 499  # nginx's "client closed request": nothing to send
            self.metrics.rejections.labels("client_disconnected", tenant).inc()
        finally:
            self.inflight -= 1
            self.metrics.child(self.metrics.inflight, tenant).dec()
            if self.memo is not None:  # vLLM took it, or never will
                self.memo.drop(request_id)
            self._settle(exchange)

    def _span(self, scope: Scope, request_id: str, admission: Admission, tenant: str, tier: str) -> trace.Span:
        """The request's server span. With no tracer configured and no traceparent to pass on, the
        invalid span, at no cost: what the no-op tracer answers after parsing the headers."""
        if self._untraced and _header(scope, b"traceparent") is None:
            return trace.INVALID_SPAN
        return self.tracer.start_span(
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
        """A part's unused output is refunded; a part past those reserved for (a later turn of a
        Responses tool loop) is charged what it generated, as it was not reserved."""
        bucket = self._bucket(exchange)
        if bucket is not None:
            if len(exchange.tag.finished) <= exchange.expected_parts:
                bucket.refund(exchange.admission.max_tokens - part.generation_tokens)
            else:
                bucket.charge(part.generation_tokens)
        if exchange.done and len(exchange.tag.finished) >= exchange.expected_parts:
            self._end_span(exchange)
            if exchange.settled:  # its stats trailed the response: nothing more to wait for
                self.tags.pop(exchange.request_id)

    def _settle(self, exchange: _Exchange) -> None:
        """After the response: charge what the engine ran, refund the rest, end the span.

        A request the engine ran is charged its prompt; its output is charged as vLLM reports
        each finished part (the stat logger's refund of max_tokens - generated). vLLM reports
        nothing for requests aborted from outside (the deadline, a client gone mid-stream):
        those are charged the output the client was sent. A request the engine refused, or
        that never left the gateway, is refunded in full.
        """
        admission = exchange.admission
        prompt = sum(admission.prompt_tokens)
        # the engine ran it: answered 200, or was cut short (the deadline, the client gone)
        ran = exchange.entered and (exchange.status in (None, 200) or exchange.aborted)
        cut_short = ran and (exchange.aborted or not exchange.done)
        reported = bool(exchange.tag.finished)
        if ran:
            self.metrics.child(self.metrics.tokens, exchange.tenant, "prompt").inc(prompt)
        if cut_short and not reported:
            self.metrics.tokens.labels(exchange.tenant, "completion").inc(exchange.streamed)
        bucket = self._bucket(exchange)
        if bucket is not None and not reported:
            if not ran:
                bucket.refund(admission.reserved_tokens)
            elif cut_short:
                bucket.refund(admission.reserved_tokens - prompt - exchange.streamed)
        exchange.settled = True
        loop = asyncio.get_running_loop()
        reported_all = len(exchange.tag.finished) >= exchange.expected_parts
        if exchange.status != 200 or reported_all:
            self._end_span(exchange)
        else:
            loop.call_later(SPAN_WAIT_SECONDS, self._end_span, exchange)
        if reported_all:  # the usual case: vLLM reported every part before the last byte went out
            self.tags.pop(exchange.request_id)
        else:  # parts still to come (or never, for a request aborted): kept a while for them
            loop.call_later(TAG_RETENTION_SECONDS, self.tags.pop, exchange.request_id)

    def _end_span(self, exchange: _Exchange) -> None:
        if exchange.span_ended:
            return
        exchange.span_ended = True
        span = exchange.tag.span
        if span.is_recording():
            self._record_span(exchange, span)
        span.end()
        if self.genai is not None:
            self.genai.record(self._outcome(exchange))

    def _record_span(self, exchange: _Exchange, span: trace.Span) -> None:
        parts = exchange.tag.finished
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

    def _outcome(self, exchange: _Exchange) -> Outcome:
        """The request's GenAI metrics: its time, its tokens as vLLM counted them (its usage),
        and, for a success, its first token and time per token after it."""
        parts = exchange.tag.finished
        failed = exchange.aborted or not exchange.status or exchange.status >= 400
        generated = sum(p.generation_tokens for p in parts)
        decoding = [(p.decode_seconds, p.generation_tokens - 1) for p in parts if p.decode_seconds is not None]
        steps = sum(n for _, n in decoding if n > 0)
        ttfts = [p.ttft_seconds for p in parts if p.ttft_seconds is not None]
        return Outcome(
            operation=_OPERATIONS.get(exchange.shape, exchange.shape.value),  # score, rerank: their own
            model=self.model_name,
            port=exchange.port,
            seconds=(exchange.ended_at or time.perf_counter()) - exchange.arrived,  # to the last byte
            error=(str(exchange.status or 499) if failed else None),
            input_tokens=sum(p.prompt_tokens for p in parts) if parts else None,
            output_tokens=generated if parts else None,
            ttft=min(ttfts) if ttfts else None,
            per_token=sum(d for d, n in decoding if n > 0) / steps if steps else None,
        )

    def _bucket(self, exchange: _Exchange) -> Any:
        tier = self.policy.config.tiers[exchange.tier]
        if tier.tokens_per_minute is None:
            return None
        if self.shared is not None:  # settled in the shared bucket only if it holds the reservation
            return None if exchange.reservation is None else self.shared.bucket(exchange.reservation, tier)
        return self.policy.quotas.get(exchange.tenant)

    def _rate_headers(self, tenant: str, tier: str) -> dict[str, str]:
        if self.shared is not None:
            return self.shared.headers(tenant, tier)
        return self.policy.rate_headers(tenant, tier)

    def _publish_quota(self, tenant: str, tier: str) -> None:
        """The tenant's quota gauges, set when its budget or its bucket is new (not per request)."""
        per_minute = self.policy.config.tiers[tier].tokens_per_minute
        if per_minute is None:
            return
        source: Any = self.shared if self.shared is not None else self.policy.quotas.get(tenant)
        if source is None:
            return
        published = self._published.get(tenant)
        if published is not None and published[0] == per_minute and published[1] is source:
            return
        self._published[tenant] = (per_minute, source)
        self.metrics.quota_limit.labels(tenant).set(per_minute)
        if self.shared is not None:  # what the script last answered for the tenant (any replica's takes)
            self.metrics.quota_remaining.labels(tenant).set_function(partial(self.shared.remaining, tenant))
        else:
            self.metrics.quota_remaining.labels(tenant).set_function(source.available)
