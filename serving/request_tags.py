"""What the gateway knows about a request (tenant, QoS class, span), looked up by the stat
logger when vLLM reports the request finished. Keyed by the id the gateway puts in
X-Request-Id (and, for the Responses API, in the body's request_id), which vLLM embeds in its
own request ids: cmpl-<id>-<i>, chatcmpl-<id>, chatcmpl-<id>_<i> (a batch), resp_<id>_<n>, and
<embd|pooling|classify|score|generative-scoring>-<id>-<i>.

The match is anchored to those forms and each engine request counts once: a client cannot
name another request's id to get its refund, nor replay one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# vLLM's external id (what finished stats carry), optionally with the engine's random suffix.
_ENGINE_ID = re.compile(
    r"((?:cmpl-|chatcmpl-|resp_|embd-|pooling-|classify-|score-|generative-scoring-)"
    r"(kvs-[0-9a-f]{32})(?:-\d+|_\d+)?)(?:-[0-9a-f]{8})?"
)


def new_request_id() -> str:
    """128 random bits in hex (as a UUID4's hex, without its version bits: 2 us -> 0.5 us)."""
    return f"kvs-{os.urandom(16).hex()}"


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
    # The engine requests this request runs, and how many finished parts each may report (n
    # samples of one prompt share the engine id); None accepts any id of the anchored forms.
    expected: dict[str, int] | None = None
    claimed: dict[str, int] = field(default_factory=dict)


class RequestTags:
    def __init__(self) -> None:
        self._tags: dict[str, RequestTag] = {}

    def add(self, request_id: str, tag: RequestTag) -> None:
        self._tags[request_id] = tag

    def pop(self, request_id: str) -> RequestTag | None:
        return self._tags.pop(request_id, None)

    def lookup(self, engine_request_id: str | None) -> RequestTag | None:
        """The tag of a vLLM request id, or None for requests that did not pass the gateway."""
        match = _ENGINE_ID.fullmatch(engine_request_id or "")
        return self._tags.get(match.group(2)) if match else None

    def claim(self, engine_request_id: str | None) -> RequestTag | None:
        """The tag of a finished engine request while it has parts left to report, else None.

        Each of the request's own engine ids counts as many times as it has parts (n), no more.
        """
        match = _ENGINE_ID.fullmatch(engine_request_id or "")
        tag = self._tags.get(match.group(2)) if match else None
        if tag is None or match is None:
            return None
        external = match.group(1)
        allowed = 1 if tag.expected is None else tag.expected.get(external, 0)
        seen = tag.claimed.get(external, 0)
        if seen >= allowed:
            return None
        tag.claimed[external] = seen + 1
        return tag

    def __len__(self) -> int:
        return len(self._tags)
