"""Which process runs on which GPU, as an info series joinable in PromQL on gpu or pid, and
which vLLM engine each belongs to (workers of one engine share the engine's pid)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import psutil
from prometheus_client.core import Metric

from exporter.collectors import GpuSource
from exporter.exposition import Series
from kvscope import catalog

_ENGINE_MARKERS = ("vllm", "kvscope serve", "kvscope.cli serve")


@lru_cache(maxsize=4096)
def _describe(pid: int) -> tuple[str, str]:
    """(process name, engine pid) — the engine is the top-most ancestor running vLLM."""
    try:
        process = psutil.Process(pid)
        name = process.name()
        engine = ""
        for candidate in [process, *process.parents()]:
            cmdline = " ".join(candidate.cmdline()).lower()
            if any(marker in cmdline for marker in _ENGINE_MARKERS):
                engine = str(candidate.pid)
        return name, engine
    except (psutil.Error, OSError):
        return "", ""  # another PID namespace (a container) or already gone


def engine_of(pid: int) -> str:
    return _describe(pid)[1]


class ProcessCollector:
    name = "process"

    def __init__(self, source: GpuSource) -> None:
        self.source = source

    def collect(self) -> Iterable[Metric]:
        extra = self.source.extra_labels
        info = Series(catalog.GPU_PROCESS_INFO, (*catalog.GPU_PROCESS_INFO.labels, *extra))
        memory = Series(catalog.GPU_PROCESS_MEMORY, (*catalog.GPU_PROCESS_MEMORY.labels, *extra))
        for ident, reading in self.source.last():
            for pid, used in reading.processes:
                name, engine = _describe(pid)
                gpu = (str(ident.index), ident.uuid, str(pid))
                info.add((*gpu, name, engine, *extra.values()), 1.0)
                memory.add((*gpu, *extra.values()), used)
        yield from (s.metric for s in (info, memory) if s)
