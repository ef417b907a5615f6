"""The scenario library: one recorded-style hour per vocabulary id, plus healthy traps.

Each scenario is a 3-instance fleet (one GPU per node) where, unless it is fleet-wide, one
instance develops the fault 35 minutes in; the diagnosis runs at minute 57 over a 15-minute
window and must name the bottleneck and only the affected instance or GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tests.scenarios.fleet import FB_TOTAL_MIB, Instance, State, after, fleet

FAULT_AT = 35.0  # minutes
DIAGNOSE_AT = 57.0
WINDOW = "15m"
HEALTHY = State()
# seed 000's avalanche on one instance: prompts twice as long at the same request rate
AVALANCHE = replace(
    HEALTHY,
    prompt_median=1600,
    prompt_p99=6000,
    kv=0.98,
    preempt_rate=0.8,
    waiting=45,
    running=12,
    queue=(1.5, 9.0),
    ttft=(1.8, 12.0),
    itl=(0.04, 0.3),
    prefill=(0.3, 2.0),
)
# 2 % very long prompts block the short ones
HOL = replace(
    HEALTHY,
    prompt_median=700,
    prompt_p99=9000,
    ttft=(0.09, 3.5),
    itl=(0.025, 0.45),
    queue=(0.05, 2.5),
    kv=0.62,
)


@dataclass
class Scenario:
    name: str
    expected: str  # bottleneck id
    affected: set[str] = field(default_factory=set)  # pods or GPU hosts named as affected ({} = fleet-wide)
    instances: list[Instance] = field(default_factory=list)
    kvscope_extras: bool = False
    note: str = ""


def _on(name: str, index: int, faulty: State, start: float = FAULT_AT, **kw: object) -> list[Instance]:
    return fleet(name, {index: after(start, HEALTHY, faulty)}, **kw)  # type: ignore[arg-type]


def scenarios() -> list[Scenario]:
    s = HEALTHY
    return [
        Scenario(
            "healthy",
            "healthy",
            note="moderate load; GPUs 92 % full because vLLM reserved 92 %",
            instances=fleet("healthy"),
        ),
        Scenario(
            "blip",
            "healthy",
            note="a one-minute spike of queue, KV and TTFT on one instance",
            instances=fleet(
                "blip",
                {
                    1: lambda m: (
                        replace(
                            s,
                            waiting=25,
                            kv=0.95,
                            preempt_rate=0.3,
                            queue=(0.5, 2.0),
                            ttft=(0.6, 2.5),
                        )
                        if 50 <= m < 51
                        else s
                    )
                },
            ),
        ),
        Scenario(
            "old-xid",
            "healthy",
            note="an XID 13 from 50 minutes ago still shows in the sticky DCGM gauge",
            instances=fleet("oldxid", {0: lambda m: replace(s, xid=13) if m >= 5 else s}),
        ),
        Scenario(
            "kv-avalanche",
            "kv_cache_exhaustion",
            {"vllm-kv-avalanche-2"},
            note="seed 000: the prompt length doubles at the same QPS",
            instances=_on("kv-avalanche", 2, AVALANCHE),
        ),
        Scenario(
            "legacy-kv",
            "kv_cache_exhaustion",
            {"vllm-legacy-1"},
            note="vLLM 0.6 names: gpu_cache_usage_perc and swapped requests",
            instances=_on(
                "legacy",
                1,
                replace(s, kv=0.97, swapped=14, waiting=30, queue=(1.0, 6.0), ttft=(1.5, 9.0)),
                legacy=True,
            ),
        ),
        Scenario(
            "prefill-hol",
            "prefill_head_of_line",
            {"vllm-hol-0"},
            note="2 % very long prompts block the short ones",
            instances=_on("hol", 0, HOL),
        ),
        Scenario(
            "prefill-hol-overloaded",
            "prefill_head_of_line",
            {"vllm-holq-2"},
            note="bursts of 12K-token prompts on a slow engine: everything queues, so TTFT's tail is only 3x "
            "its median, but decode stalls 39x behind the long prefills (measured: drill prefill-hol with "
            "a CPU hog beside it)",
            instances=_on(
                "holq",
                2,
                replace(
                    s,
                    rate=4.0,
                    prompt_median=160,
                    prompt_p99=10000,
                    ttft=(5.9, 19.6),
                    itl=(0.049, 1.9),
                    queue=(5.0, 19.5),
                    waiting=54,
                    running=78,
                    kv=0.07,
                    util=75,
                ),
            ),
        ),
        Scenario(
            "saturation",
            "capacity_saturation",
            {"vllm-sat-1"},
            note="twice the load on one replica: everything queues evenly",
            instances=fleet(
                "sat",
                {
                    1: lambda m: (
                        replace(
                            s,
                            rate=11,
                            waiting=10 + 8 * (m - FAULT_AT),
                            queue=(3.0, 9.0),
                            ttft=(3.2, 10.0),
                            util=97,
                            kv=0.7,
                            running=64,
                        )
                        if m >= FAULT_AT
                        else s
                    )
                },
            ),
        ),
        Scenario(
            "prefix-miss",
            "prefix_cache_miss",
            {"vllm-prefix-0"},
            note="shared system prompts stop being shared",
            instances=fleet(
                "prefix",
                {
                    0: lambda m: (
                        replace(s, hit=0.08, ttft=(0.3, 1.2), prefill=(0.25, 0.9)) if m >= 48 else replace(s, hit=0.86)
                    )
                },
                base=replace(s, hit=0.86),
            ),
        ),
        Scenario(
            "memory-leak",
            "gpu_memory_pressure",
            {"node-leak-1"},
            note="framebuffer grows 1.2 GiB a minute beyond the engine's 92 %",
            instances=fleet(
                "leak",
                {
                    1: lambda m: replace(
                        s,
                        fb_used=min(0.92 * FB_TOTAL_MIB + max(0.0, m - FAULT_AT) * 250, FB_TOTAL_MIB - 600),
                    )
                },
            ),
        ),
        Scenario(
            "xid-79",
            "gpu_hardware_fault",
            {"node-xid-2"},
            note="GPU fell off the bus: XID 79, the engine's series stop",
            instances=_on("xid", 2, replace(s, xid=79, engine_up=False), start=50),
        ),
        Scenario(
            "thermal",
            "thermal_power_throttling",
            {"node-thermal-0"},
            note="a fan fails: 92 C and the SM clock drops to 1100 MHz",
            instances=_on("thermal", 0, replace(s, temp=92, sm_clock=1100, itl=(0.045, 0.11))),
        ),
        Scenario(
            "pcie",
            "pcie_bottleneck",
            {"node-pcie-1"},
            note="seed 002: host-device traffic fills the link",
            instances=_on("pcie", 1, replace(s, pcie_rx=60e9, pcie_tx=40e9, util=95)),
        ),
        Scenario(
            "idle",
            "gpu_underutilized",
            set(),
            note="a quiet fleet at 6 % utilisation",
            instances=fleet("idle", base=replace(s, rate=0.2, util=6, running=1, waiting=0, kv=0.03)),
        ),
        Scenario(
            "decode-bound",
            "decode_bandwidth_bound",
            set(),
            note="large batches: every step reads HBM; ITL p99 350 ms, DRAM 92 % busy",
            instances=fleet("decode", base=replace(s, itl=(0.15, 0.35), running=180, kv=0.7, dram_active=0.92)),
        ),
        Scenario(
            "gateway",
            "gateway_overhead",
            set(),
            kvscope_extras=True,
            note="a third of each request's latency is spent before the engine",
            instances=fleet("gateway", base=replace(s, gateway_mean=2.5)),
        ),
        Scenario(
            "no-vllm",
            "healthy",
            set(),
            note="only GPU series: the engine is not scraped; the GPUs and their hardware are still read",
            instances=fleet("novllm", base=replace(s, engine_up=False)),
        ),
        Scenario(
            "nothing",
            "insufficient_data",
            set(),
            note="the selector matches no series at all",
            instances=[],
        ),
    ]
