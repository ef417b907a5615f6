"""A fake pynvml module: the hardware seam for unit tests.

It carries the real module's exception classes and constants, so the code under test sees
exactly what nvidia-ml-py raises; only the device functions are scripted.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

_CONSTANTS = [
    n for n in dir(pynvml) if n.startswith(("NVML_", "nvmlEventType", "nvmlClocksEvent")) or n == "nvmlMemory_v2"
]
_ERRORS = [n for n in dir(pynvml) if n.startswith("NVMLError")]


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = "00000000:18:00.0"
    readings: dict[str, Any] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)  # function names raising NotSupported
    lost: bool = False


def default_readings() -> dict[str, Any]:
    return {
        "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=87, memory=41),
        "nvmlDeviceGetEncoderUtilization": [0, 167000],
        "nvmlDeviceGetDecoderUtilization": [0, 167000],
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=80 << 30, used=72 << 30, free=7 << 30, reserved=1 << 30),
        "nvmlDeviceGetTemperature": 71,
        "nvmlDeviceGetTemperatureThreshold": 87,
        "nvmlDeviceGetPowerUsage": 612_500,  # mW
        "nvmlDeviceGetEnforcedPowerLimit": 700_000,
        "nvmlDeviceGetTotalEnergyConsumption": 123_456_789,
        "nvmlDeviceGetClockInfo": {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619},
        "nvmlDeviceGetApplicationsClock": 1590,
        "nvmlDeviceGetMaxClockInfo": 1980,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x4 | 0x20,  # power cap + thermal
        "nvmlDeviceGetPcieThroughput": {
            pynvml.NVML_PCIE_UTIL_TX_BYTES: 1_000_000,
            pynvml.NVML_PCIE_UTIL_RX_BYTES: 2_000_000,
        },
        "nvmlDeviceGetCurrPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetPcieReplayCounter": 3,
        "nvmlDeviceGetTotalEccErrors": 0,
        "nvmlDeviceGetRemappedRows": (2, 0, False, False),
        "nvmlDeviceGetComputeRunningProcesses": [SimpleNamespace(pid=4242, usedGpuMemory=70 << 30)],
        "nvmlDeviceGetNumaNodeId": 0,
    }


class FakeNvml(SimpleNamespace):
    """Build with GPUs; `init_error`, `events` (a script of events and errors) are scriptable."""

    def __init__(self, gpus: list[FakeGpu], init_error: str | None = None) -> None:
        super().__init__()
        for name in _CONSTANTS + _ERRORS:
            setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_error = init_error
        self.events: collections.deque[Any] = collections.deque()
        self.event_sets_created = 0
        self.event_sets_freed = 0
        self.topology: dict[tuple[int, int], int] = {}
        self.nvlink: set[tuple[int, int]] = set()

    def error(self, name: str) -> Exception:
        return getattr(pynvml, name)()

    # -- lifecycle
    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_error:
            raise self.error(self.init_error)

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.159.03"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:  # noqa: N802
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:  # noqa: N802
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:  # noqa: N802
        return h.name

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        return SimpleNamespace(busId=h.bus_id.encode())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvmlDevice"):
            return lambda h, *args: self._read(name, h, *args)
        raise AttributeError(name)

    def _read(self, name: str, h: FakeGpu, *args: Any) -> Any:
        if h.lost:
            raise self.error("NVMLError_GpuIsLost")
        if name in h.unsupported or name not in h.readings:
            raise self.error("NVMLError_NotSupported")
        value = h.readings[name]
        if isinstance(value, dict) and args and args[0] in value:
            return value[args[0]]
        return value

    # -- topology
    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeGpu, b: FakeGpu) -> int:  # noqa: N802
        key = (self.gpus.index(a), self.gpus.index(b))
        return self.topology.get(key, self.topology.get(key[::-1], 30))

    def nvmlDeviceGetP2PStatus(self, a: FakeGpu, b: FakeGpu, index: int) -> int:  # noqa: N802
        key = tuple(sorted((self.gpus.index(a), self.gpus.index(b))))
        return pynvml.NVML_P2P_STATUS_OK if key in self.nvlink else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    # -- events
    def nvmlEventSetCreate(self) -> object:  # noqa: N802
        self.event_sets_created += 1
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, kind: int, event_set: object) -> None:  # noqa: N802
        if "events" in h.unsupported:
            raise self.error("NVMLError_NotSupported")

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:  # noqa: N802
        if not self.events:
            raise self.error("NVMLError_Timeout")
        item = self.events.popleft()
        if isinstance(item, Exception):
            raise item
        gpu, xid = item
        return SimpleNamespace(device=self.gpus[gpu], eventData=xid, eventType=pynvml.nvmlEventTypeXidCriticalError)

    def nvmlEventSetFree(self, event_set: object) -> None:  # noqa: N802
        self.event_sets_freed += 1


def fake_node(count: int = 2, **kwargs: Any) -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(
                uuid=f"GPU-fake-{i}",
                bus_id=f"00000000:{0x18 + i:02X}:00.0",
                readings=default_readings(),
            )
            for i in range(count)
        ],
        **kwargs,
    )
