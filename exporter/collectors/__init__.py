"""One collector per source (the node_exporter pattern): each has a `name` and a `collect()`
yielding prometheus_client metric families. The exporter times each one and a failure costs
only that collector's series."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import Metric

from exporter.nvml_api import GpuIdentity, GpuReading


class Collector(Protocol):
    name: str

    def collect(self) -> Iterable[Metric]: ...


class GpuSource(Protocol):
    """A GPU backend (NVML, DCGM, emulated): readings under one shape for every backend."""

    backend: str
    extra_labels: dict[str, str]

    def read(self) -> list[tuple[GpuIdentity, GpuReading]]:
        """Fresh readings of every GPU (called once per collection)."""
        ...

    def last(self) -> list[tuple[GpuIdentity, GpuReading]]:
        """The readings of the latest collection (processes, topology reuse them)."""
        ...

    def pairs(self) -> list[tuple[int, int, int | None, bool]]:
        """(gpu a, gpu b, NVML common-ancestor level, NVLink connected) for each pair."""
        ...
