"""The incidents a drill reproduces: the traffic before and after the change, the fault, and
what must follow (the alerts that should fire, the bottleneck the diagnosis should name).

Every scenario starts with the seeds' mix (seed 000: 90 % short, 8 % medium, 2 % very long
prompts) at a steady rate; its change starts a third of the way in. The rate is a fraction of
what the engine sustains on that mix (`load`), measured before the traffic (drill/calibrate.py),
so the time before the change is healthy on a fast machine and a slow one alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from diagnosis.changes import MIN_FOR_MEAN
from drill.traffic import DECK, Mix, Phase

SEEDS_MIX = Mix()
# A scenario whose change is a load the diagnosis must name (its trigger) sends this many requests
# at least before the change and after it: the diagnosis compares a mean only over MIN_FOR_MEAN
# requests in each window (diagnosis/changes.py), and its baseline leaves out the traffic's first
# seconds and the change's lead. At 1.7 req/s (an AVX2 engine with a core taken, 2026-12-06) the
# CI variant's 30 s before the change held too few, and kv-avalanche lost its trigger.
TRIGGER_REQUESTS = 3 * MIN_FOR_MEAN
# A hardware fault's traffic keeps the GPUs busy enough to count as working: the diagnosis reads
# the clocks of a GPU under its utilisation floor (gpu_util_floor, 20 %) as idle by design, and the
# emulated utilisation follows the engine's running requests. At 0.32 the faulty GPUs averaged
# 19.1 % and 29.0 % over the diagnosis window in two CI runs (2026-12-07): the first lost its
# thermal incident by a point. 0.42 is the rate kv-avalanche's healthy baseline runs at on the
# same mix.
FAULT_LOAD = 0.42


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: str  # the incident review it comes from
    story: str  # one line: what changes
    expected: str  # the bottleneck id the diagnosis must name
    alerts: tuple[str, ...]  # the drill passes when at least one of these fires
    load: float  # the request rate as a fraction of the engine's measured capacity, before and after
    before: Mix = SEEDS_MIX
    after: Mix = SEEDS_MIX
    duration: float = 120.0  # seconds of traffic per profile
    before_share: float = 1 / 3
    fault: dict[str, Any] | None = None  # POSTed to the exporter's /-/faults at the change
    kv_pool_tokens: int | None = None  # None: the platform's pool
    shared_prompt: bool = False  # before the change every request starts with one system prompt
    bursts: tuple[int, float] = (0, 0.0)  # after the change: N very long prompts every S seconds
    engine_args: tuple[str, ...] = field(default=())
    # the change the diagnosis must name as the trigger (a `changes` signal) and the words it
    # must say with it; None: the scenario changes no load (a fault)
    trigger: tuple[str, str] | None = None
    # requests the time after the change holds at least, whatever the engine's speed: an incident
    # made by rare requests needs enough of them to build (0: none asked)
    after_requests: int = 0
    parts: tuple[Scenario, ...] = ()  # several faults at once (combined): each must be named on its GPU

    @property
    def faults(self) -> list[dict[str, Any]]:
        """What is POSTed to the exporter at the change: one fault, or one per part."""
        return [p.fault for p in self.parts if p.fault] if self.parts else [self.fault] if self.fault else []

    @property
    def gpus(self) -> int:
        """The emulated GPUs the scenario needs: two, or one more than its highest faulty GPU."""
        return max([2, *(int(f["gpu"]) + 1 for f in self.faults)])

    def expectation(self) -> str:
        """What must follow, in words: the alerts and the diagnosis (per GPU when combined)."""
        if not self.parts:
            return f"{' or '.join(self.alerts)} and a diagnosis of {self.expected}"
        return "; ".join(f"on GPU {p.faults[0]['gpu']}: {p.expectation()}" for p in self.parts)

    def phases(self, rate: float, duration: float | None = None, burst_every: float | None = None) -> list[Phase]:
        """The traffic at `rate`; the bursts `burst_every` seconds apart (calibrate.py: as far
        apart as this engine needs to keep spare time between them; None: the reference's).
        With bursts, the time after the change holds one whole period at least (`after_for`)."""
        total = duration or self.duration
        before, _ = self.split(total)
        count, every = self.bursts
        every = burst_every or every
        after = self.after_for(total, every)
        if self.trigger is not None and rate > 0:  # each window counts enough requests to compare
            least = _seconds_for(TRIGGER_REQUESTS, rate)
            before, after = max(before, least), max(after, least)
        if self.after_requests and rate > 0:
            after = max(after, _seconds_for(self.after_requests, rate))
        forced = tuple((t + 0.5 + 0.1 * i, "long") for t in _every(every, after) for i in range(count))
        return [
            Phase("before", before, rate, self.before, system_prompt_seed=1 if self.shared_prompt else None),
            Phase(
                "after",
                after,
                rate,
                self.after,
                forced=forced,
                system_prompt_seed=None,
            ),
        ]

    def recurrence(self, rate: float, burst_every: float | None = None) -> float | None:
        """Seconds between the events that make the incident, of which a compressed rule window
        holds several (rules.min_range): its bursts' spacing (`burst_every`, else the
        reference's), or for an incident made by rare requests (`after_requests`) the time a deck
        of DECK requests takes at `rate`, which holds one long prompt. None: neither."""
        count, every = self.bursts
        if count:
            return burst_every or every
        if self.after_requests and rate > 0:
            return DECK / rate
        return None

    def why_longer(self, phase: Phase) -> str:
        """Why `phase` runs longer than planned, in words (phases: the least of each kind)."""
        needed = _seconds_for(self.after_requests, phase.rate) if self.after_requests else None
        if phase.name == "after" and phase.seconds == needed:
            return f"{self.after_requests} requests at {phase.rate:.2f} req/s, what the incident needs to build"
        if self.trigger is not None and phase.seconds == _seconds_for(TRIGGER_REQUESTS, phase.rate):
            return f"{TRIGGER_REQUESTS:.0f} requests at {phase.rate:.2f} req/s, what the diagnosis compares"
        return "one whole burst period on this engine (a burst and the recovery from it)"

    def split(self, total: float) -> tuple[float, float]:
        """`total` seconds of traffic as planned: before the change and after it."""
        before = round(total * self.before_share, 1)
        return before, round(total - before, 1)

    def after_for(self, total: float, burst_every: float | None = None) -> float:
        """Seconds of traffic after the change: the rest of `total`, and with bursts one whole
        period at least, so that a burst and the recovery from it both fall inside the traffic.
        A slow engine spaces its bursts wider (a 12K-token prompt took 2 s to its first token on
        the reference machine, 17 s on an AVX2 one, 2026-12-06): a 40 s window after the change
        there ended before the burst's prompts did, so the diagnosis never saw them finish."""
        _, after = self.split(total)
        count, every = self.bursts
        if count and (burst_every or every) > after:
            return round(burst_every or every, 1)
        return after


def _seconds_for(requests: float, rate: float) -> float:
    """Seconds (to the 0.1 s above) that hold `requests` at `rate` requests a second."""
    return math.ceil(requests / rate * 10 - 1e-9) / 10


def _every(step: float, span: float) -> list[float]:
    if step <= 0:
        return []
    out, t = [], 0.0
    while t < span - 1:
        out.append(t)
        t += step
    return out


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "kv-avalanche",
            "000",
            "prompts grow to twice their length at the same request rate, on a KV pool the default profile outgrows",
            "kv_cache_exhaustion",
            ("VLLMKVCacheExhausted", "VLLMKVCacheNearlyFull", "VLLMPreemptionsHigh"),
            load=0.42,
            after=SEEDS_MIX.scaled(2.0),
            kv_pool_tokens=20480,
            trigger=("prompt_tokens_mean", "at the same request rate"),
            # the pool is outgrown by the long prompts (12K tokens after the change, 59 % of the
            # pool), one in a deck of 50: three decks hold three. At 1.67 req/s (an AVX2 engine
            # with a core taken, 2026-12-06) the CI variant's 60 s held two, the preemptions began
            # with the second, 48 s after the change, and the traffic ended 13 s later, before
            # VLLMPreemptionsHigh's 15 s (5m at 20x) had run: no KV alert fired
            after_requests=3 * DECK,
        ),
        Scenario(
            "prefill-hol",
            "000",
            "bursts of very long (12K-token) prompts arrive among the short ones",
            "prefill_head_of_line",
            ("VLLMTTFTHigh", "VLLMQueueTimeHigh"),
            load=0.2,
            after=replace(SEEDS_MIX, long_tokens=12000),
            bursts=(3, 15.0),
        ),
        Scenario(
            "prefix-miss",
            "004",
            "the shared 2K-token system prompt stops being shared: every request brings its own",
            "prefix_cache_miss",
            ("VLLMPrefixCacheHitRateDrop",),
            load=0.08,
            before=replace(SEEDS_MIX, shared_prefix_tokens=2048),
            after=replace(SEEDS_MIX, shared_prefix_tokens=2048),
            shared_prompt=True,
            before_share=0.5,
        ),
        Scenario(
            "gpu-xid",
            "002",
            "GPU 1 falls off the bus (XID 79) while traffic runs",
            "gpu_hardware_fault",
            ("GPUXidDrainNode",),
            load=FAULT_LOAD,
            duration=75.0,
            before_share=0.5,  # a baseline long enough to compare the load against, past the lead
            fault={"gpu": 1, "fault": "xid", "xid": 79},
        ),
        Scenario(
            "thermal",
            "002",
            "GPU 0 overheats (94 C) and slows its clocks while traffic runs",
            "thermal_power_throttling",
            ("GPUTemperatureHigh", "GPUThrottled"),
            load=FAULT_LOAD,
            duration=75.0,
            before_share=0.5,  # a baseline long enough to compare the load against, past the lead
            fault={"gpu": 0, "fault": "thermal", "temp_c": 94},
        ),
        Scenario(
            "pcie-degraded",
            "002",
            "GPU 0's PCIe link trains down to Gen3 x8 while traffic runs",
            "pcie_bottleneck",
            ("GPUPCIeLinkDegraded",),
            load=FAULT_LOAD,
            duration=75.0,
            before_share=0.5,  # a baseline long enough to compare the load against, past the lead
            fault={"gpu": 0, "fault": "pcie_degraded", "generation": 3, "width": 8},
        ),
        Scenario(
            "memory-leak",
            "002",
            "a process leaks GPU memory on GPU 0 (20 GB a minute) while traffic runs",
            "gpu_memory_pressure",
            ("GPUMemoryFull",),
            load=FAULT_LOAD,
            duration=75.0,
            before_share=0.5,  # a baseline long enough to compare the load against, past the lead
            fault={"gpu": 0, "fault": "memory_leak", "mib_per_minute": 20000},
        ),
    )
}


def get(name: str) -> Scenario:
    """A scenario by name; `a+b+...`: the faults of a, b, ... at once (combined)."""
    if "+" in name:
        return combined([get(part) for part in name.split("+")])
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(
            f"unknown scenario {name!r}: choose one of {', '.join(SCENARIOS)}, or faults joined by + (gpu-xid+thermal)"
        ) from None


def combined(parts: Sequence[Scenario]) -> Scenario:
    """Several hardware faults at once on one stack, the n-th on GPU n: the drill passes when
    every one is named, active, on its own GPU, and one of its alerts fired there. Only faults
    combine: a change of load would be every part's trigger at once."""
    names = [p.name for p in parts]
    if len(set(names)) != len(names) or len(parts) < 2:
        raise ValueError(f"combine two or more different faults, not {'+'.join(names)}")
    for p in parts:
        if not p.fault or p.trigger or p.bursts[0] or p.shared_prompt or p.before != p.after:
            raise ValueError(f"only hardware faults combine: {p.name} changes the traffic")
    moved = tuple(
        replace(p, fault={**p.fault, "gpu": n}, story=p.story.replace(f"GPU {p.fault['gpu']}", f"GPU {n}"))
        for n, p in enumerate(parts)
        if p.fault
    )
    return Scenario(
        "+".join(names),
        "/".join(dict.fromkeys(p.seed for p in parts)),
        "; ".join(p.story.removesuffix(" while traffic runs") for p in moved) + " while traffic runs",
        moved[0].expected,
        tuple(dict.fromkeys(a for p in moved for a in p.alerts)),
        load=max(p.load for p in parts),
        duration=max(p.duration for p in parts),
        before_share=max(p.before_share for p in parts),
        parts=moved,
    )
