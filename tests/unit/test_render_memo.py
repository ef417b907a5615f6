"""The render the gateway made, taken by vLLM's completion route (serving/render_memo.py): what
the route gets is what vLLM's own render of the forwarded request answers, and anything that is
not the same request is rendered by vLLM as before."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from serving.render_memo import RenderMemo, remember_renders, render_key


def _request(**fields: Any) -> SimpleNamespace:
    plain = {"request_id": "r1", "prompt": "zaba kelo", "add_special_tokens": True, "cache_salt": None}
    return SimpleNamespace(**{**plain, **fields})


def test_a_held_render_is_taken_once_by_its_own_request_with_a_new_arrival_time():
    memo = RenderMemo()
    inputs = [{"prompt_token_ids": [1, 2], "prompt": "zaba kelo", "arrival_time": 1.0}]
    memo.keep("r1", render_key(_request()), inputs)
    taken = memo.take(_request())
    assert taken is not None and taken[0]["prompt_token_ids"] == [1, 2] and taken[0]["arrival_time"] > 1.0
    assert inputs[0]["arrival_time"] == 1.0  # the held dict is not changed under whoever read it
    assert memo.take(_request()) is None and len(memo) == 0 and memo.hits == 1


@pytest.mark.parametrize(
    "other",
    [
        {"request_id": "r2"},  # another request
        {"prompt": "zaba"},  # the same id, another prompt
        {"add_special_tokens": False},
        {"cache_salt": "x"},
    ],
)
def test_anything_but_the_same_request_is_not_given_the_held_render(other):
    memo = RenderMemo()
    memo.keep("r1", render_key(_request()), [{"prompt_token_ids": [1, 2]}])
    assert memo.take(_request(**other)) is None


def test_a_request_the_gateway_is_not_forwarding_here_is_not_given_it_and_leaves_it_held():
    """vLLM's /v1/completions/render passes a client's body and request_id to the same renderer:
    outside the forwarded request's context the id finds nothing, and the render stays held."""
    import contextvars

    memo = RenderMemo()
    memo.keep("r1", render_key(_request()), [{"prompt_token_ids": [1, 2]}])
    assert contextvars.Context().run(memo.take, _request()) is None
    assert len(memo) == 1 and memo.take(_request()) is not None


@pytest.mark.parametrize(
    "field", [{"suffix": "x"}, {"prompt_embeds": b"e"}, {"truncate_prompt_tokens": 4}, {"echo": True}]
)
def test_a_request_that_is_not_plain_has_no_key(field):
    assert render_key(_request()) is not None
    assert render_key(_request(**field)) is None


def test_the_memo_is_bounded_and_a_dropped_request_leaves_nothing():
    memo = RenderMemo(limit=3)
    for i in range(5):
        memo.keep(f"r{i}", ("p",), [])
    assert len(memo) == 3 and memo.take(_request(request_id="r0", prompt="p")) is None
    memo.drop("r4")
    memo.drop("never-held")
    assert len(memo) == 2


def test_the_wrapper_answers_held_renders_and_passes_everything_else_to_vllm():
    seen: list[Any] = []

    class Renderer:
        async def render_completion(self, request: Any, **kwargs: Any) -> Any:
            seen.append((request.request_id, kwargs))
            return [{"prompt_token_ids": [9], "arrival_time": 0.0}]

    renderer, memo = Renderer(), RenderMemo()
    assert remember_renders(renderer, memo)
    memo.keep("r1", render_key(_request()), [{"prompt_token_ids": [1, 2], "arrival_time": 0.0}])
    assert asyncio.run(renderer.render_completion(_request()))[0]["prompt_token_ids"] == [1, 2]
    assert seen == []
    assert asyncio.run(renderer.render_completion(_request(), skip_mm_cache=True))[0]["prompt_token_ids"] == [9]
    assert seen == [("r1", {"skip_mm_cache": True})]
    assert not remember_renders(SimpleNamespace(), memo)


@pytest.mark.slow  # vLLM's renderer builds a whole VllmConfig first (about 10 s)
def test_the_held_render_is_what_vllm_renders_for_the_forwarded_request():
    """For each plain prompt form: the gateway counts the body without its budget, vLLM's route
    renders the forwarded body (budget clamped, priority and request_id set): the same inputs."""
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from serving.demo_model import ensure_demo_model
    from serving.prompts import VllmCounter, offline_renderer

    renderer = offline_renderer(str(ensure_demo_model()), kv_cache_memory_bytes=1 << 30)
    counter = VllmCounter(renderer)
    bodies = [
        {"prompt": "zaba kelo mu"},
        {"prompt": ["zaba", "kelo mu tiro"]},
        {"prompt": [5, 6, 7]},
        {"prompt": [[5, 6], [7, 8, 9]]},
        {"prompt": "zaba kelo", "cache_salt": "tenant-a"},
        {"prompt": "zaba kelo", "add_special_tokens": False},
        {"prompt": "zaba " * 600},  # past the in-place render's size: vLLM's pool renders it
    ]

    async def both(body: dict[str, Any]) -> tuple[list[dict], list[dict]]:
        counted = await counter.completion({"model": "m", **body})
        assert counted.rendered is not None and counted.patch == {}
        forwarded = CompletionRequest.model_validate(
            {"model": "m", **body, "max_tokens": 7, "priority": 3, "request_id": "kv-1"}
        )
        vllms = await renderer.render_completion(forwarded)
        memo = RenderMemo()
        memo.keep("kv-1", *counted.rendered)
        held = memo.take(forwarded)
        assert held is not None
        return held, vllms

    for body in bodies:
        held, vllms = asyncio.run(both(body))
        strip = [{k: v for k, v in i.items() if k != "arrival_time"} for i in held]
        assert strip == [{k: v for k, v in i.items() if k != "arrival_time"} for i in vllms], body


def test_the_gateway_holds_a_render_while_vllm_runs_the_request_and_drops_it_after():
    """Through the gateway: the forwarded body keeps the client's prompt and carries the
    gateway's request id, the render is held under that id while the app runs, and gone after."""
    import json

    import httpx

    from serving.prompts import Counted
    from tests.unit.test_gateway import KEY, _gateway

    memo = RenderMemo()
    held_during: list[bool] = []

    class Counter:
        async def completion(self, body: dict[str, Any]) -> Counted:
            inputs = [{"prompt_token_ids": [1, 2, 3], "prompt": body["prompt"], "arrival_time": 0.0}]
            return Counted([3], rendered=(render_key(_request(prompt=body["prompt"])), inputs))

    gateway, engine = _gateway(counter=Counter(), memo=memo)
    app = gateway.app

    async def watching(scope: Any, receive: Any, send: Any) -> None:
        held_during.append(len(memo) == 1)
        await app(scope, receive, send)

    gateway.app = watching

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = json.dumps({"model": "m", "prompt": "zaba kelo", "max_tokens": 4})
            return await client.post("/v1/completions", content=body, headers={"authorization": f"Bearer {KEY}"})

    response = asyncio.run(go())
    assert response.status_code == 200, response.text
    ((_, _, forwarded),) = engine.seen
    assert forwarded["prompt"] == "zaba kelo" and forwarded["request_id"] == response.headers["x-request-id"]
    assert held_during == [True] and len(memo) == 0
