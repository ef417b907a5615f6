"""What the gateway knows about a request (tenant, QoS class, span), looked up by the stat
logger when vLLM reports the request finished. Keyed by the id the gateway puts in
X-Request-Id, which vLLM embeds in its own request ids (cmpl-<id>-<i>, chatcmpl-<id>)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ID = re.compile(r"kvs-[0-9a-f]{32}")


def new_request_id() -> str:
    return f"kvs-{uuid.uuid4().hex}"


@dataclass
class FinishedPart:
    """One finished engine request (a completions call with n prompts has n of them)."""

    finish_reason: str
    prompt_tokens: int
    generation_tokens: int
    max_tokens: int | None
    queue_seconds: float
    prefill_seconds: float | None
    decode_seconds: float | None
    ttft_seconds: float | None


@dataclass
class RequestTag:
    tenant: str
    tier: str
    qos_class: str
    priority: int
    span: Any = None
    on_finished: Callable[[FinishedPart], None] | None = None
    finished: list[FinishedPart] = field(default_factory=list)


class RequestTags:
    def __init__(self) -> None:
        self._tags: dict[str, RequestTag] = {}

    def add(self, request_id: str, tag: RequestTag) -> None:
        self._tags[request_id] = tag

    def pop(self, request_id: str) -> RequestTag | None:
        return self._tags.pop(request_id, None)

    def lookup(self, engine_request_id: str | None) -> RequestTag | None:
        """The tag of a vLLM request id, or None for requests that did not pass the gateway."""
        if not engine_request_id:
            return None
        match = _ID.search(engine_request_id)
        return self._tags.get(match.group(0)) if match else None

    def __len__(self) -> int:
        return len(self._tags)
