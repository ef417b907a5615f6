"""The one module that calls pynvml (nvidia-ml-py), in the manner of nvitop.

Every reading is optional: NotSupported (energy on old GPUs, remapped rows before Ampere or
under MIG, PCIe throughput under vGPU) becomes None and its series is absent, never invented.
A missing driver surfaces once, at init, as NvmlUnavailable with NVML's reason. A GPU that has
fallen off the bus (GpuIsLost) is reported as lost, and its readings stop.
The pynvml module is injectable: unit tests pass a fake at exactly this seam.
"""

from __future__ import annotations

import contextlib
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


@dataclass(frozen=True)
class GpuIdentity:
    """What dcgm-exporter puts on every series, plus the NUMA node."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    hostname: str
    numa_node: int | None = None

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"

    def dcgm_labels(self) -> list[str]:
        """Label values in dcgm-exporter's order (gpu, UUID, pci_bus_id, device, modelName,
        Hostname)."""
        return [
            str(self.index),
            self.uuid,
            self.pci_bus_id,
            self.device,
            self.model_name,
            self.hostname,
        ]


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
            correctable, uncorrectable, _pending, failure = remapped
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
