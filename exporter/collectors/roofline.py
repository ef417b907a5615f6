"""The roofline of each GPU (peak dense tensor FLOP/s and memory bandwidth, from the GPU model
table), so dashboards can put vLLM's MFU estimates (`--enable-mfu-metrics`) against it on the
same page: the engine's series and these share the exporter's `instance`."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from exporter.collectors import GpuSource
from exporter.exposition import Series
from kvscope import catalog
from kvscope.gpu_models import GpuModels


class RooflineCollector:
    name = "roofline"

    def __init__(self, source: GpuSource, models: GpuModels) -> None:
        self.source, self.models = source, models

    def collect(self) -> Iterable[Metric]:
        extra = self.source.extra_labels
        flops = Series(catalog.GPU_PEAK_FLOPS, (*catalog.GPU_PEAK_FLOPS.labels, *extra))
        bandwidth = Series(catalog.GPU_MEMORY_BANDWIDTH, (*catalog.GPU_MEMORY_BANDWIDTH.labels, *extra))
        for identity, reading in self.source.last():
            model = self.models.lookup(identity.model_name)
            if reading.lost or model is None or getattr(identity, "is_mig", False):
                continue  # a MIG slice has a share of the roofline that its profile, not the table, says
            labels = (str(identity.index), identity.uuid, *extra.values())
            if model.peak_tflops:
                flops.add(labels, model.peak_tflops * 1e12)
            if model.memory_gbps:
                bandwidth.add(labels, model.memory_gbps * 1e9)
        yield from (s.metric for s in (flops, bandwidth) if s)
