"""`kvscope plan`: KV-cache capacity from a model's shape, done right where seed 000's formula was not."""

import json

import pytest

from kvscope.model_shape import load_shape
from serving.planner import PlanError, plan


def test_the_seeds_formula_overstates_llama_70b_kv_eightfold(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "num_hidden_layers": 80,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "hidden_size": 8192,
                "intermediate_size": 28672,
                "vocab_size": 128256,
                "torch_dtype": "bfloat16",
            }
        )
    )
    shape = load_shape(tmp_path)
    result = plan(shape, gpus=8, gpu_memory_gib=80, context=32768)
    assert result.kv_bytes_per_token == 320 * 1024  # 2 x 80 x 8 x 128 x 2
    assert result.kv_bytes_per_token_ignoring_gqa == 8 * result.kv_bytes_per_token
    assert 130 < result.weights_gib < 140  # ~70.6 B parameters in bf16
    fp8 = plan(shape, gpus=8, gpu_memory_gib=80, context=32768, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == 160 * 1024 and fp8.pool_tokens > 1.9 * result.pool_tokens
    assert result.sequences_at_full_context == result.blocks // (32768 // 32)
    with pytest.raises(PlanError, match="use at least"):
        plan(shape, gpus=1, gpu_memory_gib=80, context=32768)
