"""The DCGM-named GPU series of whichever backend is in use."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from exporter.collectors import GpuSource
from exporter.exposition import Series
from exporter.gpu_series import Served, gpu_families
from kvscope import catalog


class GpuCollector:
    """`host_label`: the host label's spelling ("" leaves it out). `served`: what an ingested
    dcgm-exporter already serves, asked on each collection (its devices' series are its own)."""

    def __init__(
        self,
        source: GpuSource,
        host_label: str = catalog.DCGM_HOST_LABELS[0],
        served: Callable[[], Served] | None = None,
        shape: str = catalog.DCGM_SHAPES[0],
    ) -> None:
        self.source = source
        self.name = source.backend
        self.host_label = host_label
        self.served = served or dict
        self.shape = shape

    def collect(self) -> Iterable[Metric]:
        yield from gpu_families(
            self.source.read(), self.source.extra_labels, self.host_label, self.served(), self.shape
        )
        info = Series(catalog.GPU_BACKEND_INFO)
        info.add((self.source.backend,), 1.0)
        yield info.metric
