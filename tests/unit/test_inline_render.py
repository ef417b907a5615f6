"""Short prompts rendered in place, long ones in vLLM's thread pool (serving/inline_render.py):
the same ids either way, and nothing long, and no template but the server's, held on the loop."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from typing import Any

import pytest

from serving.demo_model import ensure_demo_model, synthetic_text
from serving.inline_render import INLINE_RENDER_CHARS, inline_short_renders, within
from serving.prompts import Counted, VllmCounter, offline_renderer


def test_within_counts_every_string_and_stops_past_the_limit():
    value = {"a": ["xx", {"b": "yyy"}], "c": ("z", 3, None, True)}
    assert within(value, 6) and not within(value, 5)
    assert within(None, 0) and within([], 0)
    assert not within(["x" * 10] * 1000, 5)


@pytest.fixture(scope="module")
def renderers() -> tuple[Any, Any]:
    model = str(ensure_demo_model())
    return (
        offline_renderer(model, kv_cache_memory_bytes=1 << 30),  # as kvscope serve: short ones in place
        offline_renderer(model, inline_chars=0, kv_cache_memory_bytes=1 << 30),  # vLLM's own: all offloaded
    )


@contextlib.contextmanager
def pool_calls(online: Any) -> Iterator[list[str]]:
    """The names of what vLLM's renderer hands its thread pool while the block runs."""
    executor, calls = online.renderer._executor, []
    submit = executor.submit

    def spy(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        inner = getattr(fn, "func", fn)
        calls.append(getattr(inner, "__name__", repr(inner)))
        return submit(fn, *args, **kwargs)

    executor.submit = spy
    try:
        yield calls
    finally:
        del executor.submit


def text(chars: int) -> str:
    return synthetic_text(random.Random(chars), chars)[:chars]


SIZES = (12, INLINE_RENDER_CHARS - 40, INLINE_RENDER_CHARS + 1, 4 * INLINE_RENDER_CHARS)


@pytest.mark.slow  # two renderers, each a whole VllmConfig (about 10 s)
@pytest.mark.parametrize("chars", SIZES)
def test_in_place_and_in_the_pool_render_the_same_ids(renderers, chars):
    inline, pooled = (VllmCounter(r) for r in renderers)
    prompt = text(chars)
    tools = [{"type": "function", "function": {"name": "search", "description": text(chars // 2)}}]
    bodies = {
        "completion": {"prompt": prompt},
        "chat": {"messages": [{"role": "user", "content": prompt}]},
        "messages": {
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 1,
            "system": "kelo",
        },
        "responses": {"input": prompt},
    }
    for method, body in bodies.items():
        assert _ids(asyncio.run(getattr(inline, method)(body))) == _ids(asyncio.run(getattr(pooled, method)(body))), (
            method
        )
    with_tools = {"messages": [{"role": "user", "content": prompt}], "tools": tools, "tool_choice": "none"}
    assert _ids(asyncio.run(inline.chat(with_tools))) == _ids(asyncio.run(pooled.chat(with_tools)))


def _ids(counted: Counted) -> tuple:
    """What a count hands on: its counts, its patch, and the ids of a render held for vLLM's
    route (each render's arrival time is its own)."""
    held = None if counted.rendered is None else [i["prompt_token_ids"] for i in counted.rendered[1]]
    return counted.counts, counted.patch, held


@pytest.mark.slow
def test_short_text_stays_on_the_loop_and_long_text_goes_to_the_pool(renderers):
    counter = VllmCounter(renderers[0])
    short, long = text(200), text(INLINE_RENDER_CHARS + 1)
    with pool_calls(renderers[0]) as calls:
        asyncio.run(counter.completion({"prompt": short}))
        asyncio.run(counter.chat({"messages": [{"role": "user", "content": short}]}))
    assert calls == []
    with pool_calls(renderers[0]) as calls:
        asyncio.run(counter.completion({"prompt": long}))
    assert calls == ["_tokenize_prompt"]
    with pool_calls(renderers[0]) as calls:
        asyncio.run(counter.chat({"messages": [{"role": "user", "content": long}]}))
    assert "safe_apply_chat_template" in calls
    # short messages, but tools that take the whole past the limit: the pool
    tools = [{"type": "function", "function": {"name": "f", "description": long}}]
    with pool_calls(renderers[0]) as calls:
        asyncio.run(
            counter.chat({"messages": [{"role": "user", "content": short}], "tools": tools, "tool_choice": "none"})
        )
    assert "safe_apply_chat_template" in calls
    # vLLM's own, for comparison: the short ones offloaded too
    with pool_calls(renderers[1]) as calls:
        asyncio.run(VllmCounter(renderers[1]).completion({"prompt": short}))
    assert calls == ["_tokenize_prompt"]


@pytest.mark.slow
def test_a_template_other_than_the_servers_keeps_vllms_pool_and_its_timeout(renderers):
    online = renderers[0]
    renderer = online.renderer
    conversation = [{"role": "user", "content": "zaba"}]
    args = (renderer.model_config, renderer.get_tokenizer(), conversation)
    with pool_calls(online) as calls:
        asyncio.run(renderer._apply_chat_template_async(*args, tokenize=False))
    assert calls == []
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pool_calls(online) as calls:
        rendered = asyncio.run(renderer._apply_chat_template_async(*args, chat_template=template, tokenize=False))
    assert calls == ["safe_apply_chat_template"] and rendered == "zaba"


def test_zero_leaves_vllms_renderer_as_it_is():
    class Renderer:
        async def _tokenize_prompt_async(self, prompt: Any, params: Any) -> Any: ...

        def _tokenize_prompt(self, prompt: Any, params: Any) -> Any: ...

    renderer = Renderer()
    before = renderer._tokenize_prompt_async
    assert inline_short_renders(renderer, 0) == []
    assert renderer._tokenize_prompt_async == before
    assert inline_short_renders(renderer, 10) == ["tokenize"]  # not vLLM's HfRenderer: no template step
    assert inline_short_renders(object(), 10) == []  # another vLLM's shape: left alone
