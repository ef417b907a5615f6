"""Counting the prompts of pooling and scoring bodies: embeddings, pooling, classification,
score, rerank, Cohere's /v2/embed, and generative scoring.

Each engine prompt is counted as the engine runs it: an input alone; a scored pair as both
sides (vLLM runs a cross-encoder on the pair together, and counts a bi-encoder's sides once
each: the pair's sum bounds both); a reranked document with its query. Text is counted with the
model's tokenizer, token ids as they are, a chat-style input with the chat template. A part the
gateway cannot count (an image, audio) is a 400: deny by default, until the gateway counts it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from serving.errors import Rejection
from serving.routes import Shape

Encode = Callable[[str], int]  # tokens of a text, special tokens included
ChatCount = Callable[[dict[str, Any]], Awaitable[int]]  # tokens of a rendered conversation

PAIR_FIELDS = (("text_1", "text_2"), ("data_1", "data_2"), ("queries", "documents"), ("queries", "items"))
POOLING_SHAPES = (
    Shape.EMBED,
    Shape.POOL,
    Shape.CLASSIFY,
    Shape.COHERE_EMBED,
    Shape.SCORE,
    Shape.RERANK,
    Shape.GENERATIVE_SCORING,
)


def bad(message: str, param: str | None = None) -> Rejection:
    return Rejection(400, "invalid_request", message, param=param)


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _parts_text(parts: object, where: str) -> str:
    """The text of content parts; any other kind of part is refused."""
    if not isinstance(parts, list):
        raise bad(f"'{where}' content must be a list of parts", where)
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise bad(f"'{where}': the gateway counts text parts only, not {kind!r}", where)
        texts.append(part["text"])
    return "\n".join(texts)


def _one(value: object, encode: Encode, where: str) -> int:
    """Tokens of one input: a text, token ids, or content parts."""
    if isinstance(value, str):
        return encode(value)
    if _is_ids(value) and value:
        return len(value)  # type: ignore[arg-type]
    if isinstance(value, dict) and "content" in value:
        return encode(_parts_text(value["content"], where))
    raise bad(f"'{where}' must be text, token ids or text content parts", where)


def _many(value: object, encode: Encode, where: str) -> list[int]:
    """Tokens of each input of a field that takes one or a list."""
    if isinstance(value, list) and value and not _is_ids(value):
        return [_one(v, encode, where) for v in value]
    return [_one(value, encode, where)]


def _is_conversation(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


async def _inputs(body: dict[str, Any], encode: Encode, chat: ChatCount) -> list[int]:
    if "messages" in body:
        return [await chat({**body, "messages": body["messages"]})]
    value = body.get("input")
    if value is None:
        raise bad("'input' is required", "input")
    if _is_conversation(value):
        return [await chat({**body, "messages": value})]
    if isinstance(value, list) and value and all(_is_conversation(v) for v in value):
        return [await chat({**body, "messages": v}) for v in value]
    return _many(value, encode, "input")


def _cohere(body: dict[str, Any], encode: Encode) -> list[int]:
    if body.get("images"):
        raise bad("'images': the gateway counts text only", "images")
    counts = [encode(t) if isinstance(t, str) else _one(t, encode, "texts") for t in body.get("texts") or []]
    counts += [_one(i, encode, "inputs") for i in body.get("inputs") or []]
    if not counts:
        raise bad("'texts' or 'inputs' is required", "texts")
    return counts


def _pairs(left: Sequence[int], right: Sequence[int], names: tuple[str, str]) -> list[int]:
    if len(left) == 1:
        return [left[0] + r for r in right]
    if len(left) == len(right):
        return [a + b for a, b in zip(left, right, strict=True)]
    raise bad(f"'{names[0]}' must hold one item or as many as '{names[1]}'", names[0])


def _score(body: dict[str, Any], encode: Encode) -> list[int]:
    for names in PAIR_FIELDS:
        if names[0] in body and names[1] in body:
            return _pairs(_many(body[names[0]], encode, names[0]), _many(body[names[1]], encode, names[1]), names)
    raise bad("a score request pairs text_1 with text_2 (or queries with documents)", "text_1")


def _with_query(body: dict[str, Any], encode: Encode, items: str) -> list[int]:
    if "query" not in body or items not in body:
        raise bad(f"'query' and '{items}' are required", "query" if "query" not in body else items)
    query = _one(body["query"], encode, "query")
    return [query + d for d in _many(body[items], encode, items)]


async def count_pooling(shape: Shape, body: dict[str, Any], encode: Encode, chat: ChatCount) -> list[int]:
    """The tokens of each engine prompt of a pooling or scoring body (Rejection when unreadable)."""
    match shape:
        case Shape.EMBED | Shape.POOL | Shape.CLASSIFY:
            return await _inputs(body, encode, chat)
        case Shape.COHERE_EMBED:
            return _cohere(body, encode)
        case Shape.SCORE:
            return _score(body, encode)
        case Shape.RERANK:
            return _with_query(body, encode, "documents")
        case Shape.GENERATIVE_SCORING:
            return _with_query(body, encode, "items")
    raise bad(f"not a pooling body ({shape})")


def output_per_prompt(shape: Shape) -> int:
    """Tokens each prompt generates: one for generative scoring, none for pooling."""
    return 1 if shape is Shape.GENERATIVE_SCORING else 0


def engine_prefix(shape: Shape) -> str:
    """The prefix of vLLM's engine request ids for this route (ids are <prefix>-<id>-<i>)."""
    return {
        Shape.EMBED: "embd",
        Shape.COHERE_EMBED: "embd",
        Shape.POOL: "pooling",
        Shape.CLASSIFY: "classify",
        Shape.SCORE: "score",
        Shape.RERANK: "score",
        Shape.GENERATIVE_SCORING: "generative-scoring",
    }[shape]
