"""Count a request's prompt tokens with the model's own tokenizer, before the engine sees it.

The gateway needs the numbers to refuse requests over max_model_len or a tenant's limits; a
shape it cannot read is a 400 here rather than a pass-through that skips the limits. Text
prompts of /v1/completions are tokenised once: the ids go on to vLLM, which then skips its
own tokenisation (same tokenizer, same special tokens), so the gateway adds no second pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from serving.errors import Rejection

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


class Tokenizer(Protocol):
    """The part of vLLM's (and Hugging Face's) tokenizer the gateway uses."""

    def encode(self, text: str, /) -> list[int]: ...

    def apply_chat_template(self, messages: Any, /, **kwargs: Any) -> Any: ...


def _bad(message: str, param: str) -> Rejection:
    return Rejection(400, "invalid_request", message, param=param)


@dataclass(frozen=True)
class PromptTokens:
    counts: list[int]  # tokens of each prompt (a completions call may carry several)
    ids: Any = None  # completions text prompt(s) as token ids, in the shape vLLM accepts


def prompt_tokens(path: str, body: dict[str, Any], tokenizer: Tokenizer) -> PromptTokens:
    """Tokens of each prompt of the request, and the ids to forward when the gateway made them."""
    if path == COMPLETIONS:
        return _completion_prompts(body.get("prompt"), tokenizer)
    return PromptTokens([_chat_prompt(body.get("messages"), body, tokenizer)])


def _is_token_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _completion_prompts(prompt: object, tokenizer: Tokenizer) -> PromptTokens:
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
        return PromptTokens([len(ids)], ids)
    if isinstance(prompt, list) and prompt:
        if _is_token_ids(prompt):
            return PromptTokens([len(prompt)])
        if all(isinstance(p, str) for p in prompt):
            many = [tokenizer.encode(str(p)) for p in prompt]
            return PromptTokens([len(ids) for ids in many], many)
        if all(_is_token_ids(p) and p for p in prompt):
            return PromptTokens([len(p) for p in prompt if isinstance(p, list)])
    if prompt is None:
        raise _bad("'prompt' is required", "prompt")
    raise _bad(
        "'prompt' must be a string, a list of strings, a list of token ids, or a list of lists of token ids",
        "prompt",
    )


def _text_of(content: object, index: int) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _bad(f"messages[{index}].content parts must be objects with a 'type'", "messages")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise _bad(f"messages[{index}].content text parts need a string 'text'", "messages")
                parts.append(part["text"])
        return "\n".join(parts)
    raise _bad(f"messages[{index}].content must be a string or a list of parts", "messages")


def _chat_prompt(messages: object, body: dict[str, Any], tokenizer: Tokenizer) -> int:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    conversation = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a string 'role'", "messages")
        conversation.append({"role": message["role"], "content": _text_of(message.get("content"), i)})
    try:
        ids = tokenizer.apply_chat_template(
            conversation,
            tokenize=True,
            add_generation_prompt=bool(body.get("add_generation_prompt", True)),
        )
        if isinstance(ids, dict):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return len(ids)
    except Exception:  # no template or an unusual one: count the text, vLLM checks again
        return sum(len(tokenizer.encode(m["content"])) for m in conversation)
