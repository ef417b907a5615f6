"""The counter `kvscope serve` uses: vLLM's own renderer (no engine started), so the gateway
charges what the engine will run: chat templates, tools and tool calls included."""

from __future__ import annotations

import asyncio

import pytest

from serving.demo_model import ensure_demo_model
from serving.errors import Rejection
from serving.prompts import TooLong, VllmCounter, offline_renderer

pytestmark = pytest.mark.slow  # vLLM's renderer builds a whole VllmConfig first (about 10 s)


@pytest.fixture(scope="module")
def counter() -> VllmCounter:
    return VllmCounter(offline_renderer(str(ensure_demo_model()), kv_cache_memory_bytes=1 << 30))


def run(coroutine):
    return asyncio.run(coroutine)


USER = [{"role": "user", "content": "zaba"}]


def test_a_plain_completion_keeps_its_render_for_vllm_and_goes_on_as_sent(counter):
    counted = run(counter.completion({"prompt": "zaba kelo"}))
    assert counted.patch == {} and counted.rendered is not None  # the text goes on; the render waits
    key, (engine_input,) = counted.rendered
    assert key[0] == "zaba kelo"
    assert counted.counts == [len(engine_input["prompt_token_ids"])] and engine_input["prompt_token_ids"][0] == 1
    assert run(counter.completion({"prompt": [5, 6, 7]})).counts == [3]


def test_a_completion_vllm_must_render_itself_goes_on_as_the_ids_it_made(counter):
    counted = run(counter.completion({"prompt": "zaba kelo", "echo": True}))  # echo: not held
    assert counted.rendered is None
    assert counted.counts == [len(counted.patch["prompt"])] and counted.patch["prompt"][0] == 1  # <s>


def test_chat_counts_tools_and_forwards_its_ids_for_reuse(counter):
    plain = run(counter.chat({"messages": USER}))
    tools = [{"type": "function", "function": {"name": "f", "description": "kelo " * 300}}]
    with_tools = run(counter.chat({"messages": USER, "tools": tools, "tool_choice": "none"}))
    assert with_tools.counts[0] > plain.counts[0] + 300
    ids = with_tools.patch["kv_transfer_params"]["prompt_token_ids"]
    assert len(ids) == with_tools.counts[0]


def test_anthropic_messages_forward_their_ids_and_vllm_renders_those_not_the_text(counter):
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    body = {"model": "m", "messages": USER, "max_tokens": 1, "system": "kelo"}
    counted = run(counter.messages(body))
    ids = counted.patch["kv_transfer_params"]["prompt_token_ids"]
    assert len(ids) == counted.counts[0]
    # What vLLM's Messages route then does with the forwarded body: convert it to a chat
    # request and render that. Forward other (valid) ids and the render returns exactly them:
    # it took the ids, it did not template and tokenise the text again.
    marker = list(reversed(ids))
    forwarded = AnthropicMessagesRequest.model_validate({**body, "kv_transfer_params": {"prompt_token_ids": marker}})
    chat = AnthropicServingMessages.to_chat_completion_request(forwarded)
    _conversation, (engine_input,) = run(counter.renderer.render_chat(chat))
    assert list(engine_input["prompt_token_ids"]) == marker


def test_system_prompts_of_messages_and_instructions_of_responses_are_counted(counter):
    base = run(counter.messages({"model": "m", "messages": USER, "max_tokens": 1})).counts[0]
    system = run(counter.messages({"model": "m", "messages": USER, "max_tokens": 1, "system": "kelo " * 200})).counts[0]
    assert system > base + 200
    plain = run(counter.responses({"input": "zaba"})).counts[0]
    assert run(counter.responses({"input": "zaba", "instructions": "kelo " * 200})).counts[0] > plain + 200


@pytest.mark.parametrize(
    ("method", "body", "param"),
    [
        ("chat", {"messages": []}, "messages"),
        ("chat", {"messages": "hi"}, "messages"),
        (
            "chat",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}],
                    }
                ]
            },
            None,
        ),
        ("completion", {}, "prompt"),
        ("completion", {"prompt": "a", "temperature": "hot"}, "temperature"),
        ("messages", {"model": "m", "messages": USER}, "max_tokens"),
    ],
)
def test_what_vllm_would_refuse_is_a_400(counter, method, body, param):
    with pytest.raises(Rejection) as refused:
        run(getattr(counter, method)(body))
    assert refused.value.status == 400
    if param is not None:
        assert refused.value.param == param


def test_a_prompt_past_the_context_reports_its_length(counter):
    with pytest.raises(TooLong) as too_long:
        run(counter.completion({"prompt": [7] * 20000}))
    assert too_long.value.tokens >= 16384
