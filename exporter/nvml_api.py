"""The one module that calls pynvml (nvidia-ml-py), in the manner of nvitop.

Every reading is optional: NotSupported (energy on old GPUs, remapped rows before Ampere or
under MIG, PCIe throughput under vGPU) becomes None and its series is absent, never invented.
A missing driver surfaces once, at init, as NvmlUnavailable with NVML's reason. A GPU that has
fallen off the bus (GpuIsLost) is reported as lost, and its readings stop.
The pynvml module is injectable: unit tests pass a fake at exactly this seam.

MIG: a GPU in MIG mode is served twice over, as dcgm-exporter does: the physical GPU (device-level
readings: temperature, power, clocks, PCIe, ECC) and each MIG device as a device of its own, with
the parent's gpu, UUID, pci_bus_id, device and modelName plus GPU_I_PROFILE ("1g.10gb") and GPU_I_ID
(the GPU instance id). What MIG does not support is left out, never invented: GPU_UTIL and
MEM_COPY_UTIL (NVML has no utilisation under MIG) on both, and on the MIG devices everything but
their own memory and processes (device-level values are the parent's, served once, there).
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from kvscope import catalog

T = TypeVar("T")
_MIB = 1 << 20
CLOCK_EVENT_REASONS = catalog.CLOCK_EVENT_REASONS  # nvmlClocksEventReason* bits and their labels


# nvmlDeviceGetTopologyCommonAncestor levels and kvscope's names (nvidia-smi topo -m).
TOPOLOGY_LEVELS = {
    0: "same_board",  # INTERNAL
    10: "single_switch",  # PIX
    20: "multiple_switches",  # PXB
    30: "host_bridge",  # PHB
    40: "numa_node",  # NODE
    50: "system",  # SYS: crosses the inter-socket link (QPI/UPI)
}


class NvmlUnavailable(RuntimeError):  # noqa: N818 - a state of the machine, not our error
    """NVML cannot be used on this machine (no driver library, driver not loaded, ...)."""


HostLabel = str  # "hostname" (dcgm-exporter >= 4.6.0-4.8.3), "Hostname" (older) or "" (none)
_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+[a-z]+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class GpuIdentity:
    """What dcgm-exporter puts on every series, plus the NUMA node; MIG devices add their
    instance (dcgm-exporter: gpu, UUID, pci_bus_id, device and modelName are the parent's)."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    hostname: str
    numa_node: int | None = None
    mig_profile: str | None = None  # "1g.10gb": set on MIG devices only
    gpu_instance_id: int | None = None
    mig_uuid: str = ""  # the MIG device's own UUID ("MIG-..."), for joins with nvidia-smi

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None

    @property
    def key(self) -> tuple[str, str]:
        """Which device this is across exporters: (UUID, GPU_I_ID or "")."""
        return (self.uuid, "" if self.gpu_instance_id is None else str(self.gpu_instance_id))

    def dcgm_label_pairs(
        self, host_label: HostLabel = catalog.DCGM_HOST_LABELS[0]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(label names, values) in dcgm-exporter's order: gpu, UUID, pci_bus_id, device,
        modelName, [GPU_I_PROFILE, GPU_I_ID], then the host label unless it is ""."""
        names = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
        values = [str(self.index), self.uuid, self.pci_bus_id, self.device, self.model_name]
        if self.is_mig:
            names += catalog.DCGM_MIG_LABELS
            values += [str(self.mig_profile), str(self.gpu_instance_id)]
        if host_label:
            names.append(host_label)
            values.append(self.hostname)
        return tuple(names), tuple(values)


@dataclass(frozen=True)
class MigDevice:
    """One MIG device of a physical GPU, as NVML enumerates it."""

    parent: int
    handle: Any
    gpu_instance_id: int
    profile: str
    uuid: str


@dataclass
class GpuReading:
    """One GPU at one moment. None = not supported here (the series is left out)."""

    lost: bool = False
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    enc_util: float | None = None
    dec_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    fb_reserved_mib: float | None = None
    gpu_temp: float | None = None
    memory_temp: float | None = None
    slowdown_temp: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_mj: float | None = None
    sm_clock: float | None = None
    mem_clock: float | None = None
    app_sm_clock: float | None = None
    max_sm_clock: float | None = None
    clock_event_reasons: int | None = None
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    pcie_replays: float | None = None
    ecc_sbe: float | None = None
    ecc_dbe: float | None = None
    remapped_correctable: float | None = None
    remapped_uncorrectable: float | None = None
    remap_failure: float | None = None
    remap_pending: float | None = None  # 1 while a remap waits for the next GPU reset
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    xid_last: int | None = None  # the last XID seen on this GPU (dcgm-exporter's sticky gauge)
    dram_active: float | None = None  # DCGM profiling fields: NVML cannot read them
    tensor_active: float | None = None
    nvlink_bytes: float | None = None


class Nvml:
    """A session with NVML. `init()` first; every other call degrades to None."""

    def __init__(self, module: ModuleType | Any | None = None) -> None:
        if module is None:
            import pynvml

            module = pynvml
        self.nv: Any = module
        self._handles: list[Any] = []
        self.mig_devices: list[MigDevice] = []
        self._mig_parents: set[int] = set()
        self.driver_version = ""

    # -- lifecycle -----------------------------------------------------------------------
    def init(self) -> None:
        try:
            self.nv.nvmlInit()
        except self.nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from exc
        count = self.nv.nvmlDeviceGetCount()
        self._handles = [self.nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.driver_version = _text(self._maybe(self.nv.nvmlSystemGetDriverVersion) or "")
        self.mig_devices = []
        for i, h in enumerate(self._handles):
            with contextlib.suppress(self._lost_error()):
                self.mig_devices += self._mig_devices_of(i, h)
        self._mig_parents = {m.parent for m in self.mig_devices}

    def mig_enabled(self, index: int) -> bool:
        """Whether GPU `index` runs in MIG mode (current mode, not the pending one)."""
        return index in self._mig_parents

    def _mig_devices_of(self, index: int, h: Any) -> list[MigDevice]:
        mode = self._maybe("nvmlDeviceGetMigMode", h)  # (current, pending); NotSupported before Ampere
        if not mode or mode[0] != getattr(self.nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        out = []
        for slot in range(int(self._maybe("nvmlDeviceGetMaxMigDeviceCount", h) or 0)):
            mig = self._maybe("nvmlDeviceGetMigDeviceHandleByIndex", h, slot)  # NotFound: an empty slot
            if mig is None:
                continue
            instance = self._maybe("nvmlDeviceGetGpuInstanceId", mig)
            if instance is None:
                continue
            out.append(
                MigDevice(
                    parent=index,
                    handle=mig,
                    gpu_instance_id=int(instance),
                    profile=self._mig_profile(mig),
                    uuid=_text(self._maybe(self.nv.nvmlDeviceGetUUID, mig) or ""),
                )
            )
        return out

    def _mig_profile(self, mig: Any) -> str:
        """The profile name dcgm-exporter writes ("1g.10gb"): from the MIG device's name
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), else from its slice count and memory."""
        name = _text(self._maybe(self.nv.nvmlDeviceGetName, mig) or "")
        if found := _MIG_PROFILE.search(name):
            return found.group(1).lower()
        attributes = self._maybe("nvmlDeviceGetAttributes", mig)
        if attributes is not None:
            slices = getattr(attributes, "gpuInstanceSliceCount", 0)
            gib = round(getattr(attributes, "memorySizeMB", 0) / 1024)
            return f"{slices}g.{gib}gb"
        return "unknown"

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()

    @property
    def count(self) -> int:
        return len(self._handles)

    def handle(self, index: int) -> Any:
        return self._handles[index]

    def index_of(self, handle: Any) -> int | None:
        """The index of a device handle (event payloads carry handles), by UUID."""
        uuid = self._maybe(self.nv.nvmlDeviceGetUUID, handle)
        for i, h in enumerate(self._handles):
            if h is handle or (uuid is not None and self._maybe(self.nv.nvmlDeviceGetUUID, h) == uuid):
                return i
        return None

    # -- readings ------------------------------------------------------------------------
    def _maybe(self, fn: Callable[..., T] | str | None, *args: Any) -> T | None:
        """fn(*args), or None when NVML says the reading is not available here. `fn` may be a
        pynvml function name: one this nvidia-ml-py lacks is not available either."""
        if isinstance(fn, str):
            fn = getattr(self.nv, fn, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            if isinstance(exc, self._lost_error()):
                raise
            return None

    def _lost_error(self) -> type[BaseException]:
        return getattr(self.nv, "NVMLError_GpuIsLost", type("_NeverRaised", (Exception,), {}))

    def identity(self, index: int) -> GpuIdentity:
        """Who the GPU is; a GPU already off the bus at start gets an identity of blanks."""
        try:
            return self._identity(index)
        except self._lost_error():
            return GpuIdentity(index=index, uuid="", pci_bus_id="", model_name="", hostname=socket.gethostname())

    def _identity(self, index: int) -> GpuIdentity:
        h = self._handles[index]
        pci = self._maybe(self.nv.nvmlDeviceGetPciInfo, h)
        bus_id = _text(getattr(pci, "busId", b"")) if pci is not None else ""
        return GpuIdentity(
            index=index,
            uuid=_text(self._maybe(self.nv.nvmlDeviceGetUUID, h) or ""),
            pci_bus_id=bus_id,
            model_name=_text(self._maybe(self.nv.nvmlDeviceGetName, h) or ""),
            hostname=socket.gethostname(),
            numa_node=self._numa_node(h, bus_id),
        )

    def _numa_node(self, handle: Any, bus_id: str) -> int | None:
        getter = getattr(self.nv, "nvmlDeviceGetNumaNodeId", None)
        node = self._maybe(getter, handle) if getter else None
        if node is not None and node >= 0:
            return int(node)
        # sysfs knows it too: /sys/bus/pci/devices/0000:3b:00.0/numa_node (-1 = none)
        if bus_id:
            short = bus_id.lower()[-12:] if len(bus_id) > 12 else bus_id.lower()
            with contextlib.suppress(OSError, ValueError):
                value = int(Path(f"/sys/bus/pci/devices/{short}/numa_node").read_text())
                return value if value >= 0 else None
        return None

    def reading(self, index: int) -> GpuReading:
        """Everything NVML can say about one GPU now; `lost` if it fell off the bus."""
        nv, h, r = self.nv, self._handles[index], GpuReading()
        try:
            self._read_into(nv, h, r)
        except self._lost_error():
            return GpuReading(lost=True)
        if self.mig_enabled(index):
            # no utilisation under MIG (some drivers answer 0: that would be a made-up idle GPU),
            # and the processes belong to the MIG devices, where they are served
            r.gpu_util = r.mem_copy_util = None
            r.processes = []
        return r

    def mig_identity(self, mig: MigDevice, parent: GpuIdentity) -> GpuIdentity:
        return GpuIdentity(
            index=parent.index,
            uuid=parent.uuid,
            pci_bus_id=parent.pci_bus_id,
            model_name=parent.model_name,
            hostname=parent.hostname,
            numa_node=parent.numa_node,
            mig_profile=mig.profile,
            gpu_instance_id=mig.gpu_instance_id,
            mig_uuid=mig.uuid,
        )

    def mig_reading(self, mig: MigDevice) -> GpuReading:
        """What a MIG device has of its own: its memory and its processes."""
        r = GpuReading()
        try:
            memory = self._memory(mig.handle)
            if memory is not None:
                _total, used, free, reserved = memory
                r.fb_used_mib, r.fb_free_mib = used / _MIB, free / _MIB
                r.fb_reserved_mib = reserved / _MIB if reserved is not None else None
            processes: list[Any] = self._maybe("nvmlDeviceGetComputeRunningProcesses", mig.handle) or []
            r.processes = [(int(p.pid), _int(getattr(p, "usedGpuMemory", None))) for p in processes]
        except self._lost_error():
            return GpuReading(lost=True)
        return r

    def _read_into(self, nv: Any, h: Any, r: GpuReading) -> None:
        m = self._maybe
        util = m("nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            r.gpu_util, r.mem_copy_util = float(util.gpu), float(util.memory)
        enc = m("nvmlDeviceGetEncoderUtilization", h)
        r.enc_util = float(enc[0]) if enc else None
        dec = m("nvmlDeviceGetDecoderUtilization", h)
        r.dec_util = float(dec[0]) if dec else None
        memory = self._memory(h)
        if memory is not None:
            _total, used, free, reserved = memory
            r.fb_used_mib, r.fb_free_mib = used / _MIB, free / _MIB
            r.fb_reserved_mib = reserved / _MIB if reserved is not None else None
        r.gpu_temp = _num(m("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU))
        slowdown = getattr(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", None)
        if slowdown is not None:
            r.slowdown_temp = _num(m("nvmlDeviceGetTemperatureThreshold", h, slowdown))
        power = m("nvmlDeviceGetPowerUsage", h)
        r.power_w = power / 1000 if power is not None else None
        limit = m("nvmlDeviceGetEnforcedPowerLimit", h)
        r.power_limit_w = limit / 1000 if limit is not None else None
        r.energy_mj = _num(m("nvmlDeviceGetTotalEnergyConsumption", h))
        r.sm_clock = _num(m("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM))
        r.mem_clock = _num(m("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM))
        r.app_sm_clock = _num(m("nvmlDeviceGetApplicationsClock", h, nv.NVML_CLOCK_SM))
        r.max_sm_clock = _num(m("nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_SM))
        reasons = m("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:  # nvidia-ml-py before the rename
            reasons = m("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        r.clock_event_reasons = int(reasons) if reasons is not None else None
        tx = m("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_TX_BYTES)  # KB/s over 20 ms
        rx = m("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_RX_BYTES)
        r.pcie_tx_bytes = tx * 1024.0 if tx is not None else None
        r.pcie_rx_bytes = rx * 1024.0 if rx is not None else None
        r.pcie_gen = _int(m("nvmlDeviceGetCurrPcieLinkGeneration", h))
        r.pcie_width = _int(m("nvmlDeviceGetCurrPcieLinkWidth", h))
        r.pcie_max_gen = _int(m("nvmlDeviceGetMaxPcieLinkGeneration", h))
        r.pcie_max_width = _int(m("nvmlDeviceGetMaxPcieLinkWidth", h))
        r.pcie_replays = _num(m("nvmlDeviceGetPcieReplayCounter", h))
        r.ecc_sbe = _num(
            m(
                nv.nvmlDeviceGetTotalEccErrors,
                h,
                nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                nv.NVML_VOLATILE_ECC,
            )
        )
        r.ecc_dbe = _num(
            m(
                nv.nvmlDeviceGetTotalEccErrors,
                h,
                nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nv.NVML_VOLATILE_ECC,
            )
        )
        remapped = m("nvmlDeviceGetRemappedRows", h)
        if remapped is not None:
            correctable, uncorrectable, pending, failure = remapped
            r.remap_pending = 1.0 if pending else 0.0
            r.remapped_correctable, r.remapped_uncorrectable = (
                float(correctable),
                float(uncorrectable),
            )
            r.remap_failure = 1.0 if failure else 0.0
        processes: list[Any] = m("nvmlDeviceGetComputeRunningProcesses", h) or []
        r.processes = [(int(p.pid), _int(getattr(p, "usedGpuMemory", None))) for p in processes]

    def _memory(self, h: Any) -> tuple[float, float, float, float | None] | None:
        """(total, used, free, reserved) in bytes; reserved needs the v2 struct."""
        v2 = getattr(self.nv, "nvmlMemory_v2", None)
        info = None
        if v2 is not None:
            info = self._maybe(self.nv.nvmlDeviceGetMemoryInfo, h, v2)
        if info is None:
            info = self._maybe(self.nv.nvmlDeviceGetMemoryInfo, h)
        if info is None:
            return None
        reserved = getattr(info, "reserved", None)
        return float(info.total), float(info.used), float(info.free), _num(reserved)

    # -- topology ------------------------------------------------------------------------
    def common_ancestor(self, a: int, b: int) -> int | None:
        return _int(self._maybe(self.nv.nvmlDeviceGetTopologyCommonAncestor, self._handles[a], self._handles[b]))

    def nvlink_connected(self, a: int, b: int) -> bool:
        index = getattr(self.nv, "NVML_P2P_CAPS_INDEX_NVLINK", None)
        if index is None:
            return False
        status = self._maybe(self.nv.nvmlDeviceGetP2PStatus, self._handles[a], self._handles[b], index)
        return status == getattr(self.nv, "NVML_P2P_STATUS_OK", 0)

    # -- XID events ----------------------------------------------------------------------
    def xid_event_set(self) -> tuple[Any, list[int]]:
        """An event set registered for critical XIDs on every GPU that supports them."""
        event_set = self.nv.nvmlEventSetCreate()
        registered = []
        for i, h in enumerate(self._handles):
            try:
                self.nv.nvmlDeviceRegisterEvents(h, self.nv.nvmlEventTypeXidCriticalError, event_set)
                registered.append(i)
            except self.nv.NVMLError_NotSupported:
                continue
        return event_set, registered

    def wait_event(self, event_set: Any, timeout_ms: int) -> Any:
        """The next event; raises the Timeout error class when quiet."""
        waiter = getattr(self.nv, "nvmlEventSetWait_v2", None) or self.nv.nvmlEventSetWait
        return waiter(event_set, timeout_ms)

    def free_event_set(self, event_set: Any) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlEventSetFree(event_set)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
