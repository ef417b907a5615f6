"""A fake pynvml module: the hardware seam for unit tests.

It carries the real module's exception classes and constants, so the code under test sees
exactly what nvidia-ml-py raises; only the device functions are scripted. A GPU given `mig`
devices is in MIG mode, as NVML shows one: utilisation NotSupported on the parent, MIG device
handles by slot (NotFound for empty slots), their own memory and processes, and NotSupported for
device-level readings on a MIG handle.
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
class FakeMig:
    """A MIG device: its own UUID, profile, GPU instance id, memory and processes."""

    uuid: str
    profile: str
    gpu_instance_id: int
    readings: dict[str, Any] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)
    parent: FakeGpu | None = None

    @property
    def lost(self) -> bool:
        return self.parent is not None and self.parent.lost

    @property
    def name(self) -> str:
        return f"{self.parent.name if self.parent else 'NVIDIA'} MIG {self.profile}"


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = "00000000:18:00.0"
    readings: dict[str, Any] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)  # function names raising NotSupported
    lost: bool = False
    mig: list[FakeMig] = field(default_factory=list)  # MIG devices, by slot (None = an empty slot)
    answers_under_mig: set[str] = field(default_factory=set)  # readings a driver answers anyway

    def with_mig(self, *profiles: str) -> FakeGpu:
        """Turn MIG on with these instances (GPU instance ids as H100 numbers them: 1g from 7)."""
        for slot, profile in enumerate(profiles):
            gib = int(profile.split(".")[1].removesuffix("gb"))
            instance = FakeMig(
                uuid=f"MIG-{self.uuid.removeprefix('GPU-')}-{slot}",
                profile=profile,
                gpu_instance_id=[1, 2, 7, 8, 9, 10, 11][slot],
                readings={
                    "nvmlDeviceGetMemoryInfo": SimpleNamespace(
                        total=gib << 30, used=(gib // 2) << 30, free=(gib - gib // 2) << 30, reserved=0
                    ),
                    "nvmlDeviceGetComputeRunningProcesses": [
                        SimpleNamespace(pid=5000 + slot, usedGpuMemory=(gib // 2) << 30)
                    ],
                },
                parent=self,
            )
            self.mig.append(instance)
        return self


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

    def nvmlDeviceGetName(self, h: FakeGpu | FakeMig) -> str:  # noqa: N802
        return h.name

    # -- MIG
    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> tuple[int, int]:  # noqa: N802
        if "nvmlDeviceGetMigMode" in h.unsupported:
            raise self.error("NVMLError_NotSupported")
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if h.mig else pynvml.NVML_DEVICE_MIG_DISABLE
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:  # noqa: N802
        return 7 if h.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, slot: int) -> FakeMig:  # noqa: N802
        if slot >= len(h.mig) or h.mig[slot] is None:
            raise self.error("NVMLError_NotFound")
        return h.mig[slot]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeMig) -> int:  # noqa: N802
        if not isinstance(h, FakeMig):
            raise self.error("NVMLError_InvalidArgument")
        return h.gpu_instance_id

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:  # noqa: N802
        return SimpleNamespace(busId=h.bus_id.encode())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvmlDevice"):
            return lambda h, *args: self._read(name, h, *args)
        raise AttributeError(name)

    def _read(self, name: str, h: FakeGpu | FakeMig, *args: Any) -> Any:
        if h.lost:
            raise self.error("NVMLError_GpuIsLost")
        if name in h.unsupported or name not in h.readings:
            raise self.error("NVMLError_NotSupported")
        under_mig = isinstance(h, FakeGpu) and h.mig and name not in h.answers_under_mig
        if under_mig and name == "nvmlDeviceGetUtilizationRates":
            raise self.error("NVMLError_NotSupported")  # no utilisation in MIG mode
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


def fake_node(count: int = 2, mig: dict[int, list[str]] | None = None, **kwargs: Any) -> FakeNvml:
    """`count` H100s; `mig` = {gpu index: [profiles]} puts those GPUs in MIG mode."""
    gpus = [
        FakeGpu(
            uuid=f"GPU-fake-{i}",
            bus_id=f"00000000:{0x18 + i:02X}:00.0",
            readings=default_readings(),
        )
        for i in range(count)
    ]
    for index, profiles in (mig or {}).items():
        gpus[index].with_mig(*profiles)
    return FakeNvml(gpus, **kwargs)
