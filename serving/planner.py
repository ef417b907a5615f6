"""KV-cache capacity planning (`kvscope plan`), done right where seed 000's formula was not.

KV bytes per token = 2 (K and V) x layers x KV heads x head_dim x bytes per element. The seed
multiplied by all 64 attention heads of Llama-3-70B instead of its 8 KV heads (grouped-query
attention): 8x too much. Capacity is counted in whole blocks, after the weights and an
activation reserve, and turned into the scheduler settings that keep the pool from running
out: block size, max_num_seqs, max_num_batched_tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kvscope.model_shape import DTYPE_BYTES, ModelShape
from kvscope.tuning import Platform, long_prefill_threshold, prefill_budget

GIB = 1 << 30


class PlanError(ValueError):
    """A model config that cannot be planned for, or impossible hardware (one line)."""


@dataclass(frozen=True)
class Plan:
    kv_bytes_per_token: int
    kv_bytes_per_token_ignoring_gqa: int
    weights_gib: float
    kv_pool_gib: float
    block_size: int
    blocks: int
    pool_tokens: int
    sequences_at_full_context: int
    sequences_at_typical_length: int
    max_num_seqs: int
    max_num_batched_tokens: int
    long_prefill_token_threshold: int
    kv_dtype: str
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(
    shape: ModelShape,
    *,
    gpus: int,
    gpu_memory_gib: float,
    context: int,
    kv_dtype: str = "fp16",
    gpu_memory_utilization: float = 0.9,
    typical_tokens: int | None = None,
) -> Plan:
    """KV capacity of `gpus` GPUs (tensor parallel) for requests of up to `context` tokens."""
    if gpus < 1 or gpu_memory_gib <= 0 or context < 1 or not 0 < gpu_memory_utilization <= 1:
        raise PlanError("gpus >= 1, gpu memory > 0, context >= 1 and 0 < gpu_memory_utilization <= 1")
    kv_bytes = DTYPE_BYTES.get(kv_dtype)
    if kv_bytes is None:
        raise PlanError(f"unknown KV dtype {kv_dtype!r}: use fp16, bf16 or fp8")
    per_token = shape.kv_bytes_per_token(kv_bytes)
    naive = 2 * shape.layers * shape.attention_heads * shape.head_dim * kv_bytes
    weights = shape.parameters * shape.weight_bytes_per_param
    budget = gpus * gpu_memory_gib * GIB * gpu_memory_utilization
    activations = gpus * max(1.0 * GIB, 0.04 * gpu_memory_gib * GIB)  # vLLM's profiled peak, roughly
    pool = budget - weights - activations
    notes = []
    if pool <= 0:
        need = math.ceil((weights + activations) / (gpu_memory_gib * GIB * gpu_memory_utilization))
        raise PlanError(
            f"the weights ({weights / GIB:.0f} GiB) do not leave room for a KV cache on {gpus} x "
            f"{gpu_memory_gib:g} GB: use at least {need} GPUs (tensor parallel)"
        )
    block = 64 if context > 131072 else 32
    blocks = int(pool // (per_token * block))
    tokens = blocks * block
    per_sequence_blocks = math.ceil(context / block)
    full = blocks // per_sequence_blocks
    typical = typical_tokens or max(block, context // 4)
    at_typical = blocks // math.ceil(typical / block)
    if full == 0:
        notes.append(
            f"not one {context}-token sequence fits: {tokens} tokens of KV cache; shorten --max-model-len or add GPUs"
        )
    if kv_dtype.startswith("fp16") or kv_dtype == "bf16":
        notes.append("--kv-cache-dtype fp8 doubles these numbers on GPUs with compute capability >= 8.9")
    # vLLM's own rule for its defaults: 70 GB and more is H100/H200 class (A100 80GB aside)
    platform = Platform.HOPPER if gpu_memory_gib >= 80 else Platform.GPU
    budget_tokens = prefill_budget(platform)
    return Plan(
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_ignoring_gqa=naive,
        weights_gib=round(weights / GIB, 2),
        kv_pool_gib=round(pool / GIB, 2),
        block_size=block,
        blocks=blocks,
        pool_tokens=tokens,
        sequences_at_full_context=full,
        sequences_at_typical_length=at_typical,
        max_num_seqs=max(1, min(512, at_typical)),
        max_num_batched_tokens=budget_tokens,
        long_prefill_token_threshold=long_prefill_threshold(budget_tokens, platform),
        kv_dtype=kv_dtype,
        notes=tuple(notes),
    )
