"""Datasheet facts about GPU models, for what dcgm-exporter's default counters do not carry
(base clock, power limit, PCIe link) and for the emulated GPUs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class GpuModel:
    name: str  # NVML's device name exactly (dcgm-exporter's modelName)
    memory_mib: float | None = None
    tdp_w: float | None = None  # the board's default power limit
    idle_w: float | None = None
    max_sm_clock: float | None = None  # MHz
    base_sm_clock: float | None = None
    idle_sm_clock: float | None = None
    mem_clock: float | None = None
    slowdown_temp: float | None = None  # C
    pcie_gen: int | None = None
    pcie_width: int | None = None
    # the roofline: dense BF16 (FP16 on T4) tensor TFLOP/s without sparsity, and memory GB/s
    peak_tflops: float | None = None
    memory_gbps: float | None = None
    names: tuple[str, ...] = ()  # NVML's other spellings of the same board
    source: str = ""  # where the numbers come from
    # None = not known here: a judgement that needs it is not made (a page's own limits, its
    # power-management limit or slowdown temperature, always win over the table)

    @property
    def ridge_flops_per_byte(self) -> float | None:
        """Arithmetic intensity where the GPU turns from memory- to compute-bound."""
        if not self.peak_tflops or not self.memory_gbps:
            return None
        return self.peak_tflops * 1e12 / (self.memory_gbps * 1e9)

    @property
    def emulatable(self) -> bool:
        """Every field the emulated GPUs need is known."""
        return all(getattr(self, f) is not None for f in EMULATED_FIELDS)


_DS = "NVIDIA datasheet"
# The emulated and diagnosed rows of earlier releases (clocks, idle power and slowdown temperatures
# as nvidia-smi -q reports them on the boards measured; tests/data/real-pages: the Tesla T4 at its
# 70 W cap, the L4), then the data-centre boards by NVML's exact name with what their datasheets
# state (power, memory and its bandwidth, dense BF16 tensor TFLOP/s, the PCIe link, boost clock);
# what a datasheet does not state stays None.
MODELS = {
    "H100": GpuModel(
        "NVIDIA H100 80GB HBM3", 81559, 700, 90, 1980, 1590, 345, 2619, 87, 5, 16, 989.4, 3350,
        source=f"{_DS} H100 SXM5 (700 W, 3.35 TB/s, 989 TFLOPS BF16 dense)",
    ),
    "H200": GpuModel(
        "NVIDIA H200", 143771, 700, 90, 1980, 1590, 345, 3201, 87, 5, 16, 989.4, 4800,
        source=f"{_DS} H200 SXM (700 W, 141 GB, 4.8 TB/s)",
    ),
    "A100": GpuModel(
        "NVIDIA A100-SXM4-80GB", 81920, 400, 60, 1410, 1275, 210, 1593, 87, 4, 16, 312, 2039,
        source=f"{_DS} A100 80GB SXM (400 W, 2,039 GB/s, 312 TFLOPS BF16 dense)",
    ),
    "L40S": GpuModel(
        "NVIDIA L40S", 46068, 350, 35, 2520, 1110, 210, 9001, 88, 4, 16, 362.05, 864,
        source=f"{_DS} L40S (350 W, 48 GB GDDR6, 864 GB/s, 362 TFLOPS BF16 dense)",
    ),
    "T4": GpuModel(
        "Tesla T4", 15360, 70, 9, 1590, 585, 300, 5001, 93, 3, 16, 65, 320,
        source=f"{_DS} T4 (70 W, 320 GB/s, 65 TFLOPS FP16)",
    ),
    "L4": GpuModel(
        "NVIDIA L4", 23034, 72, 16, 2040, 795, 210, 6251, 90, 4, 16, 121, 300,
        source=f"{_DS} L4 (72 W, 24 GB, 300 GB/s, 121 TFLOPS BF16 dense)",
    ),
    "H100 PCIe": GpuModel(
        "NVIDIA H100 PCIe", tdp_w=350, max_sm_clock=1755, pcie_gen=5, pcie_width=16, peak_tflops=756, memory_gbps=2000,
        source=f"{_DS} H100 PCIe (350 W, 80 GB HBM2e, 2 TB/s, 756 TFLOPS BF16 dense)",
    ),
    "H100 NVL": GpuModel(
        "NVIDIA H100 NVL", tdp_w=400, pcie_gen=5, pcie_width=16, peak_tflops=835.5, memory_gbps=3900,
        source=f"{_DS} H100 NVL (350-400 W, 94 GB, 3.9 TB/s, 1,671 TFLOPS BF16 with sparsity)",
    ),
    "H200 NVL": GpuModel(
        "NVIDIA H200 NVL", tdp_w=600, pcie_gen=5, pcie_width=16, peak_tflops=835.5, memory_gbps=4800,
        source=f"{_DS} H200 NVL (up to 600 W, 141 GB, 4.8 TB/s, 1,671 TFLOPS BF16 with sparsity)",
    ),
    "H20": GpuModel(
        "NVIDIA H20", tdp_w=400, pcie_gen=5, pcie_width=16, peak_tflops=148, memory_gbps=4000,
        source="NVIDIA H20 product brief (400 W, 96 GB HBM3, 4.0 TB/s, 148 TFLOPS BF16 dense)",
    ),
    "B200": GpuModel(
        "NVIDIA B200", tdp_w=1000, peak_tflops=2250, memory_gbps=8000,
        source=f"{_DS} HGX B200, per GPU (1,000 W, 8 TB/s, 4.5 PFLOPS BF16 with sparsity)",
    ),
    "A100 SXM4 40GB": GpuModel(
        "NVIDIA A100-SXM4-40GB", tdp_w=400, max_sm_clock=1410, pcie_gen=4, pcie_width=16, peak_tflops=312,
        memory_gbps=1555, source=f"{_DS} A100 40GB SXM (400 W, 1,555 GB/s)",
    ),
    "A100 PCIe 40GB": GpuModel(
        "NVIDIA A100-PCIE-40GB", tdp_w=250, max_sm_clock=1410, pcie_gen=4, pcie_width=16, peak_tflops=312,
        memory_gbps=1555, source=f"{_DS} A100 40GB PCIe (250 W, 1,555 GB/s)",
    ),
    "A100 PCIe 80GB": GpuModel(
        "NVIDIA A100 80GB PCIe", tdp_w=300, max_sm_clock=1410, pcie_gen=4, pcie_width=16, peak_tflops=312,
        memory_gbps=1935, source=f"{_DS} A100 80GB PCIe (300 W, 1,935 GB/s)",
    ),
    "A30": GpuModel(
        "NVIDIA A30", tdp_w=165, max_sm_clock=1440, pcie_gen=4, pcie_width=16, peak_tflops=165, memory_gbps=933,
        source=f"{_DS} A30 (165 W, 24 GB HBM2, 933 GB/s, 165 TFLOPS BF16 dense)",
    ),
    "A40": GpuModel(
        "NVIDIA A40", tdp_w=300, max_sm_clock=1740, pcie_gen=4, pcie_width=16, peak_tflops=149.7, memory_gbps=696,
        source=f"{_DS} A40 (300 W, 48 GB GDDR6, 696 GB/s, 149.7 TFLOPS BF16 dense)",
    ),
    "A10": GpuModel(
        "NVIDIA A10", tdp_w=150, max_sm_clock=1695, pcie_gen=4, pcie_width=16, peak_tflops=125, memory_gbps=600,
        source=f"{_DS} A10 (150 W, 24 GB GDDR6, 600 GB/s, 125 TFLOPS BF16 dense)",
    ),
    "A10G": GpuModel(
        "NVIDIA A10G", memory_gbps=600,
        source="AWS EC2 G5 (24 GB GDDR6, 600 GB/s); no NVIDIA datasheet: its power and TFLOP/s are not stated",
    ),
    "L40": GpuModel(
        "NVIDIA L40", tdp_w=300, max_sm_clock=2490, pcie_gen=4, pcie_width=16, peak_tflops=181.05, memory_gbps=864,
        source=f"{_DS} L40 (300 W, 48 GB GDDR6, 864 GB/s, 181 TFLOPS BF16 dense)",
    ),
    "RTX 6000 Ada": GpuModel(
        "NVIDIA RTX 6000 Ada Generation", tdp_w=300, max_sm_clock=2505, pcie_gen=4, pcie_width=16, memory_gbps=960,
        source=f"{_DS} RTX 6000 Ada (300 W, 48 GB GDDR6, 960 GB/s)",
    ),
    "RTX PRO 6000 Blackwell": GpuModel(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        pcie_gen=5,
        pcie_width=16,
        memory_gbps=1792,
        names=("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",),
        source=f"{_DS} RTX PRO 6000 Blackwell (96 GB GDDR7, 1,792 GB/s; power differs by edition)",
    ),
}  # fmt: skip


FIELDS = tuple(f.name for f in fields(GpuModel) if f.name not in ("names", "source"))
OPTIONAL_FIELDS = tuple(f for f in FIELDS if f != "name")
EMULATED_FIELDS = (
    "memory_mib", "tdp_w", "idle_w", "max_sm_clock", "base_sm_clock", "idle_sm_clock", "mem_clock",
    "slowdown_temp", "pcie_gen", "pcie_width",
)  # fmt: skip
_MIG_SUFFIX = re.compile(r"\s+MIG\s+\S+$")


def nvml_key(device_name: str) -> str:
    """How a device name is compared: NVML's name without a MIG profile suffix (`... MIG 3g.40gb`),
    spaces collapsed, case folded. Nothing else: a substring is never a match (L40 is not L4)."""
    return " ".join(_MIG_SUFFIX.sub("", device_name).split()).casefold()


class GpuModels:
    """The datasheet table with a user's overrides (kvscope.yaml `gpu_models`): a known model's
    fields may be changed one by one; a new model gives its NVML name and what it knows."""

    def __init__(self, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.table: dict[str, GpuModel] = dict(MODELS)
        self.overridden: dict[str, set[str]] = {}
        for short, values in (overrides or {}).items():
            given = {k: v for k, v in values.items() if v is not None}
            if short in self.table:
                self.table[short] = replace(self.table[short], **given)
            else:
                if "name" not in given:
                    raise ValueError(f"gpu_models.{short}: a new model needs its NVML device name (name)")
                self.table[short] = GpuModel(**given)
            self.overridden[short] = set(given)

    def lookup(self, model_name: str | None) -> GpuModel | None:
        """The model NVML calls `model_name`, matched exactly (nvml_key); None when the table has
        no such board: then no datasheet judgement is made, and the verdict says which."""
        if not model_name:
            return None
        key = nvml_key(model_name)
        return next((m for m in self.table.values() if key in {nvml_key(n) for n in (m.name, *m.names)}), None)

    def __getitem__(self, short: str) -> GpuModel:
        return self.table[short]


DEFAULT_MODELS = GpuModels()


# Per-lane bytes per second per direction, after line encoding, by PCIe generation.
PCIE_LANE_BYTES_PER_SECOND = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7563e6}


def pcie_capacity(generation: float | None, width: float | None) -> float | None:
    """Nominal bytes per second per direction of a link, or None when a part is unknown (what
    transfers reach is a share of it: thresholds.PCIE_ACHIEVABLE_SHARE)."""
    if not generation or not width or int(generation) not in PCIE_LANE_BYTES_PER_SECOND:
        return None
    return PCIE_LANE_BYTES_PER_SECOND[int(generation)] * width
