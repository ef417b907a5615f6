"""GPU readings as metric families: dcgm-exporter's names and labels whatever the backend
(NVML, DCGM, emulated), plus kvscope's extras where DCGM has no name (decoded clock-event
reasons, PCIe link capacity, NUMA node)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.core import Metric

from exporter.exposition import Series
from exporter.nvml_api import CLOCK_EVENT_REASONS, GpuIdentity, GpuReading
from kvscope import catalog
from kvscope.catalog import Signal
from kvscope.gpu_models import pcie_capacity
from kvscope.xid_catalog import describe

# GpuReading attribute -> the dcgm-exporter series it is served as.
READING_SERIES: tuple[tuple[str, Signal], ...] = (
    ("gpu_util", catalog.DCGM_GPU_UTIL),
    ("mem_copy_util", catalog.DCGM_MEM_COPY_UTIL),
    ("enc_util", catalog.DCGM_ENC_UTIL),
    ("dec_util", catalog.DCGM_DEC_UTIL),
    ("fb_used_mib", catalog.DCGM_FB_USED),
    ("fb_free_mib", catalog.DCGM_FB_FREE),
    ("fb_reserved_mib", catalog.DCGM_FB_RESERVED),
    ("gpu_temp", catalog.DCGM_GPU_TEMP),
    ("memory_temp", catalog.DCGM_MEMORY_TEMP),
    ("slowdown_temp", catalog.DCGM_SLOWDOWN_TEMP),
    ("power_w", catalog.DCGM_POWER_USAGE),
    ("power_limit_w", catalog.DCGM_POWER_LIMIT),
    ("energy_mj", catalog.DCGM_TOTAL_ENERGY),
    ("sm_clock", catalog.DCGM_SM_CLOCK),
    ("mem_clock", catalog.DCGM_MEM_CLOCK),
    ("app_sm_clock", catalog.DCGM_APP_SM_CLOCK),
    ("max_sm_clock", catalog.DCGM_MAX_SM_CLOCK),
    ("clock_event_reasons", catalog.DCGM_CLOCK_EVENT_REASONS),
    ("pcie_tx_bytes", catalog.DCGM_PCIE_TX_BYTES),
    ("pcie_rx_bytes", catalog.DCGM_PCIE_RX_BYTES),
    ("pcie_gen", catalog.DCGM_PCIE_LINK_GEN),
    ("pcie_width", catalog.DCGM_PCIE_LINK_WIDTH),
    ("pcie_max_gen", catalog.DCGM_PCIE_MAX_LINK_GEN),
    ("pcie_max_width", catalog.DCGM_PCIE_MAX_LINK_WIDTH),
    ("pcie_replays", catalog.DCGM_PCIE_REPLAY),
    ("ecc_sbe", catalog.DCGM_ECC_SBE_TOTAL),
    ("ecc_dbe", catalog.DCGM_ECC_DBE_TOTAL),
    ("remapped_correctable", catalog.DCGM_CORRECTABLE_REMAPPED_ROWS),
    ("remapped_uncorrectable", catalog.DCGM_UNCORRECTABLE_REMAPPED_ROWS),
    ("remap_failure", catalog.DCGM_ROW_REMAP_FAILURE),
    ("dram_active", catalog.DCGM_DRAM_ACTIVE),
    ("tensor_active", catalog.DCGM_TENSOR_ACTIVE),
    ("nvlink_bytes", catalog.DCGM_NVLINK_BANDWIDTH),
)

_GPU = ("gpu", "UUID")
# What another source (an ingested dcgm-exporter) already serves: series name -> device keys
# (UUID, GPU_I_ID or ""). Those devices' samples of that series are left to it.
Served = Mapping[str, set[tuple[str, str]]]


class DeviceFamilies:
    """Families whose label names depend on the device (MIG devices add GPU_I_PROFILE and
    GPU_I_ID) and on the host-label spelling: one Series per (name, label names); the renderer
    serves same-named families as one block."""

    def __init__(
        self,
        host_label: str,
        extra: Mapping[str, str] | None = None,
        served: Served | None = None,
        shape: str = catalog.DCGM_SHAPES[0],
    ) -> None:
        self.host_label = host_label
        self.extra = dict(extra or {})
        self.served = served or {}
        self.shape = shape  # whose field names: dcgm-exporter 4.8's (the default), 4.9's or 4.10's
        self._series: dict[tuple[str, tuple[str, ...]], Series] = {}

    def add(self, signal: Signal, identity: GpuIdentity, value: float | None, *more: tuple[str, object]) -> None:
        """A sample of `signal` for `identity`, with `more` (name, value) labels after the
        DCGM ones (err_code, health_watch, ...) and the extra labels last."""
        if identity.key in self.served.get(signal.name, ()):
            return  # the other source has this device's series: never the same series twice
        names, values = identity.dcgm_label_pairs(self.host_label)
        names = (*names, *(k for k, _ in more), *self.extra)
        values = (*values, *(str(v) for _, v in more), *self.extra.values())
        written, factor = catalog.dcgm_shape(signal.name, self.shape)
        if written != signal.name:
            unit = next((r.unit for r in signal.rescaled if r.name == written), signal.unit)
            signal = dataclasses.replace(signal, name=written, unit=unit, aliases=(), rescaled=())
            value = None if value is None else value * factor
        series = self._series.get((signal.name, names))
        if series is None:
            series = self._series[(signal.name, names)] = Series(signal, names)
        series.add(values, value)

    def metrics(self) -> Iterable[Metric]:
        return [s.metric for s in self._series.values() if s]


def gpu_families(
    gpus: Sequence[tuple[GpuIdentity, GpuReading]],
    extra: Mapping[str, str] | None = None,
    host_label: str = catalog.DCGM_HOST_LABELS[0],
    served: Served | None = None,
    shape: str = catalog.DCGM_SHAPES[0],
) -> Iterable[Metric]:
    """Families for every GPU that answered; a lost GPU yields nothing (it fell off the bus).
    MIG devices carry GPU_I_PROFILE/GPU_I_ID; kvscope's per-GPU extras are served for whole
    GPUs only (their labels have no MIG instance)."""
    extra = dict(extra or {})
    extra_names, extra_values = tuple(extra), tuple(extra.values())
    dcgm = DeviceFamilies(host_label, extra, served, shape)
    reasons = Series(catalog.GPU_CLOCK_EVENT_ACTIVE, (*_GPU, "reason", *extra_names))
    capacity = Series(catalog.GPU_PCIE_LINK_CAPACITY, (*_GPU, *extra_names))
    max_capacity = Series(catalog.GPU_PCIE_LINK_MAX_CAPACITY, (*_GPU, *extra_names))
    numa = Series(catalog.GPU_NUMA_NODE, (*_GPU, *extra_names))
    for identity, reading in gpus:
        if reading.lost:
            continue
        for attr, signal in READING_SERIES:
            dcgm.add(signal, identity, getattr(reading, attr))
        if reading.xid_last is not None:
            code = reading.xid_last
            meaning = describe(code).meaning
            dcgm.add(catalog.DCGM_XID_ERRORS, identity, code, ("err_code", code), ("err_msg", meaning))
        if identity.is_mig:
            continue
        short = (str(identity.index), identity.uuid)
        if reading.clock_event_reasons is not None:
            for bit, name in CLOCK_EVENT_REASONS.items():
                reasons.add((*short, name, *extra_values), 1.0 if reading.clock_event_reasons & bit else 0.0)
        capacity.add((*short, *extra_values), pcie_capacity(reading.pcie_gen, reading.pcie_width))
        max_capacity.add((*short, *extra_values), pcie_capacity(reading.pcie_max_gen, reading.pcie_max_width))
        numa.add((*short, *extra_values), identity.numa_node)
    yield from dcgm.metrics()
    for s in (reasons, capacity, max_capacity, numa):
        if s:
            yield s.metric
