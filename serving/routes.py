"""Every route `kvscope serve` mounts, classified: deny by default.

vLLM's app mounts some 70 routes depending on the model's tasks, dev mode and flags. The gateway
lets a request through only when its method and path are in this table, and applies what the
class demands: generation routes pass the key check and the whole admission path; metadata,
tokenisation and docs routes need a key when keys are configured; `/metrics` and the gateway's
own `/ready` stay open for Prometheus and the kubelet; admin and dev routes answer 404 unless
the config names an admin key. Anything else is a 404: a vLLM upgrade that adds a route cannot
open a hole (tests/unit/test_routes.py builds the pinned vLLM's app and fails on any route
this table does not classify).

Classification happens on the route path, after Starlette's own `--root-path` handling.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum


class Access(StrEnum):
    OPEN = "open"  # no key: Prometheus and probes
    KEY = "key"  # a tenant's key when keys are configured; no tokens are generated
    ADMITTED = "admitted"  # a tenant's key and the whole admission path
    ADMIN = "admin"  # 404 unless an admin key is configured; then that key only
    REFUSED = "refused"  # generation the gateway cannot count yet: 404 rather than unguarded


class Shape(StrEnum):
    """How an admitted route's body carries its prompt and output budget (serving/requests.py)."""

    COMPLETIONS = "completions"
    CHAT = "chat"
    CHAT_BATCH = "chat_batch"
    RESPONSES = "responses"
    MESSAGES = "messages"
    INVOCATIONS = "invocations"  # SageMaker: a completions or a chat body
    EMBED = "embed"  # pooling and scoring (serving/pooling_prompts.py): no output budget
    POOL = "pool"
    CLASSIFY = "classify"
    COHERE_EMBED = "cohere_embed"
    SCORE = "score"
    RERANK = "rerank"
    GENERATIVE_SCORING = "generative_scoring"  # one token per item


@dataclass(frozen=True)
class Route:
    methods: frozenset[str]
    template: str
    access: Access
    shape: Shape | None = None
    why: str = ""

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The template as a regex: each {name} one path segment, the rest literal."""
        parts = re.split(r"\{[a-z_]+\}", self.template)
        return re.compile("^" + "[^/]+".join(re.escape(part) for part in parts) + "$")


def _r(methods: str, template: str, access: Access, shape: Shape | None = None, why: str = "") -> Route:
    return Route(frozenset(methods.split(",")), template, access, shape, why)


A, K, OP, D, X = Access.ADMITTED, Access.KEY, Access.OPEN, Access.ADMIN, Access.REFUSED
GET, POST = "GET,HEAD", "POST"

ROUTES: tuple[Route, ...] = (
    # the gateway's own
    _r(GET, "/ready", OP, why="the kubelet's readiness probe (served by the gateway)"),
    # generation: the whole admission path
    _r(POST, "/v1/completions", A, Shape.COMPLETIONS),
    _r(POST, "/v1/chat/completions", A, Shape.CHAT),
    _r(POST, "/v1/chat/completions/batch", A, Shape.CHAT_BATCH),
    _r(POST, "/v1/responses", A, Shape.RESPONSES),
    _r(POST, "/v1/messages", A, Shape.MESSAGES, why="Anthropic's Messages API"),
    _r(POST, "/invocations", A, Shape.INVOCATIONS, why="SageMaker: runs completions and chat bodies"),
    _r(POST, "/generative_scoring", A, Shape.GENERATIVE_SCORING),
    # pooling and scoring: the same path, their prompts counted (serving/pooling_prompts.py)
    _r(POST, "/v1/embeddings", A, Shape.EMBED),
    _r(POST, "/v2/embed", A, Shape.COHERE_EMBED, why="Cohere's embed API"),
    _r(POST, "/pooling", A, Shape.POOL),
    _r(POST, "/classify", A, Shape.CLASSIFY),
    _r(POST, "/score", A, Shape.SCORE),
    _r(POST, "/v1/score", A, Shape.SCORE),
    _r(POST, "/rerank", A, Shape.RERANK),
    _r(POST, "/v1/rerank", A, Shape.RERANK),
    _r(POST, "/v2/rerank", A, Shape.RERANK),
    # generation whose bodies the gateway does not count yet: refused, not walked around
    _r(POST, "/inference/v1/generate", X, why="token-in token-out scale-out route"),
    _r(POST, "/v1/systemone", X, why="structured decisions: state and questions are not counted yet"),
    _r(POST, "/v1/audio/transcriptions", X, why="audio input is not counted by the gateway"),
    _r(POST, "/v1/audio/translations", X, why="audio input is not counted by the gateway"),
    _r("WS", "/v1/realtime", X, why="a websocket session has no per-request admission"),
    # metadata and tokenisation: a key when keys are configured
    _r(GET, "/v1/models", K),
    _r(GET, "/health", K),
    _r(GET, "/version", K),
    _r("GET,POST", "/ping", K, why="SageMaker's health check"),
    _r(GET, "/load", K),
    _r(GET, "/kv_event_sources", K),
    _r(GET, "/tokenizer_info", K),
    _r(GET, "/v1/responses/{response_id}", K),
    _r(POST, "/v1/responses/{response_id}/cancel", K),
    _r(POST, "/tokenize", K),
    _r(POST, "/detokenize", K),
    _r(POST, "/v1/messages/count_tokens", K),
    _r(POST, "/v1/chat/completions/render", K),
    _r(POST, "/v1/chat/completions/derender", K),
    _r(POST, "/v1/completions/render", K),
    _r(POST, "/v1/completions/derender", K),
    _r(POST, "/v1/messages/render", K),
    _r(POST, "/v1/responses/render", K),
    _r(GET, "/docs", K),
    _r(GET, "/docs/oauth2-redirect", K),
    _r(GET, "/redoc", K),
    _r(GET, "/openapi.json", K),
    # Prometheus
    _r(GET, "/metrics", OP, why="Prometheus scrapes it (optionally with its own token)"),
    _r("WS", "/metrics", D, why="a websocket stream of metrics: operators only"),
    # admin and dev routes: they change or stop the engine
    *(
        _r(POST, path, D)
        for path in (
            "/reset_prefix_cache",
            "/reset_mm_cache",
            "/reset_encoder_cache",
            "/sleep",
            "/wake_up",
            "/collective_rpc",
            "/pause",
            "/resume",
            "/abort_requests",
            "/inference/v1/abort_requests",
            "/scale_elastic_ep",
            "/is_scaling_elastic_ep",
            "/start_profile",
            "/stop_profile",
            "/v1/load_lora_adapter",
            "/v1/unload_lora_adapter",
            "/init_weight_transfer_engine",
            "/start_weight_update",
            "/start_draft_weight_update",
            "/update_weights",
            "/finish_weight_update",
            "/shutdown_weight_transfer_engine",
            "/update_weight_version",
            "/weight_checker",
            "/release_kv_cache_memory",
            "/fault_tolerance/apply",
        )
    ),
    *(
        _r(GET, path, D)
        for path in (
            "/is_sleeping",
            "/is_paused",
            "/server_info",
            "/get_world_size",
            "/weight_info",
            "/fault_tolerance/status",
        )
    ),
)
del A, K, OP, D, X


# routes by their literal path, and those with a {name} segment, each with its place in ROUTES:
# a request is classified by a dict lookup and the few templates, not a regex a route
_LITERAL: dict[str, list[tuple[int, Route]]] = {}
_TEMPLATED: list[tuple[int, Route]] = []
for _at, _route in enumerate(ROUTES):
    if "{" in _route.template:
        _TEMPLATED.append((_at, _route))
    else:
        _LITERAL.setdefault(_route.template, []).append((_at, _route))


def classify(method: str, path: str) -> Route | None:
    """The route a request is for (the first in ROUTES that takes its method and path), or None
    (refused: 404)."""
    kind = "WS" if method == "WS" else method.upper()
    found, place = None, len(ROUTES)
    for at, route in _LITERAL.get(path, ()):
        if kind in route.methods:
            found, place = route, at
            break
    for at, route in _TEMPLATED:
        if at > place:
            break
        if kind in route.methods and route.pattern.match(path):
            return route
    return found


def known_path(path: str) -> bool:
    """Whether some method of this path is classified (for a 405 instead of a 404)."""
    return path in _LITERAL or any(route.pattern.match(path) for _, route in _TEMPLATED)
