"""The third reality split: a KV pool so full that requests queue for it without being evicted,
and the fleets that look like it and are not. Written before the KV check changed for it (the
kv-avalanche drill's tuned run on 2026-12-07: 97 % KV, 12 waiting, p99 queue time past its line,
0.02 preemptions/s, and the diagnosis said healthy while VLLMQueueTimeHigh fired).

vLLM V1 preempts only a running request that cannot grow; a waiting request that cannot get its
blocks is simply not admitted, and the scheduler stops admitting behind it (vllm-project/vllm#31731,
#35852). A full pool then shows as a queue, not as preemptions. The look-alikes: a pool held at
90 % and more by a busy engine with nothing waiting (what a well-sized engine looks like), a short
queue that drains at a full pool, and a queue with the pool below its line (capacity, not KV).

Each case names every active incident it expects as (vocabulary id, a pod or host the incident
names as affected); healthy: none.
"""

from __future__ import annotations

from dataclasses import replace

from tests.scenarios.fleet import Behaviour, State, fleet
from tests.scenarios.reality import Case

DIAGNOSE_AT = 57.0
WINDOW = "15m"
H = State()
# a pool full with requests waiting for it: admitted as blocks free, few or no evictions
KV_QUEUE = replace(
    H,
    kv=0.97,
    running=24,
    preempt_rate=0.02,
    queue=(1.5, 6.0),
    ttft=(1.8, 7.0),
    util=96,
    power=640,
)


def _growing(start: float, state: State, waiting_from: float, per_minute: float) -> Behaviour:
    """`state` from minute `start`, its queue growing by `per_minute` from `waiting_from`."""
    return lambda m: replace(state, waiting=waiting_from + per_minute * (m - start)) if m >= start else H


def healthy_cases() -> list[Case]:
    full_busy = replace(H, kv=0.95, running=38, waiting=0, util=97, power=600, queue=(0.01, 0.08))
    return [
        Case(
            "kv-high-nothing-waits",
            set(),
            fleet("kh", base=full_busy),
            "vllm-project/vllm#27073 (and tenstorrent/vllm#55): 38 running at 88-93 % KV, nothing waiting, "
            "843 generated tok/s, steady before the window as in it: a pool sized for its load",
        ),
        Case(
            "kv-full-short-queue-drains",
            set(),
            fleet("kd", base=replace(full_busy, kv=0.96, waiting=3, queue=(0.05, 0.8), ttft=(0.2, 1.1))),
            "vllm-project/vllm#3094 and #27073: a pool in the 90s with two or three requests pending for a "
            "moment as blocks free; the queue drains (p99 0.8 s), time to first token is within its line",
        ),
        Case(
            "kv-full-preempting-nobody-waits-fleet-wide",
            set(),
            fleet("kp", base=replace(full_busy, kv=0.98, preempt_rate=0.01)),
            "inference-sim/inference-sim#963 and vllm-project/vllm#18115: every engine at 91-98 % KV, a "
            "preemption now and then (one request in a few hundred), no queue and no latency past its line",
        ),
    ]


def fault_cases() -> list[Case]:
    return [
        Case(
            "kv-full-admission-queue",
            {("kv_cache_exhaustion", "vllm-ka-1")},
            fleet(
                "ka",
                {1: _growing(35, replace(KV_QUEUE, prompt_median=1600, prompt_p99=6000), 4, 1.2)},
            ),
            "vllm-project/vllm#23444 and #14412: prompts twice as long at the same request rate; the pool "
            "close to 100 %, the waiting queue climbs (4 to 30) and throughput falls while preemptions stay "
            "at 0.02/s: the scheduler admits nothing new until blocks free (vllm-project/vllm#31731)",
            trigger="prompt",
        ),
        Case(
            "kv-queue-through-a-gap-beside-late-thermal",
            {("kv_cache_exhaustion", "vllm-kg-0"), ("thermal_power_throttling", "node-kg-2")},
            fleet(
                "kg",
                {
                    0: lambda m: replace(
                        _growing(36, replace(KV_QUEUE, rate=7.0, preempt_rate=0.0), 6, 1.0)(m),
                        scraped=not 44 <= m < 47,
                    ),
                    2: lambda m: (
                        replace(H, temp=91, sm_clock=1230, util=96, power=650, clock_events=("hw_thermal_slowdown",))
                        if m >= 48
                        else H
                    ),
                },
            ),
            "vllm-project/vllm#15996: a pressure test at a rising rate, KV past 90 % within minutes, new "
            "requests pending and nothing preempted; here with three minutes unscraped on that node, and a "
            "thermal slowdown on another from minute 48 (rammsguns/llm-rig#97: 90 C, clock down 38 %)",
        ),
        Case(
            "queue-with-the-pool-below-its-line",
            {("capacity_saturation", "vllm-kc-2")},
            fleet(
                "kc",
                {2: _growing(35, replace(KV_QUEUE, kv=0.82, rate=9.0, preempt_rate=0.0, util=99), 5, 2.0)},
            ),
            "vllm-project/vllm#37307: 90 requests waiting while KV reads 19-65 % (the engine, not the pool, "
            "is the limit); here the pool at 82 %, under the 90 % line, the queue growing evenly",
        ),
    ]


def cases() -> list[Case]:
    return healthy_cases() + fault_cases()
