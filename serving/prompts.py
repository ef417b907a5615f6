"""Count what the engine will see: each admitted body rendered the way vLLM renders it.

In `kvscope serve` the counter is vLLM's own renderer (`app.state.online_renderer`): chat
templates, `tools`, `tool_calls`, documents and multimodal parts are rendered exactly as the
engine will get them, and a part the model cannot take is a 400. The render goes on to vLLM,
which then skips its own tokenisation: a plain completion's whole render, held for vLLM's route
(serving/render_memo.py; other completions as their ids in `prompt`), chat and Anthropic
Messages (which vLLM converts to a chat request, kv_transfer_params kept) as the token reuse vLLM
offers for disaggregated serving (`kv_transfer_params.prompt_token_ids`), so a prompt is
tokenised once.
Responses has no such reuse in vLLM 0.32 (its renderer reads no ids): rendered twice, the
second render about 0.56 ms of CPU for 148 tokens (docs/benchmarks.md, Admission CPU). Short
prompts are rendered on the event loop, long ones in vLLM's pool (serving/inline_render.py).
Tests use the tokenizer counter, which renders the same fields with the tokenizer's chat
template.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

from serving.errors import Rejection
from serving.inline_render import INLINE_RENDER_CHARS, inline_short_renders
from serving.pooling_prompts import Encode, count_pooling
from serving.render_memo import Rendered, render_key
from serving.routes import Shape


@dataclass(frozen=True)
class Counted:
    counts: list[int]  # tokens of each prompt the engine will run
    patch: dict[str, Any] = field(default_factory=dict)  # fields to set in the forwarded body
    # a completion's render, for vLLM's route to take (serving/render_memo.py): its key, its inputs
    rendered: Rendered | None = None
    # the counted body as vLLM's request model validated it, for its route (serving/request_handoff.py)
    request: Any = None


class TooLong(Exception):  # noqa: N818 - an outcome of counting, not an error of ours
    """The renderer stopped at the context length: the tokens it counted (at least)."""

    def __init__(self, tokens: int) -> None:
        super().__init__(f"{tokens} prompt tokens")
        self.tokens = tokens


def bad(message: str, param: str | None = None) -> Rejection:
    return Rejection(400, "invalid_request", message, param=param)


class PromptCounter(Protocol):
    async def completion(self, body: dict[str, Any]) -> Counted: ...

    async def chat(self, body: dict[str, Any]) -> Counted: ...

    async def messages(self, body: dict[str, Any]) -> Counted: ...

    async def responses(self, body: dict[str, Any]) -> Counted: ...

    async def pooling(self, shape: Shape, body: dict[str, Any]) -> Counted: ...


class Tokenizer(Protocol):
    """The part of vLLM's (and Hugging Face's) tokenizer the tokenizer counter uses."""

    def encode(self, text: str, /) -> list[int]: ...

    def apply_chat_template(self, messages: Any, /, **kwargs: Any) -> Any: ...


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _text(value: object, where: str) -> str:
    """Every string inside a message part, tool or document, for counting (order kept)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return "" if value is None else str(value)
    if isinstance(value, list):
        return "\n".join(_text(v, where) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}: {_text(v, where)}" for k, v in value.items())
    raise bad(f"{where} holds a value that is not JSON", where)


def _content(content: object, where: str) -> str:
    """A message's text: a string, or its text parts (a text-only tokenizer takes nothing else)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad(f"{where}.content parts must be objects with a 'type'", "messages")
            if part["type"] not in ("text", "input_text"):
                raise bad(f"{where}: this model takes text only, not '{part['type']}' parts", "messages")
            if not isinstance(part.get("text"), str):
                raise bad(f"{where}.content text parts need a string 'text'", "messages")
            texts.append(part["text"])
        return "\n".join(texts)
    raise bad(f"{where}.content must be a string or a list of parts", "messages")


class TokenizerCounter:
    """Counts with a tokenizer: the chat template when it has one, every field's text counted."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    async def completion(self, body: dict[str, Any]) -> Counted:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
            return Counted([len(ids)], {"prompt": ids})
        if isinstance(prompt, list) and prompt:
            if _is_ids(prompt):
                return Counted([len(prompt)])
            if all(isinstance(p, str) for p in prompt):
                many = [self.tokenizer.encode(p) for p in prompt]
                return Counted([len(ids) for ids in many], {"prompt": many})
            if all(_is_ids(p) and p for p in prompt):
                return Counted([len(p) for p in prompt])
        if prompt is None:
            raise bad("'prompt' is required", "prompt")
        raise bad(
            "'prompt' must be a string, a list of strings, a list of token ids, or a list of lists of token ids",
            "prompt",
        )

    def _conversation(self, messages: object, param: str = "messages") -> list[dict[str, str]]:
        if not isinstance(messages, list) or not messages:
            raise bad(f"'{param}' must be a non-empty list", param)
        out = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise bad(f"{param}[{i}] must be an object with a string 'role'", param)
            text = _content(message.get("content"), f"{param}[{i}]")
            rest = {k: v for k, v in message.items() if k not in ("role", "content") and v is not None}
            if rest:  # tool_calls, a tool's name and id: they are rendered into the prompt too
                text += ("\n" if text else "") + json.dumps(rest, ensure_ascii=False)
            out.append({"role": message["role"], "content": text})
        return out

    def _render(self, conversation: list[dict[str, str]], extra: str) -> int:
        text_tokens = len(self.tokenizer.encode(extra)) if extra else 0
        try:
            ids = self.tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, Mapping):  # BatchEncoding (a UserDict) in newer transformers
                ids = ids["input_ids"]
            return len(ids) + text_tokens
        except Exception:  # no template: count the text
            return sum(len(self.tokenizer.encode(m["content"])) for m in conversation) + text_tokens

    async def chat(self, body: dict[str, Any]) -> Counted:
        extra = _text({k: body[k] for k in ("tools", "documents") if body.get(k)}, "tools")
        return Counted([self._render(self._conversation(body.get("messages")), extra)])

    async def messages(self, body: dict[str, Any]) -> Counted:
        system = body.get("system")
        conversation = self._conversation(body.get("messages"))
        if system:
            conversation.insert(0, {"role": "system", "content": _text(system, "system")})
        return Counted([self._render(conversation, _text(body.get("tools") or "", "tools"))])

    async def responses(self, body: dict[str, Any]) -> Counted:
        items = body.get("input")
        if isinstance(items, str):
            conversation = [{"role": "user", "content": items}]
        elif isinstance(items, list) and items:
            conversation = [
                {
                    "role": str(item.get("role", "user")) if isinstance(item, dict) else "user",
                    "content": _text(item, "input"),
                }
                for item in items
            ]
        else:
            raise bad("'input' must be a string or a non-empty list", "input")
        if body.get("instructions"):
            conversation.insert(0, {"role": "system", "content": _text(body["instructions"], "instructions")})
        return Counted([self._render(conversation, _text(body.get("tools") or "", "tools"))])

    async def pooling(self, shape: Shape, body: dict[str, Any]) -> Counted:
        return await _pooling(self, shape, body, lambda text: len(self.tokenizer.encode(text)))


def _non_empty(body: dict[str, Any], key: str) -> None:
    if not isinstance(body.get(key), list) or not body[key]:
        raise bad(f"'{key}' must be a non-empty list", key)


@functools.cache
def _vllm() -> SimpleNamespace:
    """vLLM's request models and errors, imported on first use (the gateway's tests need none)."""
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
    from vllm.exceptions import VLLMClientError, VLLMValidationError

    return SimpleNamespace(
        AnthropicMessagesRequest=AnthropicMessagesRequest,
        AnthropicServingMessages=AnthropicServingMessages,
        ChatCompletionRequest=ChatCompletionRequest,
        CompletionRequest=CompletionRequest,
        ResponsesRequest=ResponsesRequest,
        ErrorResponse=ErrorResponse,
        VLLMClientError=VLLMClientError,
        VLLMValidationError=VLLMValidationError,
    )


async def _pooling(counter: PromptCounter, shape: Shape, body: dict[str, Any], encode: Encode) -> Counted:
    async def chat(conversation: dict[str, Any]) -> int:
        return sum((await counter.chat({"messages": conversation["messages"]})).counts)

    return Counted(await count_pooling(shape, body, encode, chat))


class VllmCounter:
    """vLLM's own renderer: what the engine would render, tool schemas and templates included."""

    def __init__(self, online_renderer: Any) -> None:
        self.renderer = online_renderer

    @classmethod
    async def _rendered(cls, render: Any, what: str) -> list[list[int]]:
        """The prompt ids of one render call; vLLM's refusals become a 400 naming the field."""
        return cls._ids(await cls._inputs(render, what), what)

    @staticmethod
    def _ids(inputs: list[Any], what: str) -> list[list[int]]:
        ids = [list(i.get("prompt_token_ids") or []) for i in inputs]
        if not ids or not all(ids):
            raise bad(f"the {what} rendered to no prompt tokens")
        return ids

    @staticmethod
    async def _inputs(render: Any, what: str) -> list[Any]:
        """The engine inputs of one render call; vLLM's refusals become a 400 naming the field."""
        try:
            result = await render
        except _vllm().VLLMValidationError as exc:
            message = " ".join(str(exc).split())
            if exc.parameter == "input_tokens" and isinstance(exc.value, int):
                raise TooLong(exc.value) from None  # admission says by how much, like any other
            if exc.parameter == "input_text":
                raise Rejection(400, "context_length_exceeded", message, "prompt") from None
            raise bad(message, exc.parameter) from None
        except (_vllm().VLLMClientError, ValueError, TypeError, NotImplementedError) as exc:
            raise bad(" ".join(str(exc).split()) or f"the {what} cannot be rendered") from None
        if isinstance(result, _vllm().ErrorResponse):
            raise bad(result.error.message, getattr(result.error, "param", None))
        if isinstance(result, tuple):  # chat: (conversation, engine inputs)
            return list(result[1])
        if hasattr(result, "engine_input"):  # responses
            return [result.engine_input]
        return list(result)  # completions: the engine inputs

    @staticmethod
    def _validated(model: Any, body: dict[str, Any]) -> Any:
        import pydantic

        try:
            return model.model_validate(body)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise bad(f"{where}: {first['msg']}", where.split(".")[0] or None) from None
        except _vllm().VLLMValidationError as exc:  # vLLM's own validators raise these
            raise bad(" ".join(str(exc).split()), exc.parameter) from None
        except (_vllm().VLLMClientError, ValueError, TypeError) as exc:
            raise bad(" ".join(str(exc).split()) or "the request cannot be read") from None

    async def completion(self, body: dict[str, Any]) -> Counted:
        request = self._validated(_vllm().CompletionRequest, body)
        inputs = await self._inputs(self.renderer.render_completion(request), "prompt")
        ids = self._ids(inputs, "prompt")
        key = render_key(request)
        if key is not None:  # vLLM's route takes this render as it is: the prompt goes on unchanged
            return Counted([len(i) for i in ids], rendered=(key, inputs), request=request)
        prompt = body.get("prompt")
        text = isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(p, str) for p in prompt))
        patch = {"prompt": ids[0] if isinstance(prompt, str) else ids} if text and body.get("suffix") is None else {}
        return Counted([len(i) for i in ids], patch, request=request)

    async def chat(self, body: dict[str, Any]) -> Counted:
        _non_empty(body, "messages")
        request = self._validated(_vllm().ChatCompletionRequest, body)
        (ids,) = await self._rendered(self.renderer.render_chat(request), "conversation")
        kv = dict(body.get("kv_transfer_params") or {})
        return Counted([len(ids)], {"kv_transfer_params": {**kv, "prompt_token_ids": ids}}, request=request)

    async def messages(self, body: dict[str, Any]) -> Counted:
        _non_empty(body, "messages")
        request = self._validated(_vllm().AnthropicMessagesRequest, body)
        try:
            chat = _vllm().AnthropicServingMessages.to_chat_completion_request(request)
        except (ValueError, TypeError, KeyError) as exc:
            raise bad(" ".join(str(exc).split()) or "the messages cannot be converted", "messages") from None
        (ids,) = await self._rendered(self.renderer.render_chat(chat), "messages")
        # vLLM converts the body to this same chat request, kv_transfer_params included, and
        # its chat renderer reuses the ids there: the messages are tokenised once.
        kv = dict(body.get("kv_transfer_params") or {})
        return Counted([len(ids)], {"kv_transfer_params": {**kv, "prompt_token_ids": ids}})

    async def responses(self, body: dict[str, Any]) -> Counted:
        request = self._validated(_vllm().ResponsesRequest, body)
        (ids,) = await self._rendered(self.renderer.render_responses(request), "input")
        return Counted([len(ids)])

    async def pooling(self, shape: Shape, body: dict[str, Any]) -> Counted:
        tokenizer = self.renderer.renderer.tokenizer
        if tokenizer is None:
            raise bad("this model serves no tokenizer: the gateway cannot count text")
        return await _pooling(self, shape, body, lambda text: len(tokenizer.encode(text)))


def canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def offline_renderer(model: str, inline_chars: int = INLINE_RENDER_CHARS, **engine_args: Any) -> Any:
    """vLLM's OnlineRenderer for `model` as `kvscope serve` sets it up (short prompts rendered in
    place, serving/inline_render.py), without starting an engine: what tests and the admission
    benchmark count with."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers import renderer_from_config
    from vllm.renderers.online_renderer import OnlineRenderer

    config = EngineArgs(model=model, **engine_args).create_engine_config()
    renderer = renderer_from_config(config)
    inline_short_renders(renderer, inline_chars)
    return OnlineRenderer(
        config.model_config, renderer, request_logger=None, chat_template=None, chat_template_content_format="auto"
    )
