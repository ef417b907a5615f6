"""GPU health as dcgm-exporter serves it (catalog DCGM_EXP_HEALTH{health_watch, health_error_code}),
value 0 PASS, 10 WARN, 20 FAIL (DCGM's dcgmHealthResult), one series per GPU and watch.

Where the DCGM backend runs, DCGM's own passive health watches answer (dcgmHealthSet(ALL) once,
dcgmHealthCheck on each collection; exporter/collectors/dcgm.py). Elsewhere the same series is
derived from what NVML reads, with the watch names and DCGM_FR_* codes DCGM would give:

    watch    condition (NVML reading)                                   result  health_error_code
    PCIE     PCIe replays >= 8 per minute (DCGM's replay-rate threshold)  WARN    DCGM_FR_PCI_REPLAY_RATE
    PCIE     GPU lost (NVML GpuIsLost: fallen off the bus)                FAIL    DCGM_FR_NVML_API
    PCIE     XID 79 (fallen off the bus)                                  FAIL    DCGM_FR_XID_ERROR
    NVLINK   XID 74                                                       FAIL    DCGM_FR_XID_ERROR
    MCU      XID 62 (micro-controller halt), 119/120 (GSP)                FAIL    DCGM_FR_XID_ERROR
    MEM      volatile double-bit (uncorrectable) ECC errors > 0           FAIL    DCGM_FR_VOLATILE_DBE_DETECTED
    MEM      row-remap failure                                            FAIL    DCGM_FR_ROW_REMAP_FAILURE
    MEM      row remap pending (needs a GPU reset)                        WARN    DCGM_FR_PENDING_ROW_REMAP
    MEM      XID 48, 64, 95, 140                                          FAIL    DCGM_FR_XID_ERROR
    MEM      XID 94 (contained ECC error)                                 WARN    DCGM_FR_XID_ERROR
    THERMAL  clocks held by sw/hw thermal slowdown                        WARN    DCGM_FR_CLOCK_THROTTLE_THERMAL
    POWER    clocks held by hw slowdown or hw power brake                 WARN    DCGM_FR_CLOCK_THROTTLE_POWER
    DRIVER   an XID not in kvscope's catalog                              WARN    DCGM_FR_XID_ERROR

XIDs count for `XID_HEALTH_SECONDS` after their last occurrence. Application-level XIDs (13, 31,
43, 68) and the "ignore" ones (45, 63, 92) are not hardware health. A watch is served only when
NVML read something it judges by (XID watches: when XIDs are watched at all), so a PASS is never
invented: PMU, SM and INFOROM have nothing NVML reads and are left out. Healthy watches read
PASS with health_error_code "DCGM_FR_OK", as in dcgm-exporter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric

from exporter.collectors import GpuSource
from exporter.collectors.xid import XidCounts
from exporter.gpu_series import DeviceFamilies, Served
from exporter.nvml_api import GpuIdentity, GpuReading
from kvscope import catalog
from kvscope.xid_catalog import CATALOG

PASS, WARN, FAIL = (catalog.DCGM_HEALTH_RESULT[k] for k in ("pass", "warn", "fail"))
OK = "DCGM_FR_OK"
# dcgm-exporter's watches (gpu_health_collector.go), in its order
WATCHES = ("PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER")
REPLAYS_PER_MINUTE = 8.0
XID_HEALTH_SECONDS = 3600.0
_THERMAL_BITS, _POWER_BITS = 0x20 | 0x40, 0x8 | 0x80
XID_WATCH: dict[int, tuple[str, int]] = {
    79: ("PCIE", FAIL),
    74: ("NVLINK", FAIL),
    62: ("MCU", FAIL),
    119: ("MCU", FAIL),
    120: ("MCU", FAIL),
    48: ("MEM", FAIL),
    64: ("MEM", FAIL),
    95: ("MEM", FAIL),
    140: ("MEM", FAIL),
    94: ("MEM", WARN),
}
_NOT_HEALTH = {13, 31, 43, 68, 45, 63, 92}


@dataclass(frozen=True)
class Health:
    watch: str
    result: int
    code: str


def derive(
    reading: GpuReading,
    xids: Iterable[int] = (),
    *,
    xids_watched: bool = True,
    replays_per_minute: float | None = None,
) -> list[Health]:
    """The health watches NVML's readings can judge (module docstring): worst result per watch."""
    judged: dict[str, Health] = {}

    def saw(watch: str, result: int = PASS, code: str = OK) -> None:
        current = judged.get(watch)
        if current is None or result > current.result:
            judged[watch] = Health(watch, result, code)

    if xids_watched:
        for watch in ("PCIE", "NVLINK", "MCU", "MEM", "DRIVER"):
            saw(watch)
        for code in xids:
            if code in XID_WATCH:
                watch, result = XID_WATCH[code]
                saw(watch, result, "DCGM_FR_XID_ERROR")
            elif code not in CATALOG and code not in _NOT_HEALTH:
                saw("DRIVER", WARN, "DCGM_FR_XID_ERROR")
    if reading.lost:
        saw("PCIE", FAIL, "DCGM_FR_NVML_API")
        return [judged[w] for w in WATCHES if w in judged]
    if replays_per_minute is not None:
        saw("PCIE", WARN if replays_per_minute >= REPLAYS_PER_MINUTE else PASS, "DCGM_FR_PCI_REPLAY_RATE")
    if reading.ecc_dbe is not None:
        saw("MEM", FAIL if reading.ecc_dbe > 0 else PASS, "DCGM_FR_VOLATILE_DBE_DETECTED")
    if reading.remap_failure is not None:
        saw("MEM", FAIL if reading.remap_failure else PASS, "DCGM_FR_ROW_REMAP_FAILURE")
    if reading.remap_pending is not None:
        saw("MEM", WARN if reading.remap_pending else PASS, "DCGM_FR_PENDING_ROW_REMAP")
    if reading.clock_event_reasons is not None:
        reasons = reading.clock_event_reasons
        saw("THERMAL", WARN if reasons & _THERMAL_BITS else PASS, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
        saw("POWER", WARN if reasons & _POWER_BITS else PASS, "DCGM_FR_CLOCK_THROTTLE_POWER")
    return [Health(h.watch, h.result, h.code if h.result else OK) for w in WATCHES if (h := judged.get(w))]


class HealthCollector:
    """The health series (catalog DCGM_EXP_HEALTH) per physical GPU: DCGM's health check where the source has one
    (`source.health()`), NVML-derived otherwise. Reuses the GPU collector's readings."""

    name = "health"

    def __init__(
        self,
        source: GpuSource,
        counts: XidCounts | None = None,
        *,
        xids_watched: bool = True,
        host_label: str = catalog.DCGM_HOST_LABELS[0],
        served: Callable[[], Served] | None = None,
        clock: Callable[[], float] | None = None,
        shape: str = catalog.DCGM_SHAPES[0],
    ) -> None:
        self.source, self.counts, self.xids_watched = source, counts, xids_watched and counts is not None
        self.host_label, self.served, self.shape = host_label, served or dict, shape
        self.clock = clock or time.monotonic
        self._replays: dict[int, tuple[float, float]] = {}

    def collect(self) -> Iterable[Metric]:
        families = DeviceFamilies(self.host_label, self.source.extra_labels, self.served(), self.shape)
        gpus = [(i, r) for i, r in self.source.last() if not i.is_mig]
        checked = getattr(self.source, "health", None)
        from_dcgm = checked() if callable(checked) else None
        for identity, reading in gpus:
            if from_dcgm is not None:
                found = from_dcgm.get(identity.index, [])
            else:
                found = derive(
                    reading,
                    self._xids(identity),
                    xids_watched=self.xids_watched,
                    replays_per_minute=self._replay_rate(identity, reading),
                )
            for h in found:
                families.add(
                    catalog.DCGM_EXP_HEALTH,
                    identity,
                    h.result,
                    ("health_watch", h.watch),
                    ("health_error_code", h.code),
                )
        yield from families.metrics()

    def _xids(self, identity: GpuIdentity) -> list[int]:
        if self.counts is None:
            return []
        gpu = str(identity.index)
        return [xid for g, _uuid, xid in self.counts.recent(XID_HEALTH_SECONDS) if g == gpu]

    def _replay_rate(self, identity: GpuIdentity, reading: GpuReading) -> float | None:
        if reading.pcie_replays is None:
            return None
        now, before = self.clock(), self._replays.get(identity.index)
        self._replays[identity.index] = (now, reading.pcie_replays)
        if before is None or now <= before[0]:
            return None
        return max(0.0, reading.pcie_replays - before[1]) / (now - before[0]) * 60.0


def health_by_gpu(rows: Iterable[tuple[int, Health]]) -> Mapping[int, list[Health]]:
    out: dict[int, list[Health]] = {}
    for gpu, h in rows:
        out.setdefault(gpu, []).append(h)
    return out
