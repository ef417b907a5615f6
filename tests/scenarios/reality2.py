"""The second reality split: fleets modelled on public incident threads and write-ups (each case
cites its sources), written before any check was changed for them (issue 20).

None of them is in the first split (tests/scenarios/reality.py). Twelve are healthy fleets that
look alarming (memory reserved up front, a prefix cache that cannot hit by design, MIG instances
whose utilisation reads 0, blank sentinels in the profiling fields, a warm spare at idle clocks,
a burst of refusals that cleared, 100 % "utilisation", a GPU hot but below its slowdown point,
preemptions without a storm, power caps that bind without cutting the clock); nine are faults,
several beside another fault or beside something scary and harmless: speculative decoding whose
acceptance collapsed, an engine that stalls while its /health is green, orphaned workers holding
a GPU's memory, data-parallel ranks and prefix-affine replicas out of balance, failing NIXL KV
transfers, throttling that began late in the window, a KV preemption loop of two long prompts,
and an ECC fault that stalls its engine.

Each case names every active incident it expects as (vocabulary id, a pod or host the incident
names as affected); healthy: none. An incident that held earlier in the window and cleared is
not expected (`status: recovered`, issue 20) and is not counted against a case.
"""

from __future__ import annotations

from dataclasses import replace

from tests.scenarios.fleet import FB_TOTAL_MIB, Behaviour, Instance, State, fleet
from tests.scenarios.reality import Case

DIAGNOSE_AT = 57.0
WINDOW = "15m"
H = State()
# every engine of a fleet that runs speculative decoding (5 tokens, 70 % accepted): a step of
# 25 ms yields 4.5 tokens, so the per-token time is a fifth of the step time
SPEC = replace(H, spec_tokens=5, spec_accept=0.7, tpot=(0.0056, 0.013))
NIXL = replace(H, kv_transfers=20.0)
# a warm spare: engine up, next to no traffic, P8 clocks with only the gpu_idle reason
WARM_SPARE = replace(
    H, rate=0.05, running=0, waiting=0, kv=0.01, util=0, sm_clock=345, power=70, clock_events=("gpu_idle",)
)


def _at(minute: float, faulty: State, healthy: State = H) -> Behaviour:
    return lambda m: faulty if m >= minute else healthy


def _between(start: float, end: float, faulty: State, healthy: State = H) -> Behaviour:
    return lambda m: faulty if start <= m < end else healthy


def _with(instances: list[Instance], **kw: object) -> list[Instance]:
    return [replace(i, **kw) for i in instances]  # type: ignore[arg-type]


def _dp(name: str, engines: list[Behaviour]) -> Instance:
    return Instance(name, engines[0], gpus=len(engines), engines=tuple(engines))


def healthy_cases() -> list[Case]:
    busy = replace(H, util=97, power=520)
    return [
        Case(
            "reserved-memory-bare-metal",
            set(),
            _with(
                fleet("res", base=replace(H, memory_share=0.97, fb_used=0.975 * FB_TOTAL_MIB, rate=2.0, util=35)),
                instance_style="bare",
            ),
            "vllm-project/vllm#550: vLLM takes --gpu-memory-utilization of each GPU up front (here 0.97, "
            "97.5 % of the card used at light load); bare metal: the engine at host:8000, dcgm-exporter at "
            "host:9400 with Hostname=host, no pod labels to join them",
        ),
        Case(
            "prefix-cache-cannot-hit",
            set(),
            fleet("pz", base=replace(H, hit=0.0)),
            "vllm-project/vllm#54607: a shared system prompt shorter than one KV block: 0 % hits, steadily, "
            "before the window as in it; latency fine",
        ),
        Case(
            "mig-util-reads-zero",
            set(),
            _with(
                fleet("mz", base=replace(H, gr_active=0.33, util=0.0)),
                mig=("3g.40gb", "3g.40gb"),
                mig_zero_util=True,
            ),
            "NVIDIA/dcgm-exporter#216 and NVIDIA/DCGM#138: dcgm-exporter 3.x writes GPU_UTIL 0 on every MIG "
            "instance, and a busy 3g instance's GR_ENGINE_ACTIVE tops out near 33 %",
        ),
        Case(
            "pre-volta-no-profiling",
            set(),
            _with(
                fleet("m60", base=replace(H, util=60, temp=70, power=190, sm_clock=1100, fb_used=7000)),
                gpu_model="Tesla M60",
            ),
            "NVIDIA/dcgm-exporter#395: a Tesla M60 has no profiling fields (Volta or newer); a model the "
            "datasheet table does not hold",
        ),
        Case(
            "profiling-sentinels",
            set(),
            fleet(
                "ps",
                {
                    1: lambda m: replace(
                        H,
                        gr_active=140737488355328.0,
                        dram_active=140737488355328.0,
                        pcie_rx=9223372036854775792.0,
                        pcie_tx=9223372036854775792.0,
                    )
                },
                base=replace(H, gr_active=0.6, dram_active=0.45),
            ),
            "guilbaults/slurm-job-exporter#53 and #30: DCGM's blank values in the profiling and PCIe fields "
            "of one node during a profiling pause (1.4e14, 9.2e18); the GPU is fine",
        ),
        Case(
            "warm-spare-at-idle-clocks",
            set(),
            fleet("ws", {2: lambda m: WARM_SPARE}, base=replace(H, rate=6.0, util=78)),
            "dogkeeper886/ollama37#207 and NVIDIA/NVSentinel#890: an idle GPU sits at P8 clocks with only the "
            "gpu_idle reason: not throttling; a warm spare beside two busy replicas",
        ),
        Case(
            "refusal-burst-cleared",
            set(),
            fleet(
                "rb",
                {
                    1: _between(
                        44,
                        48,
                        replace(
                            busy,
                            rejections=25.0,
                            waiting=128,
                            running=120,
                            kv=0.4,
                            queue=(3.0, 12.0),
                            ttft=(3.5, 14.0),
                        ),
                    )
                },
            ),
            "kaito-project/kaito#2205: a queue guard answered 429 to 25 requests/s for four minutes; it ended "
            "nine minutes before --at, queue empty since, throughput unchanged",
        ),
        Case(
            "busy-time-not-occupancy",
            set(),
            fleet("bt", base=replace(H, util=100, gr_active=0.3, power=430)),
            "NVIDIA/nvidia-docker#807: 'utilisation' is the time a kernel ran, so 100 % while SMs are 30 % "
            "active is normal serving; latency fine, clocks full",
        ),
        Case(
            "hot-below-slowdown",
            set(),
            fleet("hb", {0: lambda m: replace(busy, temp=80, power=610)}),
            "bradrlaw/ai-server#15: a GPU at 80 C under sustained decode, 7 C below its slowdown point, "
            "steady, clocks full",
        ),
        Case(
            "preemptions-without-a-storm",
            set(),
            fleet("pn", {1: lambda m: replace(H, kv=0.88, preempt_rate=0.08, waiting=2, running=30)}),
            "inference-sim/inference-sim#963: vLLM preempting now and then (0.08/s, each request once) with "
            "the pool at 88 % and no queue growth: a healthy pattern, not a storm",
        ),
        Case(
            "eight-gpus-all-busy",
            set(),
            _with(fleet("eg", base=replace(H, util=88, power=560, rate=9.0)), gpus=8),
            "kubestellar/console#4185: a node with all eight GPUs allocated and busy is bin-packing, not exhaustion",
        ),
        Case(
            "power-cap-binding-not-throttling",
            set(),
            fleet(
                "pc",
                {
                    0: lambda m: replace(busy, power=685, sm_clock=1935),
                    1: lambda m: replace(busy, power=690, sm_clock=1780),
                },
            ),
            "noonghunna/club-3090#104 and #585: at the power cap (98 %) with the clock at its maximum, and a "
            "deliberate cap costing 10 % of the clock: 'a ~10% dial, not a fault'",
        ),
    ]


def fault_cases() -> list[Case]:
    stalled = replace(H, stalled=True, running=1, waiting=5, util=100, power=250)
    return [
        Case(
            "spec-decode-acceptance-collapse",
            {("spec_decode_inefficient", "vllm-sd-0")},
            fleet(
                "sd",
                {
                    0: _at(35, replace(SPEC, spec_accept=0.1, tpot=(0.0167, 0.04)), SPEC),
                    2: lambda m: replace(SPEC, epoch=1) if m >= 30 else SPEC,
                },
                base=SPEC,
            ),
            "vllm-project/vllm#8439 and #56797: drafts accepted 10 % of the time instead of 70 %: three times "
            "the time per output token while each engine step takes as long as before; node 2's engine "
            "restarted once at minute 30 and is fine",
        ),
        Case(
            "stall-with-health-green",
            {("engine_stall", "vllm-st-1")},
            fleet("st", {1: _at(44, stalled), 2: lambda m: replace(H, epoch=1) if m >= 20 else H}),
            "Tanguille/cluster#4593 and gonka-ai/gonka#1421: the engine answers /metrics and /health, one "
            "request running and five waiting, no token generated for 13 minutes (a TP worker deadlocked on "
            "its collective: the GPU spins at 100 %)",
        ),
        Case(
            "orphans-hold-the-memory",
            {("gpu_memory_pressure", "node-or-0")},
            _with(
                fleet("or", {0: _at(40, replace(H, engine_up=False, util=0, power=75, fb_used=0.82 * FB_TOTAL_MIB))}),
                instance_style="bare",
            ),
            "vllm-project/vllm#55510 (and #34643), on bare metal as there: the API server was killed, its "
            "EngineCore and workers survived holding 82 % of the GPU at 0 % utilisation, and every restart "
            "fails its memory check (the engine at host:8000 reports nothing since)",
        ),
        Case(
            "dp-ranks-two-hot",
            {("load_imbalance", "vllm-dq-0")},
            [
                _dp(
                    "vllm-dq-0",
                    [
                        _at(
                            35,
                            replace(
                                H,
                                rate=6.0,
                                waiting=110,
                                running=51,
                                kv=0.99,
                                preempt_rate=0.3,
                                queue=(3.0, 12.0),
                                ttft=(3.5, 14.0),
                                util=98,
                            ),
                            replace(H, rate=3.5),
                        ),
                    ]
                    * 2
                    + [_at(35, replace(H, rate=1.0, waiting=0, running=6, kv=0.2, util=30), replace(H, rate=3.5))] * 2,
                ),
                Instance("vllm-dq-1", lambda m: H),
            ],
            "vllm-project/vllm#36748: DP8 on B200s, waiting requests stacked on a few ranks (117 and 108 "
            "waiting, KV 100 %) while the others have room; the instance's total load unchanged",
        ),
        Case(
            "prefix-affinity-hot-replica",
            {("load_imbalance", "vllm-pa-0")},
            fleet(
                "pa",
                {
                    0: _at(
                        35,
                        replace(
                            H, rate=12.0, waiting=35, running=60, kv=0.93, queue=(1.2, 6.0), ttft=(1.5, 7.0), util=98
                        ),
                    ),
                    1: _at(35, replace(H, rate=1.5, hit=0.2, util=25, kv=0.15, running=5)),
                    2: _at(35, replace(H, rate=1.5, hit=0.2, util=25, kv=0.15, running=5)),
                },
            ),
            "vllm-project/production-stack#1035: a KV-aware router sends every request of a hot prefix to the "
            "one replica holding it: its queue grows while its siblings idle and their hit rate falls; the "
            "model's total load is what it was",
        ),
        Case(
            "nixl-failures-and-late-thermal",
            {("kv_transfer_failure", "vllm-nx-1"), ("thermal_power_throttling", "node-nx-2")},
            fleet(
                "nx",
                {
                    1: _at(
                        38,
                        replace(
                            NIXL,
                            kv_transfer_failures=3.0,
                            kv_transfer_time=(0.5, 8.0),
                            waiting=30,
                            running=10,
                            queue=(2.0, 10.0),
                            ttft=(2.5, 12.0),
                        ),
                        NIXL,
                    ),
                    2: _at(
                        50,
                        replace(
                            NIXL, temp=91, sm_clock=1230, util=96, power=650, clock_events=("hw_thermal_slowdown",)
                        ),
                        NIXL,
                    ),
                },
                base=NIXL,
            ),
            "vllm-project/vllm#55181 and llm-d/llm-d#191: NIXL transfers fail (3 of 20 a second, the rest "
            "slow) and the decode engine's requests wait; on another node a thermal slowdown began 7 minutes "
            "before --at (rammsguns/llm-rig#97: 90 C, the clock down 38 %)",
        ),
        Case(
            "late-power-cap-throttle",
            {("thermal_power_throttling", "node-lp-0")},
            fleet(
                "lp",
                {0: _at(51, replace(H, power=699, sm_clock=1100, util=97, clock_events=("sw_power_cap",)))},
            ),
            "rammsguns/llm-rig#97: at the power limit with the SM clock at 55 % of maximum for the last six "
            "minutes of the window only",
        ),
        Case(
            "preemption-loop-of-two-long-prompts",
            {("kv_cache_exhaustion", "vllm-pl-0")},
            fleet(
                "pl",
                {
                    0: _at(
                        35,
                        replace(
                            H,
                            rate=0.02,
                            prompt_median=110_000,
                            prompt_p99=120_000,
                            running=2,
                            waiting=0,
                            kv=0.98,
                            preempt_rate=0.3,
                            itl=(0.06, 0.5),
                            ttft=(30.0, 120.0),
                        ),
                    )
                },
            ),
            "vllm-project/vllm#21793: two 120K-token prompts admitted with too little KV space, prefilled a "
            "few chunks, preempted, prefilled again: the pool full and preempting with no queue to speak of",
        ),
        Case(
            "ecc-fault-stalls-its-engine",
            {("gpu_hardware_fault", "node-xs-1")},
            _with(
                fleet(
                    "xs", {1: lambda m: replace(stalled, xid=48) if m >= 41 else replace(H, xid=48) if m >= 40 else H}
                ),
                instance_style="bare",
            ),
            "wtdcode/vllm-backport#62, on one machine as there: XID 48 (double-bit ECC in HBM) 17 minutes "
            "before --at, then its engine hangs: the stall is a symptom of the hardware fault, not a second "
            "incident",
        ),
    ]


def cases() -> list[Case]:
    return healthy_cases() + fault_cases()
