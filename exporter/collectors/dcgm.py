"""DCGM through its Python bindings, when they can be imported.

The bindings ship with datacenter-gpu-manager as plain files, not on PyPI; the folder is
configurable (`--dcgm-bindings`), with the usual install locations tried otherwise. Every
DCGM field in kvscope's catalog that the installed DCGM knows is watched (field ids come from
the bindings by name, never typed here), and read into the same readings the NVML backend
produces, so the series are identical whichever backend runs.
"""

from __future__ import annotations

import importlib
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from exporter.gpu_series import READING_SERIES
from exporter.nvml_api import GpuIdentity, GpuReading

_INT_FIELDS = {"clock_event_reasons", "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width"}
BINDING_DIRS = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",
    "/usr/local/dcgm/bindings/python3",
)


class DcgmUnavailable(RuntimeError):  # noqa: N818 - a state of the machine
    """The bindings or the host engine are not there."""


def load_bindings(path: str | None = None) -> dict[str, ModuleType]:
    """Import pydcgm, dcgm_fields, dcgm_structs and dcgm_agent from `path` or the usual places."""
    candidates = [path] if path else [d for d in BINDING_DIRS if Path(d).is_dir()]
    for folder in candidates:
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        return {name: importlib.import_module(name) for name in ("pydcgm", "dcgm_fields", "dcgm_structs", "dcgm_agent")}
    except ImportError as exc:
        where = path or " or ".join(BINDING_DIRS)
        raise DcgmUnavailable(f"DCGM Python bindings not found in {where}: {exc}") from exc


class DcgmSource:
    backend = "dcgm"

    def __init__(
        self,
        modules: dict[str, ModuleType] | None = None,
        *,
        bindings_path: str | None = None,
        host: str = "localhost",
        update_seconds: float = 1.0,
    ) -> None:
        m = modules or load_bindings(bindings_path)
        self.pydcgm, self.fields, self.structs, self.agent = (
            m["pydcgm"],
            m["dcgm_fields"],
            m["dcgm_structs"],
            m["dcgm_agent"],
        )
        self.extra_labels: dict[str, str] = {}
        try:
            self.handle = self.pydcgm.DcgmHandle(ipAddress=host)
            self.group = self.handle.GetSystem().GetDefaultGroup()
        except Exception as exc:  # dcgmExceptionClass: library missing, host engine down
            raise DcgmUnavailable(f"DCGM unavailable: {exc}") from exc
        # attribute of GpuReading -> DCGM field id, for the fields this DCGM knows
        self.field_of = {
            attr: getattr(self.fields, signal.name)
            for attr, signal in READING_SERIES
            if hasattr(self.fields, signal.name)
        }
        self.field_group = self.pydcgm.DcgmFieldGroup(
            self.handle, name="kvscope", fieldIds=list(self.field_of.values())
        )
        self.group.samples.WatchFields(self.field_group, int(update_seconds * 1_000_000), 3600.0, 0)
        self.gpu_ids = list(self.group.GetGpuIds())
        self.identities = [self._identity(i, g) for i, g in enumerate(self.gpu_ids)]
        self._last: list[tuple[GpuIdentity, GpuReading]] = []

    def _identity(self, index: int, gpu_id: int) -> GpuIdentity:
        attributes = self.agent.dcgmGetDeviceAttributes(self.handle.handle, gpu_id)
        ids = attributes.identifiers
        return GpuIdentity(
            index=gpu_id,
            uuid=_text(ids.uuid),
            pci_bus_id=_text(ids.pciBusId),
            model_name=_text(ids.deviceName),
            hostname=socket.gethostname(),
        )

    def read(self) -> list[tuple[GpuIdentity, GpuReading]]:
        values = self.group.samples.GetLatest_v2(self.field_group).values
        per_gpu = values.get(self.fields.DCGM_FE_GPU, {})
        out = []
        for identity, gpu_id in zip(self.identities, self.gpu_ids, strict=True):
            reading, fields = GpuReading(), per_gpu.get(gpu_id, {})
            for attr, field_id in self.field_of.items():
                series = fields.get(field_id)
                value = series[0] if series else None
                if value is not None and not getattr(value, "isBlank", False):
                    number = value.value
                    setattr(reading, attr, int(number) if attr in _INT_FIELDS else float(number))
            out.append((identity, reading))
        self._last = out
        return out

    def last(self) -> list[tuple[GpuIdentity, GpuReading]]:
        return self._last or self.read()

    def pairs(self) -> list[tuple[int, int, int | None, bool]]:
        return []  # DCGM's topology API is not mapped yet; the NVML backend provides it


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
