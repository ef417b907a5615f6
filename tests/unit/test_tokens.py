"""Prompt token counting with the model's own tokenizer (the demo model's, here)."""

import pytest
from transformers import AutoTokenizer

from serving.demo_model import ensure_demo_model
from serving.errors import Rejection
from serving.tokens import CHAT, COMPLETIONS, prompt_tokens


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(ensure_demo_model()))


def test_completion_prompts_of_every_accepted_shape(tokenizer):
    one = len(tokenizer.encode("zaba kelo"))
    assert prompt_tokens(COMPLETIONS, {"prompt": "zaba kelo"}, tokenizer).counts == [one]
    assert prompt_tokens(COMPLETIONS, {"prompt": ["zaba kelo", "zaba kelo"]}, tokenizer).counts == [
        one,
        one,
    ]
    assert prompt_tokens(COMPLETIONS, {"prompt": [1, 2, 3]}, tokenizer).counts == [3]
    assert prompt_tokens(COMPLETIONS, {"prompt": [[1, 2], [3]]}, tokenizer).counts == [2, 1]


def test_chat_counts_the_rendered_template(tokenizer):
    messages = [{"role": "user", "content": "zaba"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = rendered["input_ids"] if isinstance(rendered, dict) else rendered
    assert prompt_tokens(CHAT, {"messages": messages}, tokenizer).counts == [len(ids)]
    parts = [{"role": "user", "content": [{"type": "text", "text": "zaba"}]}]
    assert prompt_tokens(CHAT, {"messages": parts}, tokenizer).counts == [len(ids)]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (COMPLETIONS, {}),
        (COMPLETIONS, {"prompt": 3}),
        (COMPLETIONS, {"prompt": []}),
        (COMPLETIONS, {"prompt": [[]]}),
        (CHAT, {"messages": "hi"}),
        (CHAT, {"messages": [{"content": "x"}]}),
        (CHAT, {"messages": [{"role": "user", "content": [{"text": "no type"}]}]}),
    ],
)
def test_unreadable_prompts_are_400(tokenizer, path, body):
    with pytest.raises(Rejection) as error:
        prompt_tokens(path, body, tokenizer)
    assert error.value.status == 400


def test_text_prompts_are_forwarded_as_the_ids_vllm_would_make(tokenizer):
    single = prompt_tokens(COMPLETIONS, {"prompt": "zaba kelo"}, tokenizer)
    assert single.ids == tokenizer.encode("zaba kelo")  # BOS included, as vLLM adds it
    many = prompt_tokens(COMPLETIONS, {"prompt": ["zaba", "kelo"]}, tokenizer)
    assert many.ids == [tokenizer.encode("zaba"), tokenizer.encode("kelo")]
    assert prompt_tokens(COMPLETIONS, {"prompt": [5, 6]}, tokenizer).ids is None
    assert prompt_tokens(CHAT, {"messages": [{"role": "user", "content": "x"}]}, tokenizer).ids is None
