"""NVML (nvidia-ml-py) as the GPU backend when DCGM is not there."""

from __future__ import annotations

import itertools

from exporter.collectors.xid import XidCounts
from exporter.nvml_api import GpuIdentity, GpuReading, Nvml


class NvmlSource:
    backend = "nvml"

    def __init__(self, nvml: Nvml, xid_counts: XidCounts | None = None) -> None:
        self.nvml = nvml
        self.xid_counts = xid_counts
        self.extra_labels: dict[str, str] = {}
        self.identities = [nvml.identity(i) for i in range(nvml.count)]
        self.mig = [(m, nvml.mig_identity(m, self.identities[m.parent])) for m in nvml.mig_devices]
        self._last: list[tuple[GpuIdentity, GpuReading]] = []
        self._pairs: list[tuple[int, int, int | None, bool]] | None = None

    def read(self) -> list[tuple[GpuIdentity, GpuReading]]:
        """Every physical GPU, then every MIG device (devices of their own, as in dcgm-exporter)."""
        last_xid = self.xid_counts.last_per_gpu() if self.xid_counts else {}
        out = []
        for ident in self.identities:
            reading = self.nvml.reading(ident.index)
            reading.xid_last = last_xid.get(str(ident.index))
            out.append((ident, reading))
        lost = {ident.index for ident, reading in out if reading.lost}
        for mig, ident in self.mig:
            if mig.parent not in lost:
                out.append((ident, self.nvml.mig_reading(mig)))
        self._last = out
        return out

    def last(self) -> list[tuple[GpuIdentity, GpuReading]]:
        return self._last or self.read()

    def pairs(self) -> list[tuple[int, int, int | None, bool]]:
        if self._pairs is None:  # the topology does not change while the node runs
            self._pairs = [
                (a, b, self.nvml.common_ancestor(a, b), self.nvml.nvlink_connected(a, b))
                for a, b in itertools.combinations(range(self.nvml.count), 2)
            ]
        return self._pairs
