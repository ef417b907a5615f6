"""DCGM through its Python bindings, when they can be imported.

The bindings ship with datacenter-gpu-manager as plain files, not on PyPI; the folder is
configurable (`--dcgm-bindings`), with the usual install locations tried otherwise. Every
DCGM field in kvscope's catalog that the installed DCGM knows is watched (field ids come from
the bindings by name, never typed here), and read into the same readings the NVML backend
produces, so the series are identical whichever backend runs.

Health: DCGM's passive health watches (dcgmHealthSet(ALL) at start, dcgmHealthCheck on each
collection) answer the health series (catalog DCGM_EXP_HEALTH), as in dcgm-exporter. Topology: DCGM's
dcgmGetDeviceTopology where the bindings have it, else NVML alongside (GPUs matched by UUID),
else none, with the reason logged once.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from exporter.collectors.health import OK, PASS, WATCHES, Health
from exporter.gpu_series import READING_SERIES
from exporter.nvml_api import GpuIdentity, GpuReading

log = logging.getLogger("kvscope.export.dcgm")
# dcgmGpuTopologyLevel_t bits (dcgm_structs.h) -> NVML common-ancestor levels; NVLink bits are
# everything from DCGM_TOPOLOGY_NVLINK1 (0x100) up.
_TOPOLOGY_PCI = ((0x1, 0), (0x2, 10), (0x4, 20), (0x8, 30), (0x10, 40), (0x20, 50))
_TOPOLOGY_NVLINK = ~0xFF

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
        modules = {
            name: importlib.import_module(name) for name in ("pydcgm", "dcgm_fields", "dcgm_structs", "dcgm_agent")
        }
    except ImportError as exc:
        where = path or " or ".join(BINDING_DIRS)
        raise DcgmUnavailable(f"DCGM Python bindings not found in {where}: {exc}") from exc
    with contextlib.suppress(ImportError):  # DCGM_FR_* names for health_error_code
        modules["dcgm_errors"] = importlib.import_module("dcgm_errors")
    return modules


class DcgmSource:
    backend = "dcgm"

    def __init__(
        self,
        modules: dict[str, ModuleType] | None = None,
        *,
        bindings_path: str | None = None,
        host: str = "localhost",
        update_seconds: float = 1.0,
        nvml: object | None = None,
    ) -> None:
        m = modules or load_bindings(bindings_path)
        self.errors_module = m.get("dcgm_errors")
        self.nvml = nvml  # an initialised exporter.nvml_api.Nvml, for topology when DCGM has none
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
        self._pairs: list[tuple[int, int, int | None, bool]] | None = None
        self.topology_reason = ""
        self.health_error = ""
        try:
            self.group.health.Set(self.structs.DCGM_HEALTH_WATCH_ALL)
        except Exception as exc:  # an old host engine or bindings without health watches
            self.health_error = f"DCGM health watches unavailable: {exc}"
            log.warning("%s; health is derived from the readings instead", self.health_error)

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

    # -- health ----------------------------------------------------------------------------
    def health(self) -> dict[int, list[Health]] | None:
        """DCGM's health check per GPU id: every watch dcgm-exporter serves, PASS unless an
        incident says otherwise (the worst incident of a watch wins). None: no health watches."""
        if self.health_error:
            return None
        response = self.group.health.Check()
        watch_of = {getattr(self.structs, f"DCGM_HEALTH_WATCH_{w}", None): w for w in WATCHES}
        out = {g: {w: Health(w, PASS, OK) for w in WATCHES} for g in self.gpu_ids}
        for incident in list(response.incidents)[: response.incidentCount]:
            entity = incident.entityInfo
            if entity.entityGroupId != self.fields.DCGM_FE_GPU or entity.entityId not in out:
                continue
            watch = watch_of.get(incident.system)
            if watch is None or int(incident.health) <= out[entity.entityId][watch].result:
                continue
            out[entity.entityId][watch] = Health(watch, int(incident.health), self._error_name(incident.error.code))
        return {g: list(by_watch.values()) for g, by_watch in out.items()}

    def _error_name(self, code: int) -> str:
        names = {v: k for k, v in vars(self.errors_module or object()).items() if k.startswith("DCGM_FR_")}
        return names.get(code, f"DCGM_FR_{code}")

    # -- topology --------------------------------------------------------------------------
    def pairs(self) -> list[tuple[int, int, int | None, bool]]:
        if self._pairs is None:  # the topology does not change while the node runs
            self._pairs = self._dcgm_pairs()
            if self._pairs is None:
                self._pairs = self._nvml_pairs()
            if self._pairs is None:
                self._pairs = []
                log.warning("GPU topology unavailable: %s", self.topology_reason)
        return self._pairs

    def _dcgm_pairs(self) -> list[tuple[int, int, int | None, bool]] | None:
        topology = getattr(self.agent, "dcgmGetDeviceTopology", None)
        if topology is None:
            self.topology_reason = "these DCGM bindings have no dcgmGetDeviceTopology"
            return None
        pairs = {}
        try:
            for gpu in self.gpu_ids:
                found = topology(self.handle.handle, gpu)
                for path in list(found.gpuPaths)[: found.numGpus]:
                    a, b = sorted((gpu, int(path.gpuId)))
                    level = next((lvl for bit, lvl in _TOPOLOGY_PCI if path.path & bit), None)
                    pairs[(a, b)] = (a, b, level, bool(path.path & _TOPOLOGY_NVLINK))
        except Exception as exc:  # dcgmExceptionClass: not supported on this system
            self.topology_reason = f"dcgmGetDeviceTopology failed: {exc}"
            return None
        return [pairs[k] for k in sorted(pairs)]

    def _nvml_pairs(self) -> list[tuple[int, int, int | None, bool]] | None:
        nvml = self.nvml
        if nvml is None:
            self.topology_reason += "; and NVML is not available alongside"
            return None
        by_uuid = {nvml.identity(i).uuid: i for i in range(nvml.count)}  # type: ignore[attr-defined]
        index = {ident.index: by_uuid.get(ident.uuid) for ident in self.identities}
        if None in index.values():
            self.topology_reason += "; and NVML does not see the same GPUs"
            return None
        return [
            (a, b, nvml.common_ancestor(index[a], index[b]), nvml.nvlink_connected(index[a], index[b]))  # type: ignore[attr-defined]
            for a, b in itertools.combinations(sorted(index), 2)
        ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
