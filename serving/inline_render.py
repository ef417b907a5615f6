"""Short prompts rendered on the event loop; long ones in vLLM's thread pool, as vLLM does.

vLLM offloads every tokenisation and chat-template render to its renderer's thread pool
(vllm/renderers/base.py: `_tokenize_prompt_async = make_async(self._tokenize_prompt, ...)`;
renderers/hf.py: `_apply_chat_template_async`), so that a 256K-token prompt, hundreds of
milliseconds of work, does not stall the server (vllm-project/vllm#10635). For the short prompts
most requests carry, the hop costs more than the work: vllm-project/vllm#45759 puts most
`tokenizer.encode` calls at about 0.1 ms, and a hop to the pool and back is 80-100 us of CPU here
(a wake-up of the worker, one of the loop), one per step: a 30-token completion rendered in
0.34 ms offloaded, 0.19 ms inline; a chat turn 0.61 ms and 0.33 ms (docs/benchmarks.md).
LiteLLM splits the same way (BerriAI/litellm#19699: small inputs inline, large ones in a pool).

`inline_short_renders` swaps those two bound coroutines on vLLM's renderer for ones that run
vLLM's own synchronous function in place when the text is at most `max_chars` characters, and
hand anything longer, or a chat template other than the server's own (a trusted request's
template keeps vLLM's render timeout), to the original. What is rendered does not change: the
same function, the same arguments, on another thread. The renderer is the one vLLM's app shares
with the gateway's counter, so vLLM's own renders of short text gain too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("kvscope.serve")

# 1,024 characters: about 256 tokens at the usual 4 characters a token, at most about a quarter
# of a millisecond of encoding (vllm#45759: ~0.1 ms for most calls; 0.25 ms measured here for
# 1,167 characters on the demo tokenizer), the longest the loop is held for one render.
INLINE_RENDER_CHARS = 1024


def within(value: Any, limit: int) -> bool:
    """Whether the strings inside `value` (a prompt, a conversation, tools) hold at most `limit`
    characters; stops counting once past it, so a long conversation costs no more than a short one."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
            if total > limit:
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def _tokenize(
    sync: Callable[..., Any], offloaded: Callable[..., Awaitable[Any]], limit: int
) -> Callable[..., Awaitable[Any]]:
    async def tokenize(prompt: Any, params: Any) -> Any:
        text = prompt.get("prompt") if isinstance(prompt, dict) else None
        if isinstance(text, str) and len(text) <= limit:
            return sync(prompt, params)
        return await offloaded(prompt, params)

    return tokenize


def _template(
    sync: Callable[..., Any], offloaded: Callable[..., Awaitable[Any]], limit: int, server_template: str | None
) -> Callable[..., Awaitable[Any]]:
    async def apply(model_config: Any, tokenizer: Any, conversation: Any, **kwargs: Any) -> Any:
        own = kwargs.get("chat_template") in (None, server_template)
        rest = {k: v for k, v in kwargs.items() if k != "chat_template"}  # tools, documents
        if own and within([conversation, rest], limit):
            return sync(model_config, tokenizer, conversation, **kwargs)
        return await offloaded(model_config, tokenizer, conversation, **kwargs)

    return apply


def _hf_template() -> tuple[Any, Callable[..., Any]] | None:
    """vLLM's Hugging Face renderer and its template step (other renderers wrap other functions)."""
    try:
        from vllm.renderers.hf import HfRenderer, safe_apply_chat_template
    except ImportError:
        return None
    return HfRenderer, safe_apply_chat_template


def inline_short_renders(renderer: Any, max_chars: int, server_template: str | None = None) -> list[str]:
    """Render text of at most `max_chars` characters in place on `renderer` (vLLM's BaseRenderer);
    0 leaves vLLM's behaviour. Returns what it swapped (nothing where this vLLM has another shape)."""
    if max_chars <= 0:
        return []
    swapped = []
    offloaded, sync = getattr(renderer, "_tokenize_prompt_async", None), getattr(renderer, "_tokenize_prompt", None)
    if callable(offloaded) and callable(sync):
        renderer._tokenize_prompt_async = _tokenize(sync, offloaded, max_chars)
        swapped.append("tokenize")
    found = _hf_template()
    offloaded = getattr(renderer, "_apply_chat_template_async", None)
    if found is not None and type(renderer) is found[0] and callable(offloaded):
        renderer._apply_chat_template_async = _template(found[1], offloaded, max_chars, server_template)
        swapped.append("chat template")
    if not swapped:
        log.warning("vLLM's renderer has no known tokenize hook: every render stays in its thread pool")
    return swapped
