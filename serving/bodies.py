"""Request bodies from outside, read and checked before anything is done with them.

A body is read up to the configured cap; parsed as strict JSON (no NaN or Infinity, integers of
at most 40 digits, at most `max_json_depth` levels, no lone surrogates in any string); and its
client-set fields are bounded per tier. Every problem is a Rejection naming the field, which the
gateway answers with an OpenAI-style 4xx JSON error, never a plain-text 500.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from serving.errors import Rejection
from serving.gateway_config import INT64_MAX, Tier

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
# Integers past this many digits are refused while parsing (Python would spend quadratic time on
# 5000-digit ones); shorter ones past int64 are refused by the field that holds them, named.
MAX_INT_DIGITS = 40


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Rejection(400, "client_disconnected", "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Rejection(413, "body_too_large", f"the request body is over {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is out of range")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range for a number")
    return value


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes, max_depth: int) -> Any:
    """Strict JSON; Rejection(400) saying what is wrong. Its cost is the C parser's plus a scan
    that grows with the body's strings and brackets, not its characters: a 2K-token prompt is
    one string (docs/benchmarks.md, "Admission CPU per request")."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejection(400, "invalid_json", f"the request body is not UTF-8 ({exc.reason})") from None
    if too_deep(text, max_depth):
        raise Rejection(400, "invalid_json", f"the request body nests deeper than {max_depth} levels")
    try:
        body = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise Rejection(400, "invalid_json", f"the request body is not valid JSON: {exc}") from None
    # valid UTF-8 holds no surrogate: a lone one can only come from a \u escape
    if "\\u" in text:
        _check_strings(body)
    return body


# a JSON string (escapes included) or one bracket: the scan steps over strings in C. A string
# left open runs to the end of the text (a trailing backslash included), so every match that
# starts at a quote succeeds and each character is read once: linear on any body, hostile ones too
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)|[\[\]{}]', re.DOTALL)


def too_deep(text: str, limit: int) -> bool:
    """Brackets nested past `limit` (outside strings), found before the parser recurses."""
    if text.count("[") + text.count("{") <= limit:  # the common body: too few brackets anywhere
        return False
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        ch = match.group()
        if ch in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif ch in ("]", "}"):
            depth -= 1
    return False


def _check_strings(value: Any, where: str = "body") -> None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise Rejection(
                    400, "invalid_request", f"{path} holds a lone surrogate (not valid Unicode)", path.split(".")[0]
                ) from None
        elif isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, path))
                stack.append((v, f"{path}.{k}" if path != "body" else str(k)))
        elif isinstance(item, list):
            stack.extend((v, path) for v in item)


def int_field(body: dict[str, Any], key: str, minimum: int, maximum: int = INT64_MAX) -> int | None:
    """An integer field within [minimum, maximum], or None when absent; else a 400 naming it."""
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise Rejection(400, "invalid_request", f"'{key}' must be an integer, got {type(value).__name__}", key)
    if not minimum <= value <= maximum:
        raise Rejection(400, "invalid_request", f"'{key}' must be between {minimum} and {maximum}, got {value}", key)
    return value


def bounded_fields(body: dict[str, Any], tier: Tier, chat: bool) -> int:
    """Check the fields a client sets against the tier's bounds; returns n (completions per prompt).

    A client may only lower its own priority (0 or more: later), never raise it past its class
    or tier; n and best_of, logprobs and top_logprobs stay within the tier's limits.
    """
    n = int_field(body, "n", 1, tier.max_n) or 1
    best_of = int_field(body, "best_of", 1, tier.max_n)
    if best_of is not None and best_of < n:
        raise Rejection(400, "invalid_request", f"'best_of' ({best_of}) must be at least 'n' ({n})", "best_of")
    int_field(body, "priority", 0, tier.max_client_priority)
    if chat:
        logprobs = body.get("logprobs")
        if logprobs is not None and not isinstance(logprobs, bool):
            raise Rejection(400, "invalid_request", "'logprobs' must be a boolean for chat", "logprobs")
        int_field(body, "top_logprobs", 0, tier.max_logprobs)
    else:
        int_field(body, "logprobs", 0, tier.max_logprobs)
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        int_field(body, key, 1)
    int_field(body, "min_tokens", 0)
    int_field(body, "seed", -INT64_MAX - 1)
    if best_of is not None:
        n = max(n, best_of)  # best_of sequences are generated, n returned
    return n
