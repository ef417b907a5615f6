"""An id prompt's text, found once a streamed token without re-parsing the prompt.

vLLM's completion stream (vllm/entrypoints/openai/completion/serving.py,
`completion_stream_generator`) reads each output's `res.prompt` and, where it is None, as it is
for a prompt sent as token ids, asks `_extract_prompt_text` for the engine input's text: vLLM's
`extract_prompt_components` -> `extract_target_prompt` -> `parse_dec_only_prompt` ->
`_validate_prompt_dict`, a `PromptComponents` built and dropped, 1.1 us a call here, on every
streamed output, to find no text. The gateway forwarded every text prompt as the ids it counted
(the prompt tokenised once), so behind it every streamed completion paid this once a token (64
calls for 64 tokens, counted by bench.frontend_calls against the gateway stepped over); bare vLLM,
sent text, does not. A plain completion now goes on as its text with the gateway's render held
for vLLM's route (serving/render_memo.py), which keeps the text; a prompt sent as ids, or one
the memo does not hold (a suffix, echo, truncation), still meets this path.

`fast_prompt_text` puts a shortcut in front of that method on vLLM's serving object: for a
decoder-only model and a prompt dict that carries ids or embeddings (and no encoder prompt),
vLLM's own parse returns the dict unchanged, so its text is `prompt.get("prompt")`; anything else
goes to vLLM's method as before. What it answers does not change (tests/unit/test_prompt_text.py
compares both on every prompt form).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_PARSED_AS_IS = ("prompt_token_ids", "prompt_embeds")


def shortcut(extract: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """`extract` (vLLM's `_extract_prompt_text` for a decoder-only model) with the shortcut."""

    def prompt_text(prompt: Any) -> str | None:
        if type(prompt) is dict and "encoder_prompt" not in prompt:
            for key in _PARSED_AS_IS:
                if key in prompt:
                    return prompt.get("prompt")
        return extract(prompt)

    return prompt_text


def fast_prompt_text(serving: Any, model_config: Any) -> bool:
    """Shortcut `serving._extract_prompt_text` (vLLM's completion serving) for a decoder-only
    model; whether it did (not where the model is encoder-decoder or vLLM has another shape)."""
    extract = getattr(serving, "_extract_prompt_text", None)
    if not callable(extract) or getattr(model_config, "is_encoder_decoder", True):
        return False
    serving._extract_prompt_text = shortcut(extract)
    return True
