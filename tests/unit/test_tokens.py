"""Prompt token counting with the model's own tokenizer (the demo model's, here)."""

import pytest
from transformers import AutoTokenizer

from serving.demo_model import ensure_demo_model
from serving.errors import Rejection
from serving.tokens import CHAT, COMPLETIONS, prompt_token_counts


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(ensure_demo_model()))


def test_completion_prompts_of_every_accepted_shape(tokenizer):
    one = len(tokenizer.encode("zaba kelo"))
    assert prompt_token_counts(COMPLETIONS, {"prompt": "zaba kelo"}, tokenizer) == [one]
    assert prompt_token_counts(COMPLETIONS, {"prompt": ["zaba kelo", "zaba kelo"]}, tokenizer) == [
        one,
        one,
    ]
    assert prompt_token_counts(COMPLETIONS, {"prompt": [1, 2, 3]}, tokenizer) == [3]
    assert prompt_token_counts(COMPLETIONS, {"prompt": [[1, 2], [3]]}, tokenizer) == [2, 1]


def test_chat_counts_the_rendered_template(tokenizer):
    messages = [{"role": "user", "content": "zaba"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = rendered["input_ids"] if isinstance(rendered, dict) else rendered
    assert prompt_token_counts(CHAT, {"messages": messages}, tokenizer) == [len(ids)]
    parts = [{"role": "user", "content": [{"type": "text", "text": "zaba"}]}]
    assert prompt_token_counts(CHAT, {"messages": parts}, tokenizer) == [len(ids)]


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
        prompt_token_counts(path, body, tokenizer)
    assert error.value.status == 400
