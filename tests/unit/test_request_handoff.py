"""vLLM's route takes the request the gateway validated (serving/request_handoff.py): what it
gets is what FastAPI would validate from the forwarded body, field for field; anything the
handoff cannot vouch for is left to FastAPI, and a request not handed over is parsed as before."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from serving import request_handoff
from serving.request_handoff import SCOPE_KEY, handed


def _models() -> tuple[Any, Any]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    return CompletionRequest, ChatCompletionRequest


BUDGET = ("max_tokens", "max_completion_tokens")
CHAT = [{"role": "user", "content": "zaba kelo"}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
# (client body, what the gateway sets after counting: budget, priority, request id, a patch)
CASES = [
    ("completion", {"model": "m", "prompt": "zaba kelo", "max_tokens": 900}, {"max_tokens": 64, "priority": 3}),
    (
        "completion",
        {"model": "m", "prompt": ["zaba", "kelo"], "stream": True, "stream_options": {"include_usage": True}},
        {"max_tokens": 16, "priority": 0, "request_id": "kv-1"},
    ),
    ("completion", {"model": "m", "prompt": [5, 6, 7], "temperature": 0.5, "n": 2}, {"max_tokens": 5, "priority": 1}),
    ("completion", {"model": "m", "prompt": "zaba", "extra_field": 1}, {"max_tokens": 5, "prompt": [5, 6]}),
    ("completion", {"model": "m", "prompt": "zaba", "logprobs": 2, "priority": 4}, {"max_tokens": 8, "priority": 9}),
    (
        "chat",
        {"model": "m", "messages": CHAT, "max_completion_tokens": 100, "tools": TOOLS, "tool_choice": "none"},
        {"max_completion_tokens": 30, "priority": 2, "kv_transfer_params": {"prompt_token_ids": [1, 2]}},
    ),
    ("chat", {"model": "m", "messages": CHAT, "stream": True}, {"max_tokens": 12, "priority": 0}),
]


@pytest.mark.parametrize(("kind", "body", "gateway_sets"), CASES)
def test_the_handed_request_is_what_fastapi_validates_from_the_forwarded_body(kind, body, gateway_sets):
    model = _models()[kind == "chat"]
    counted = {k: v for k, v in body.items() if k not in BUDGET}
    validated = model.model_validate(counted)
    forwarded = {**body, **gateway_sets}
    request = handed(validated, counted, forwarded)
    assert request is not None
    fastapi = model.model_validate(json.loads(json.dumps(forwarded)))
    ignore = set() if "request_id" in forwarded else {"request_id"}  # a fresh default either way
    assert request.model_dump(exclude=ignore) == fastapi.model_dump(exclude=ignore)
    assert request.model_fields_set == fastapi.model_fields_set
    assert request.to_sampling_params(64, {}).max_tokens == fastapi.to_sampling_params(64, {}).max_tokens
    assert validated.model_fields_set == model.model_validate(counted).model_fields_set  # left as it was


@pytest.mark.parametrize(
    "forwarded",
    [
        {"prompt": "zaba", "max_tokens": 5, "temperature": 0.5},  # a field the gateway never sets
        {"prompt": "zaba", "max_tokens": None},  # vLLM's own validator normalises a null budget
        {"prompt": "zaba", "max_tokens": True},
        {"prompt": "zaba", "max_tokens": 5, "priority": "high"},
        {"max_tokens": 5},  # a counted field gone
    ],
)
def test_what_the_handoff_cannot_vouch_for_is_left_to_fastapi(forwarded):
    completion, _ = _models()
    counted = {"prompt": "zaba", "model": "m"}
    assert handed(completion.model_validate(counted), counted, {"model": "m", **forwarded}) is None
    assert handed(None, counted, {**counted, "max_tokens": 5}) is None


def test_fastapi_gives_the_route_the_handed_request_and_parses_any_other():
    """A FastAPI route with vLLM's body model: a scope carrying a handed request gets that very
    object; one without gets the body parsed and validated as FastAPI always does."""
    from fastapi import FastAPI

    completion, _ = _models()
    assert request_handoff.install() and request_handoff.install()  # once, however often asked
    app = FastAPI()
    got: list[Any] = []

    async def create(request: Any) -> dict[str, Any]:
        got.append(request)
        return {"max_tokens": request.max_tokens}

    create.__annotations__ = {"request": completion, "return": dict}  # vLLM's body model, as its route has
    app.post("/v1/completions")(create)

    held = completion.model_validate({"model": "m", "prompt": "zaba", "max_tokens": 3})

    async def handing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/completions" and scope["query_string"] == b"held":
            scope = {**scope, SCOPE_KEY: held}
        await app(scope, receive, send)

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=handing)
        async with httpx.AsyncClient(transport=transport, base_url="http://vllm") as client:
            body = {"model": "m", "prompt": "zaba", "max_tokens": 3}
            return [
                await client.post("/v1/completions?held", json=body),
                await client.post("/v1/completions", json=body),
            ]

    first, second = asyncio.run(go())
    assert first.status_code == second.status_code == 200 and first.json() == second.json() == {"max_tokens": 3}
    assert (
        got[0] is held
        and got[1] is not held
        and got[1].model_dump(exclude={"request_id"}) == held.model_dump(exclude={"request_id"})
    )


def test_the_gateway_hands_its_validated_request_to_the_route_with_the_admitted_budget():
    """Through the gateway: the scope vLLM's route gets carries the counted request with the
    budget admission clamped, the priority QoS set and the forwarded body's own fields; a route
    whose body model is another (SageMaker's /invocations) gets none."""
    from serving.prompts import Counted
    from tests.unit.test_gateway import KEY, _gateway

    completion, _ = _models()

    class Counter:
        async def completion(self, body: dict[str, Any]) -> Counted:
            return Counted([3], request=completion.model_validate(body))

    gateway, engine = _gateway(counter=Counter(), handoff=True)
    scopes: list[dict[str, Any]] = []
    app = gateway.app

    async def watching(scope: Any, receive: Any, send: Any) -> None:
        scopes.append(scope)
        await app(scope, receive, send)

    gateway.app = watching

    async def go(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = json.dumps({"model": "m", "prompt": "zaba kelo", "max_tokens": 100000, "stream": False})
            return await client.post(path, content=body, headers={"authorization": f"Bearer {KEY}"})

    response = asyncio.run(go("/v1/completions"))
    assert response.status_code == 200, response.text
    request, ((_, _, forwarded),) = scopes[0][SCOPE_KEY], engine.seen
    assert request.max_tokens == forwarded["max_tokens"] < 100000 and request.priority == forwarded["priority"]
    fastapi = completion.model_validate(forwarded)
    assert request.model_dump(exclude={"request_id"}) == fastapi.model_dump(exclude={"request_id"})
    assert asyncio.run(go("/invocations")).status_code == 200 and SCOPE_KEY not in scopes[1]
