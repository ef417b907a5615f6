"""A model's shape (from its Hugging Face config.json) and the KV-cache arithmetic that follows
from it, shared by the planner (`kvscope plan`), the diagnosis' KV advice and the drill's pool.

KV bytes per token = 2 (K and V) x layers x KV heads x head_dim x bytes per element.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "float8": 1,
    "int8": 1,
}


class ShapeError(ValueError):
    """A model config that cannot be read as a transformer's (one line)."""


@dataclass(frozen=True)
class ModelShape:
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    weight_bytes_per_param: int
    tied_embeddings: bool = False

    @property
    def parameters(self) -> int:
        attention = (
            self.hidden * self.attention_heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        )
        mlp = 3 * self.hidden * self.intermediate
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (attention + mlp + 2 * self.hidden) + embeddings

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes


def load_shape(source: str | Path) -> ModelShape:
    """From a Hugging Face config.json, or a model folder holding one."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    try:
        config: dict[str, Any] = json.loads(path.read_text())
    except OSError as exc:
        raise ShapeError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ShapeError(f"{path} is not JSON: {exc}") from exc
    config = config.get("text_config", config)  # multimodal configs nest the language model
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return ModelShape(
            layers=int(config["num_hidden_layers"]),
            attention_heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            hidden=hidden,
            intermediate=int(config.get("intermediate_size") or 4 * hidden),
            vocab=int(config.get("vocab_size") or 32000),
            weight_bytes_per_param=DTYPE_BYTES.get(str(config.get("torch_dtype", "bfloat16")), 2),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ShapeError(f"{path} lacks what a transformer config has ({exc})") from exc


def sequences_that_fit(pool_tokens: float, tokens_per_sequence: float, block: int = 32) -> int:
    """Concurrent sequences of a given length a pool of `pool_tokens` holds, block-rounded."""
    if tokens_per_sequence <= 0:
        return 0
    return int((pool_tokens // block) // math.ceil(tokens_per_sequence / block))
