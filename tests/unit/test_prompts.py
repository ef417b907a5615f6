"""Prompt counting: every field the engine renders is counted (tools, tool calls, documents,
system prompts), unreadable shapes and parts a text model cannot take are 400s, text prompts go
on as the ids vLLM would make."""

import asyncio

import pytest
from transformers import AutoTokenizer

from serving.demo_model import ensure_demo_model
from serving.errors import Rejection
from serving.prompts import TokenizerCounter


@pytest.fixture(scope="module")
def counter():
    return TokenizerCounter(AutoTokenizer.from_pretrained(str(ensure_demo_model())))


def run(coroutine):
    return asyncio.run(coroutine)


def test_completion_prompts_of_every_accepted_shape(counter):
    one = len(counter.tokenizer.encode("zaba kelo"))
    assert run(counter.completion({"prompt": "zaba kelo"})).counts == [one]
    assert run(counter.completion({"prompt": ["zaba kelo", "zaba kelo"]})).counts == [one, one]
    assert run(counter.completion({"prompt": [1, 2, 3]})).counts == [3]
    assert run(counter.completion({"prompt": [[1, 2], [3]]})).counts == [2, 1]


def test_chat_counts_the_rendered_template(counter):
    messages = [{"role": "user", "content": "zaba"}]
    rendered = counter.tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = rendered["input_ids"] if hasattr(rendered, "keys") else rendered
    assert run(counter.chat({"messages": messages})).counts == [len(ids)]
    parts = [{"role": "user", "content": [{"type": "text", "text": "zaba"}]}]
    assert run(counter.chat({"messages": parts})).counts == [len(ids)]


def test_tools_and_tool_calls_are_counted_not_dropped(counter):
    plain = run(counter.chat({"messages": [{"role": "user", "content": "zaba"}]})).counts[0]
    tools = [{"type": "function", "function": {"name": "f", "description": "kelo " * 40000}}]
    with_tools = run(counter.chat({"messages": [{"role": "user", "content": "zaba"}], "tools": tools})).counts[0]
    assert with_tools > plain + 40000  # 40,000 words in `tools` are charged as such, not as 12 tokens
    calls = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"arguments": "kelo " * 500}}]}
    ]
    assert run(counter.chat({"messages": calls})).counts[0] > 500


def test_anthropic_messages_and_responses_count_their_system_and_instructions(counter):
    base = run(counter.messages({"messages": [{"role": "user", "content": "zaba"}]})).counts[0]
    assert (
        run(counter.messages({"messages": [{"role": "user", "content": "zaba"}], "system": "kelo " * 100})).counts[0]
        > base + 100
    )
    assert run(counter.responses({"input": "zaba", "instructions": "kelo " * 100})).counts[0] > 100


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("completion", {}),
        ("completion", {"prompt": 3}),
        ("completion", {"prompt": []}),
        ("completion", {"prompt": [[]]}),
        ("chat", {"messages": "hi"}),
        ("chat", {"messages": [{"content": "x"}]}),
        ("chat", {"messages": [{"role": "user", "content": [{"text": "no type"}]}]}),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        ("responses", {"input": 5}),
    ],
)
def test_unreadable_prompts_are_400(counter, kind, body):
    with pytest.raises(Rejection) as error:
        run(getattr(counter, kind)(body))
    assert error.value.status == 400


def test_text_prompts_are_forwarded_as_the_ids_vllm_would_make(counter):
    single = run(counter.completion({"prompt": "zaba kelo"}))
    assert single.patch["prompt"] == counter.tokenizer.encode("zaba kelo")  # BOS included, as vLLM adds it
    many = run(counter.completion({"prompt": ["zaba", "kelo"]}))
    assert many.patch["prompt"] == [counter.tokenizer.encode("zaba"), counter.tokenizer.encode("kelo")]
    assert run(counter.completion({"prompt": [5, 6]})).patch == {}


def test_the_vllm_counter_finds_vllms_request_models():
    from serving.prompts import _vllm

    names = _vllm()
    assert names.ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "a"}]})
    assert names.CompletionRequest.model_validate({"prompt": "a"})
    assert issubclass(names.VLLMValidationError, names.VLLMClientError)
