"""The shortcut in front of vLLM's `_extract_prompt_text` (serving/prompt_text.py) answers what
vLLM's method answers, on every prompt form, and declines where it cannot know."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

from serving.prompt_text import fast_prompt_text

PROMPTS: list[Any] = [
    {"prompt_token_ids": [1, 2, 3]},  # what the gateway forwards: ids, no text
    {"type": "token", "prompt_token_ids": [1, 2, 3]},
    {"prompt_token_ids": [1, 2, 3], "prompt": "one two three"},  # ids with their text (echo)
    {"prompt_token_ids": [1], "prompt": 3},  # vLLM does not check the text beside ids
    {"prompt_embeds": torch.zeros(2, 4)},
    {"prompt_embeds": torch.zeros(2, 4), "prompt": "x"},
    {"prompt": "text only"},
    "a plain string",
    [4, 5, 6],
]

REFUSED: list[Any] = [
    {"encoder_prompt": {"prompt": "x"}, "prompt_token_ids": [1]},  # an encoder-decoder prompt
    {},  # neither text, ids nor embeddings
    {"prompt": 3},  # text that is not a string
    ["a", 1],  # a list of neither
    3,
]


def serving(encoder_decoder: bool = False) -> Any:
    """vLLM's completion serving object with only what its prompt-text method reads."""
    found = object.__new__(OpenAIServingCompletion)
    found.model_config = SimpleNamespace(is_encoder_decoder=encoder_decoder)
    return found


def test_the_shortcut_answers_what_vllm_answers_on_every_prompt_form():
    vllm, fast = serving(), serving()
    assert fast_prompt_text(fast, fast.model_config)
    assert fast._extract_prompt_text is not vllm._extract_prompt_text
    for prompt in PROMPTS:
        assert fast._extract_prompt_text(prompt) == vllm._extract_prompt_text(prompt), prompt
    for prompt in REFUSED:
        with pytest.raises(TypeError) as theirs:
            vllm._extract_prompt_text(prompt)
        with pytest.raises(TypeError) as ours:
            fast._extract_prompt_text(prompt)
        assert str(ours.value) == str(theirs.value), prompt


def test_an_id_prompt_skips_vllms_parse():
    fast = serving()
    parsed: list[Any] = []
    vllm_method = fast._extract_prompt_text

    def counting(prompt: Any) -> Any:
        parsed.append(prompt)
        return vllm_method(prompt)

    fast._extract_prompt_text = counting
    assert fast_prompt_text(fast, fast.model_config)
    for _ in range(64):  # a 64-token stream asks once a token
        assert fast._extract_prompt_text({"prompt_token_ids": [1, 2, 3]}) is None
    assert parsed == []
    assert fast._extract_prompt_text("text") == "text" and parsed == ["text"]


def test_an_encoder_decoder_model_or_another_vllm_keeps_vllms_method():
    encoder_decoder = serving(encoder_decoder=True)
    method = encoder_decoder._extract_prompt_text
    assert not fast_prompt_text(encoder_decoder, encoder_decoder.model_config)
    assert encoder_decoder._extract_prompt_text == method
    assert not fast_prompt_text(SimpleNamespace(), SimpleNamespace(is_encoder_decoder=False))
    assert not fast_prompt_text(serving(), SimpleNamespace())  # a config that does not say
