"""The fourth reality split: a PCIe link below its best, which a GPU does on purpose when it is
idle, and on a fault when it is busy. Written before the PCIe check and alert changed for it.

NVIDIA GPUs lower their PCIe link's generation (and may lower its width) whenever they are not in
use, to save power, and train it back up within milliseconds of work: nvidia-smi documents the
current link as one that "may be reduced when the GPU is not in use", and NVIDIA's answer on its
forum is that "downgrading the PCIe link when not in use is an important integral part of the
GPU's power management" with no knob to stop it (forums.developer.nvidia.com/t/72537; janhq/jan#183
found an idle RTX 4090 at 2.5 GT/s, "(downgraded)", and Lenovo's note HT513323 calls Gen1 at idle
expected). NVML's `nvmlDeviceGetCurrPcieLinkGeneration`, which kvscope's exporter and DCGM's
DCGM_FI_DEV_PCIE_LINK_GEN read, reports that idle state. A link that stays below its best while the
GPU works is the fault: a riser or slot that trains at fewer lanes or a lower speed runs silently at
reduced bandwidth, "a working GPU at reduced bandwidth, not an error", found only by checking the
link under load (noonghunna/club-3090#895; #1098: 40 % fewer tokens a second on a WRX80 board).

Each case names every active incident it expects as (vocabulary id, a pod or host the incident
names as affected); healthy: none.
"""

from __future__ import annotations

from dataclasses import replace

from tests.scenarios.fleet import Behaviour, State, fleet
from tests.scenarios.reality import Case, _with
from tests.scenarios.reality2 import WARM_SPARE

H = State()
BUSY = replace(H, rate=6.0, util=78, pcie_link=(5, 16))
# split 2's warm spare (engine up, next to no traffic, P8 clocks), its link at Gen1 (width kept)
SPARE = replace(WARM_SPARE, pcie_rx=3e6, pcie_tx=1e6, pcie_link=(1, 16))
# the seeds' avalanche: the pool full, preemptions, the queue and its time growing
AVALANCHE = replace(
    BUSY,
    kv=0.97,
    running=40,
    waiting=25,
    preempt_rate=1.5,
    queue=(2.0, 7.5),
    ttft=(2.4, 8.5),
    util=97,
    prompt_median=1500,
    prompt_p99=5600,
)


def _bursty(busy: State, idle: State, period: int = 4) -> Behaviour:
    """Busy the first half of each `period` minutes, idle the rest."""
    return lambda m: busy if int(m) % period < period // 2 else idle


def healthy_cases() -> list[Case]:
    lull = replace(SPARE, rate=0.3, running=1, util=3, sm_clock=600, power=95, pcie_link=(1, 8))
    return [
        Case(
            "idle-spare-link-at-gen1",
            set(),
            fleet("ls", {2: lambda m: SPARE}, base=BUSY),
            "forums.developer.nvidia.com/t/72537 and janhq/jan#183: an idle GPU's link drops to Gen1 (2.5 GT/s) "
            "and trains back up under load; a warm spare at Gen1 x16 beside two busy replicas at Gen5 x16",
        ),
        Case(
            "bursty-replica-link-follows-load",
            set(),
            fleet("lb", {1: _bursty(BUSY, lull)}, base=BUSY),
            "nvidia-smi's link 'may be reduced when the GPU is not in use' (generation and width; janhq/jan#183): a "
            "replica "
            "busy two minutes in four, at Gen5 x16 while it works and Gen1 x8 in each lull",
        ),
        Case(
            "heavy-transfers-then-idle-at-the-end",
            set(),
            fleet(
                "lh",
                {1: lambda m: replace(BUSY, pcie_rx=20e9, pcie_tx=6e9) if m < 55 else replace(SPARE, rate=0.2)},
                base=BUSY,
            ),
            "vllm-project/vllm#3094 (KV swapped over PCIe) and forums.developer.nvidia.com/t/72537: 20 GB/s "
            "over a Gen5 x16 link (39 % of what it achieves) until two minutes before the diagnosis, then idle "
            "at Gen1, whose 4 GB/s is not what the link carried",
        ),
    ]


def fault_cases() -> list[Case]:
    return [
        Case(
            "every-spare-idle-one-busy",
            {("gpu_underutilized", "node-la-1")},
            fleet("la", {0: lambda m: BUSY}, base=SPARE, size=4),
            "Lenovo HT513323 (Gen1 at idle is expected): one replica serving and three idle at Gen1 the whole "
            "hour. Their links are not the finding; three idle machines beside one busy are idle capacity, "
            "the vocabulary's gpu_underutilized (one would be a warm spare: idle_spare_machines)",
        ),
        Case(
            "busy-link-trained-at-x8",
            {("pcie_bottleneck", "node-lw-0")},
            fleet("lw", {0: lambda m: replace(BUSY, pcie_link=(5, 8)), 2: lambda m: SPARE}, base=BUSY),
            "noonghunna/club-3090#895: a riser that trains the link below its width runs the GPU silently at "
            "reduced bandwidth; a busy GPU at Gen5 x8 of x16 all hour, beside an idle spare at Gen1",
        ),
        Case(
            "gen3-after-a-restart-beside-an-avalanche",
            {("pcie_bottleneck", "node-lr-0"), ("kv_cache_exhaustion", "vllm-lr-1")},
            fleet(
                "lr",
                {
                    0: lambda m: (
                        replace(BUSY, pcie_link=(3, 16), epoch=1, scraped=not 28 <= m < 31) if m >= 28 else BUSY
                    ),
                    1: lambda m: AVALANCHE if m >= 38 else BUSY,
                },
                base=BUSY,
            )
            + _with([fleet("lr", {3: lambda m: SPARE}, size=4)[3]], no_vllm=True),
            "noonghunna/club-3090#1098 (40 % fewer tokens a second, the links checked under load): node 0 "
            "rebooted at minute 28 (three minutes unscraped, its counters from zero) and came back at Gen3 x16 "
            "of Gen5, busy; the seeds' KV avalanche on another replica from minute 38; a spare GPU node serving "
            "nothing, its link at Gen1",
        ),
    ]


def cases() -> list[Case]:
    return healthy_cases() + fault_cases()
