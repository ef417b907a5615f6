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
        self._last: list[tuple[GpuIdentity, GpuReading]] = []
        self._pairs: list[tuple[int, int, int | None, bool]] | None = None

    def read(self) -> list[tuple[GpuIdentity, GpuReading]]:
        last_xid = self.xid_counts.last_per_gpu() if self.xid_counts else {}
        out = []
        for ident in self.identities:
            reading = self.nvml.reading(ident.index)
            reading.xid_last = last_xid.get(str(ident.index))
            out.append((ident, reading))
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
