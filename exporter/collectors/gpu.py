"""The DCGM-named GPU series of whichever backend is in use."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from exporter.collectors import GpuSource
from exporter.exposition import Series
from exporter.gpu_series import gpu_families
from kvscope import catalog


class GpuCollector:
    def __init__(self, source: GpuSource) -> None:
        self.source = source
        self.name = source.backend

    def collect(self) -> Iterable[Metric]:
        yield from gpu_families(self.source.read(), self.source.extra_labels)
        info = Series(catalog.GPU_BACKEND_INFO)
        info.add((self.source.backend,), 1.0)
        yield info.metric
