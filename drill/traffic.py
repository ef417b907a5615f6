"""Open-loop traffic for drills: Poisson arrivals at a steady rate, the seeds' prompt mix, phases.

Requests go through the official `openai` client (streaming completions, so the time to the
first token is what a user sees). Arrivals do not wait for answers: when the server slows
down, requests pile up exactly as they did in the seeds' incidents.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from openai import APIError, APIStatusError, AsyncOpenAI

from serving.demo_model import DemoModelSpec, synthetic_text, synthetic_words

WORDS_PER_TOKEN = 0.8  # the demo language: about 1.25 tokens per word
CLASSES = ("short", "medium", "long")


@dataclass(frozen=True)
class Mix:
    """Prompt lengths (tokens) of the seeds' classes and their shares (seed 000: 90/8/2)."""

    short_tokens: int = 120
    medium_tokens: int = 1500
    long_tokens: int = 6000
    shares: tuple[float, float, float] = (0.90, 0.08, 0.02)
    output_tokens: int = 32
    shared_prefix_tokens: int = 0  # a system prompt every request starts with (0: none)

    @property
    def mean_prompt_tokens(self) -> float:
        sizes = (self.short_tokens, self.medium_tokens, self.long_tokens)
        return self.shared_prefix_tokens + sum(s * n for s, n in zip(self.shares, sizes, strict=True))

    def scaled(self, factor: float) -> Mix:
        """The same mix with every prompt `factor` times longer."""
        return Mix(
            round(self.short_tokens * factor),
            round(self.medium_tokens * factor),
            round(self.long_tokens * factor),
            self.shares,
            self.output_tokens,
            round(self.shared_prefix_tokens * factor),
        )


@dataclass(frozen=True)
class Phase:
    """A stretch of traffic: `rate` requests per second of `mix` for `seconds`."""

    name: str
    seconds: float
    rate: float
    mix: Mix
    forced: tuple[tuple[float, str], ...] = ()  # (offset s, class): requests sent on top of the mix
    system_prompt_seed: int | None = None  # None: every request gets its own system prompt


@dataclass
class Outcome:
    phase: str
    klass: str
    prompt_tokens: int
    sent: float  # wall-clock seconds (time.time())
    ttft: float | None = None
    latency: float | None = None
    output_tokens: int = 0
    error: str | None = None


@dataclass
class Progress:
    """Live counts for a progress display."""

    phase: str = ""
    phase_started: float = 0.0
    phase_seconds: float = 0.0
    sent: int = 0
    done: int = 0
    failed: int = 0
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def in_flight(self) -> int:
        return self.sent - self.done - self.failed


class Prompts:
    """Fresh prompts of a given length in the demo language, deterministic from a seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = synthetic_words(DemoModelSpec().seed)
        self._systems: dict[tuple[int, int], str] = {}

    def text(self, tokens: int) -> str:
        return synthetic_text(self.rng, max(1, int(tokens * WORDS_PER_TOKEN)), self.words)

    def system(self, seed: int, tokens: int) -> str:
        key = (seed, tokens)
        if key not in self._systems:
            self._systems[key] = synthetic_text(random.Random(seed), max(1, int(tokens * WORDS_PER_TOKEN)), self.words)
        return self._systems[key]

    def make(self, phase: Phase, klass: str) -> str:
        mix = phase.mix
        body = self.text({"short": mix.short_tokens, "medium": mix.medium_tokens, "long": mix.long_tokens}[klass])
        if not mix.shared_prefix_tokens:
            return body
        if phase.system_prompt_seed is None:
            return self.text(mix.shared_prefix_tokens) + "\n" + body
        return self.system(phase.system_prompt_seed, mix.shared_prefix_tokens) + "\n" + body


def _tokens(phase: Phase, klass: str) -> int:
    mix = phase.mix
    size = {"short": mix.short_tokens, "medium": mix.medium_tokens, "long": mix.long_tokens}[klass]
    return size + mix.shared_prefix_tokens


class Driver:
    """Sends the phases' traffic to an OpenAI-compatible server and records every outcome."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "drill",
        seed: int = 1,
        timeout: float = 180.0,
        max_in_flight: int = 400,
    ) -> None:
        self.client = AsyncOpenAI(
            base_url=base_url.rstrip("/") + "/v1", api_key=api_key, timeout=timeout, max_retries=0
        )
        self.model = model
        self.seed = seed
        self.max_in_flight = max_in_flight
        self.progress = Progress()

    async def _one(self, phase: Phase, klass: str, prompt: str, sem: asyncio.Semaphore) -> None:
        out = Outcome(phase.name, klass, _tokens(phase, klass), time.time())
        self.progress.outcomes.append(out)
        start = time.perf_counter()
        try:
            async with sem:
                stream = await self.client.completions.create(
                    model=self.model,
                    prompt=prompt,
                    max_tokens=phase.mix.output_tokens,
                    temperature=0.0,
                    stream=True,
                    extra_body={"ignore_eos": True},
                )
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].text:
                        if out.ttft is None:
                            out.ttft = time.perf_counter() - start
                        out.output_tokens += 1
            out.latency = time.perf_counter() - start
            self.progress.done += 1
        except APIStatusError as exc:
            out.error = f"HTTP {exc.status_code}"
            self.progress.failed += 1
        except (TimeoutError, APIError, OSError) as exc:
            out.error = type(exc).__name__
            self.progress.failed += 1

    async def run(self, phases: Sequence[Phase], on_phase: Callable[[Phase], None] | None = None) -> list[Outcome]:
        prompts = Prompts(self.seed)
        rng = random.Random(self.seed)
        sem = asyncio.Semaphore(self.max_in_flight)
        tasks: list[asyncio.Task[None]] = []
        for phase in phases:
            self.progress.phase, self.progress.phase_started = phase.name, time.time()
            self.progress.phase_seconds = phase.seconds
            if on_phase is not None:
                on_phase(phase)
            forced = sorted(phase.forced)
            start = time.perf_counter()
            next_at = rng.expovariate(phase.rate) if phase.rate > 0 else phase.seconds
            while True:
                due_forced = forced[0][0] if forced else float("inf")
                due = min(next_at, due_forced)
                if due >= phase.seconds:
                    break
                await asyncio.sleep(max(0.0, start + due - time.perf_counter()))
                if due == due_forced:
                    klass = forced.pop(0)[1]
                else:
                    klass = rng.choices(CLASSES, phase.mix.shares)[0]
                    next_at += rng.expovariate(phase.rate)
                prompt = prompts.make(phase, klass)
                self.progress.sent += 1
                tasks.append(asyncio.create_task(self._one(phase, klass, prompt, sem)))
            await asyncio.sleep(max(0.0, start + phase.seconds - time.perf_counter()))
        self.progress.phase = "draining"
        if tasks:
            await asyncio.gather(*tasks)
        await self.client.close()
        return self.progress.outcomes
