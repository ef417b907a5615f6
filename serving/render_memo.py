"""A completion prompt rendered once: the gateway's render handed to vLLM's route.

The gateway renders every prompt with vLLM's own renderer to count it (serving/prompts.py).
vLLM's completion route then rendered the forwarded request again: for the ids the gateway used
to forward, 0.11 ms of the event loop a request (three tasks gathered, nine loop turns; the
`render_completion` of a 40-id prompt timed alone), the largest single share of what the
default gateway added to a request against the gateway stepped over (bench.frontend_calls:
300 of its 1,490 calls a streamed 64-token request).

`RenderMemo` holds, for each request the gateway forwards, what vLLM's renderer answered for it
and the request fields that shaped that answer. `remember_renders` puts a lookup in front of the
online renderer's `render_completion`: a request whose id the gateway set, with the same fields,
gets the held engine inputs (with a new `arrival_time`, as vLLM's render stamps it when it
runs); any other request, or the same id with another field, goes to vLLM's renderer as before.
A miss costs a render, never a wrong prompt: the gateway forwards the prompt as its client sent
it, so vLLM would render the same ids from it. A held render is given only inside the request
the gateway forwards under that id (a context variable set as it is kept): vLLM's
`/v1/completions/render` route, which passes a client's body and its `request_id` to the same
renderer, gets none, and leaves the held render where it is.

Held only for plain prompts (text or ids; no suffix, embeddings, truncation, echo, offsets or
multimodal keyword arguments), at most `MEMO_LIMIT` requests (the oldest dropped first), and
dropped when the request is over whether vLLM took it or not.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

Key = tuple[Any, ...]  # the request fields that shape a render (render_key)
Rendered = tuple[Key, list[dict[str, Any]]]  # a render held for one request: its key, its engine inputs
MEMO_LIMIT = 4096  # requests between the gateway's render and vLLM's route: far more than in flight
# Fields whose value must be unset for a render to be held: each changes what vLLM renders or
# checks in a way the key below does not carry.
_UNSET = ("suffix", "prompt_embeds", "truncate_prompt_tokens", "mm_processor_kwargs", "media_io_kwargs")
_FALSE = ("echo", "return_token_offsets")
# the request id the gateway forwards in this context (its request's task, and the tasks vLLM's
# route starts from it): the only request a held render is given to
_FORWARDING: ContextVar[str | None] = ContextVar("render_memo.forwarding", default=None)


def render_key(request: Any) -> Key | None:
    """The fields of a CompletionRequest that shape its render, or None where it is not plain."""
    for name in _UNSET:
        if getattr(request, name, None) is not None:
            return None
    for name in _FALSE:
        if getattr(request, name, None):
            return None
    return (
        request.prompt,
        getattr(request, "add_special_tokens", True),
        getattr(request, "cache_salt", None),
        bool(getattr(request, "return_token_ids", False)),
    )


class RenderMemo:
    """Engine inputs by request id, each with the key of the request it was rendered for."""

    def __init__(self, limit: int = MEMO_LIMIT) -> None:
        self.limit = limit
        self._held: OrderedDict[str, Rendered] = OrderedDict()
        self.hits = 0
        self.misses = 0  # a held request whose fields did not match (rendered by vLLM)

    def __len__(self) -> int:
        return len(self._held)

    def keep(self, request_id: str, key: Key, inputs: list[dict[str, Any]]) -> None:
        """Hold a render for `request_id`, to be taken in this context (the request's own task)."""
        self._held[request_id] = (key, inputs)
        _FORWARDING.set(request_id)
        while len(self._held) > self.limit:
            self._held.popitem(last=False)

    def take(self, request: Any) -> list[dict[str, Any]] | None:
        """The held inputs for this request (once), freshly stamped; None: render it."""
        request_id = getattr(request, "request_id", None)
        if not isinstance(request_id, str) or request_id != _FORWARDING.get():
            return None  # not the request the gateway is forwarding here: rendered by vLLM
        held = self._held.pop(request_id, None)
        if held is None:
            return None
        if render_key(request) != held[0]:
            self.misses += 1
            return None
        self.hits += 1
        now = time.time()
        return [{**engine_input, "arrival_time": now} for engine_input in held[1]]

    def drop(self, request_id: str) -> None:
        self._held.pop(request_id, None)


def remember_renders(online_renderer: Any, memo: RenderMemo) -> bool:
    """Put `memo` in front of the online renderer's `render_completion`; whether it could."""
    render: Callable[..., Awaitable[Any]] | None = getattr(online_renderer, "render_completion", None)
    if not callable(render):
        return False

    async def render_completion(request: Any, **kwargs: Any) -> Any:
        held = memo.take(request)
        if held is not None:
            return held
        return await render(request, **kwargs)

    online_renderer.render_completion = render_completion
    return True
