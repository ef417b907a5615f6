"""Open-loop traffic for drills: Poisson arrivals at a steady rate, the seeds' prompt mix, phases.

Prompt classes are dealt from shuffled decks that hold the mix's shares exactly (45 short,
4 medium, 1 long of every 50), so the time before a change and the time after it carry the
same mix whatever the rate, and a short baseline on a slow machine is not, by the luck of the
draw, heavier than the mix.

Requests go through the official `openai` client (streaming completions, so the time to the
first token is what a user sees). Arrivals do not wait for answers: when the server slows
down, requests pile up exactly as they did in the seeds' incidents. Traffic stops at the end
of its window: requests still unanswered then are aborted (the client closes the stream, the
gateway aborts them in vLLM) and counted apart from failures, so a drill takes the same time
on a slow machine and no request fails for the load generator's own timeout.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx2
from openai import APIError, APIStatusError, AsyncOpenAI, DefaultAsyncHttpxClient

from serving.demo_model import DemoModelSpec, synthetic_text, synthetic_words

WORDS_PER_TOKEN = 0.8  # the demo language: about 1.25 tokens per word
CLASSES = ("short", "medium", "long")
DECK = 50  # requests per deck of prompt classes


# The client drops a connection idle this long, before the server's keep-alive (uvicorn's 5 s in
# kvscope serve and vLLM) closes it: a request sent on a connection the server is closing at
# that very moment fails with a connection error although it never reached the server (seen once
# in a drill on a loaded machine: APIConnectionError at 105 s, the engine idle).
IDLE_CONNECTION_SECONDS = 2.0


def openai_client(base_url: str, api_key: str, timeout: float) -> AsyncOpenAI:
    """The official client for drill traffic: no retries (a failure is counted, not hidden) and
    no reuse of a connection the server may be closing."""
    # openai 3.x speaks httpx2 (its own pinned httpx), so its limits come from there
    limits = httpx2.Limits(
        max_connections=1000, max_keepalive_connections=100, keepalive_expiry=IDLE_CONNECTION_SECONDS
    )
    http = DefaultAsyncHttpxClient(limits=limits, timeout=timeout)
    return AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http)


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

    def round(self, size: int = 50) -> list[str]:
        """`size` requests with the mix's shares in whole requests (45/4/1 of 50), the long ones
        first, the medium ones spread among the short ones."""
        counts = [max(1, round(share * size)) if share > 0 else 0 for share in self.shares]
        counts[0] = size - sum(counts[1:])
        rest = ["short"] * (counts[0] + counts[1])
        for i in range(counts[1]):
            rest[int((i + 0.5) * len(rest) / counts[1])] = "medium"
        return ["long"] * counts[2] + rest

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
    aborted: float | None = None  # seconds it had waited when the window ended unanswered

    @property
    def ttft_at_least(self) -> float | None:
        """The time to first token, or for a request aborted before its first token the time it
        had waited (a lower bound): what the user had felt by the end of the window."""
        if self.ttft is not None:
            return self.ttft
        return self.aborted


@dataclass
class Progress:
    """Live counts for a progress display."""

    phase: str = ""
    phase_started: float = 0.0
    phase_seconds: float = 0.0
    sent: int = 0
    done: int = 0
    failed: int = 0
    aborted: int = 0
    ended_at: float | None = None  # wall-clock time the window ended (time.time())
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def in_flight(self) -> int:
        return self.sent - self.done - self.failed - self.aborted


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
        max_in_flight: int = 400,
    ) -> None:
        self.base_url, self.api_key = base_url.rstrip("/") + "/v1", api_key
        self.model = model
        self.seed = seed
        self.max_in_flight = max_in_flight
        self.progress = Progress()

    async def _one(self, client: AsyncOpenAI, phase: Phase, klass: str, prompt: str, sem: asyncio.Semaphore) -> None:
        out = Outcome(phase.name, klass, _tokens(phase, klass), time.time())
        self.progress.outcomes.append(out)
        start = time.perf_counter()
        try:
            async with sem:
                stream = await client.completions.create(
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
        except asyncio.CancelledError:  # the window ended before the answer
            out.aborted = time.perf_counter() - start
            self.progress.aborted += 1

    async def run(self, phases: Sequence[Phase], on_phase: Callable[[Phase], None] | None = None) -> list[Outcome]:
        # no request may time out on the client's side before the window ends and aborts it
        window = sum(p.seconds for p in phases)
        client = openai_client(self.base_url, self.api_key, timeout=window + 60.0)
        prompts = Prompts(self.seed)
        rng = random.Random(self.seed)
        sem = asyncio.Semaphore(self.max_in_flight)
        tasks: list[asyncio.Task[None]] = []
        for phase in phases:
            self.progress.phase, self.progress.phase_started = phase.name, time.time()
            self.progress.phase_seconds = phase.seconds
            if on_phase is not None:
                on_phase(phase)
            forced, deck = sorted(phase.forced), list[str]()
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
                    if not deck:
                        deck = phase.mix.round(DECK)
                        rng.shuffle(deck)
                    klass = deck.pop()
                    next_at += rng.expovariate(phase.rate)
                prompt = prompts.make(phase, klass)
                self.progress.sent += 1
                tasks.append(asyncio.create_task(self._one(client, phase, klass, prompt, sem)))
            await asyncio.sleep(max(0.0, start + phase.seconds - time.perf_counter()))
        self.progress.phase, self.progress.ended_at = "stopping", time.time()
        for task in tasks:
            task.cancel()  # the unanswered ones: aborted, counted apart
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
        return self.progress.outcomes
