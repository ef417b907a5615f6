"""Datasheet facts about GPU models, for what dcgm-exporter's default counters do not carry
(base clock, power limit, PCIe link) and for the emulated GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class GpuModel:
    name: str  # as NVML reports it (dcgm-exporter's modelName)
    memory_mib: float
    tdp_w: float
    idle_w: float
    max_sm_clock: float
    base_sm_clock: float
    idle_sm_clock: float
    mem_clock: float
    slowdown_temp: float
    pcie_gen: int
    pcie_width: int
    # the roofline: dense BF16 (FP16 on T4) tensor TFLOP/s without sparsity, and memory GB/s, from
    # NVIDIA's datasheets (H100 SXM, H200 SXM, A100 SXM4 80GB, L40S, T4, L4); None = unknown
    peak_tflops: float | None = None
    memory_gbps: float | None = None

    @property
    def ridge_flops_per_byte(self) -> float | None:
        """Arithmetic intensity where the GPU turns from memory- to compute-bound."""
        if not self.peak_tflops or not self.memory_gbps:
            return None
        return self.peak_tflops * 1e12 / (self.memory_gbps * 1e9)


MODELS = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, 700, 90, 1980, 1590, 345, 2619, 87, 5, 16, 989.4, 3350),
    "H200": GpuModel("NVIDIA H200", 143771, 700, 90, 1980, 1590, 345, 3201, 87, 5, 16, 989.4, 4800),
    "A100": GpuModel("NVIDIA A100-SXM4-80GB", 81920, 400, 60, 1410, 1275, 210, 1593, 87, 4, 16, 312, 2039),
    "L40S": GpuModel("NVIDIA L40S", 46068, 350, 35, 2520, 1110, 210, 9001, 88, 4, 16, 362.05, 864),
    # inference parts seen on real pages (../shared/real-pages: Tesla T4 at its 70 W cap, L4);
    # slowdown temperatures as nvidia-smi -q -d TEMPERATURE commonly reports them: override per
    # fleet in kvscope.yaml `gpu_models` where a board differs
    "T4": GpuModel("Tesla T4", 15360, 70, 9, 1590, 585, 300, 5001, 93, 3, 16, 65, 320),
    "L4": GpuModel("NVIDIA L4", 23034, 72, 16, 2040, 795, 210, 6251, 90, 4, 16, 121, 300),
}


FIELDS = tuple(f.name for f in fields(GpuModel))
OPTIONAL_FIELDS = ("peak_tflops", "memory_gbps")


class GpuModels:
    """The datasheet table with a user's overrides (kvscope.yaml `gpu_models`): a known model's
    fields may be changed one by one; a new model gives them all."""

    def __init__(self, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.table: dict[str, GpuModel] = dict(MODELS)
        self.overridden: dict[str, set[str]] = {}
        for short, values in (overrides or {}).items():
            given = {k: v for k, v in values.items() if v is not None}
            if short in self.table:
                self.table[short] = replace(self.table[short], **given)
            else:
                missing = [f for f in FIELDS if f not in given and f not in OPTIONAL_FIELDS]
                if missing:
                    raise ValueError(f"gpu_models.{short}: a new model needs every field; missing {', '.join(missing)}")
                self.table[short] = GpuModel(**given)
            self.overridden[short] = set(given)

    def lookup(self, model_name: str | None) -> GpuModel | None:
        """The model whose short name appears in NVML's device name ('NVIDIA H100 80GB HBM3');
        the longest short name wins (H100 NVL before H100)."""
        if not model_name:
            return None
        for short in sorted(self.table, key=len, reverse=True):
            if short in model_name:
                return self.table[short]
        return None

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
