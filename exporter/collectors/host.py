"""Host memory (KV offload to CPU memory needs it) and load."""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil
from prometheus_client.core import Metric

from exporter.exposition import Series
from kvscope import catalog


class HostCollector:
    name = "host"

    def collect(self) -> Iterable[Metric]:
        memory = psutil.virtual_memory()
        for signal, value in (
            (catalog.HOST_MEMORY_AVAILABLE, memory.available),
            (catalog.HOST_MEMORY_TOTAL, memory.total),
            (catalog.HOST_LOAD1, os.getloadavg()[0]),
            (catalog.HOST_CPUS, os.cpu_count() or 0),
        ):
            series = Series(signal)
            series.add((), value)
            yield series.metric
