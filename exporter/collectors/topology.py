"""GPU topology: per GPU pair the common ancestor (NVLink, PCIe switch, host bridge, NUMA
node, system), and whether one engine's GPUs span NUMA nodes (seed 004 section 4.2: tensor
parallelism across sockets ran 3.8x slower than within one)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from prometheus_client.core import Metric

from exporter.collectors import GpuSource
from exporter.collectors.process import engine_of
from exporter.exposition import Series
from exporter.nvml_api import TOPOLOGY_LEVELS
from kvscope import catalog

NVLINK = "nvlink"


class TopologyCollector:
    name = "topology"

    def __init__(self, source: GpuSource) -> None:
        self.source = source

    def collect(self) -> Iterable[Metric]:
        extra = self.source.extra_labels
        level = Series(catalog.GPU_TOPOLOGY_LEVEL, (*catalog.GPU_TOPOLOGY_LEVEL.labels, *extra))
        for a, b, ancestor, nvlink in self.source.pairs():
            name = NVLINK if nvlink else TOPOLOGY_LEVELS.get(ancestor or -1, "unknown")
            value = 0 if nvlink else ancestor
            level.add((a, b, name, *extra.values()), value)
            level.add((b, a, name, *extra.values()), value)
        yield from ([level.metric] if level else [])
        yield from self._engine_spans()

    def _engine_spans(self) -> Iterable[Metric]:
        numa = {ident.index: ident.numa_node for ident, _ in self.source.last()}
        gpus_of: dict[str, set[int]] = defaultdict(set)
        for ident, reading in self.source.last():
            for pid, _ in reading.processes:
                engine = engine_of(pid)
                if engine:
                    gpus_of[engine].add(ident.index)
        span = Series(
            catalog.GPU_ENGINE_NUMA_NODES,
            (*catalog.GPU_ENGINE_NUMA_NODES.labels, *self.source.extra_labels),
        )
        for engine, gpus in gpus_of.items():
            nodes = {numa[g] for g in gpus if numa.get(g) is not None}
            if nodes:
                gpu_list = ",".join(str(g) for g in sorted(gpus))
                span.add((engine, gpu_list, *self.source.extra_labels.values()), len(nodes))
        yield from ([span.metric] if span else [])
