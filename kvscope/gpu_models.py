"""Datasheet facts about GPU models, for what dcgm-exporter's default counters do not carry
(base clock, power limit, PCIe link) and for the emulated GPUs."""

from __future__ import annotations

from dataclasses import dataclass


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


MODELS = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, 700, 90, 1980, 1590, 345, 2619, 87, 5, 16),
    "H200": GpuModel("NVIDIA H200", 143771, 700, 90, 1980, 1590, 345, 3201, 87, 5, 16),
    "A100": GpuModel("NVIDIA A100-SXM4-80GB", 81920, 400, 60, 1410, 1275, 210, 1593, 87, 4, 16),
    "L40S": GpuModel("NVIDIA L40S", 46068, 350, 35, 2520, 1110, 210, 9001, 88, 4, 16),
}


def lookup(model_name: str | None) -> GpuModel | None:
    """The model whose short name appears in NVML's device name ('NVIDIA H100 80GB HBM3')."""
    if not model_name:
        return None
    for short, model in MODELS.items():
        if short in model_name:
            return model
    return None


# Per-lane bytes per second per direction, after line encoding, by PCIe generation.
PCIE_LANE_BYTES_PER_SECOND = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7563e6}


def pcie_capacity(generation: float | None, width: float | None) -> float | None:
    """Bytes per second per direction of a link, or None when a part is unknown."""
    if not generation or not width or int(generation) not in PCIE_LANE_BYTES_PER_SECOND:
        return None
    return PCIE_LANE_BYTES_PER_SECOND[int(generation)] * width
