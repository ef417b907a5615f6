"""Fake DCGM Python bindings (pydcgm, dcgm_fields, dcgm_structs, dcgm_agent, dcgm_errors): the
hardware seam for the DCGM backend, shaped like NVIDIA's bindings' read path, health watches
(group.health.Set/Check -> dcgmHealthResponse: incidentCount, incidents[].system/health/error.code/
entityInfo) and dcgmGetDeviceTopology (gpuPaths[].gpuId/path bitmask)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kvscope import catalog

# Field ids as in dcgm_fields.h (a subset: what this fake DCGM "knows").
FIELD_IDS = {
    catalog.DCGM_SM_CLOCK.name: 100,
    catalog.DCGM_GPU_TEMP.name: 150,
    catalog.DCGM_POWER_USAGE.name: 155,
    catalog.DCGM_GPU_UTIL.name: 203,
    catalog.DCGM_FB_FREE.name: 251,
    catalog.DCGM_FB_USED.name: 252,
    catalog.DCGM_CLOCK_EVENT_REASONS.name: 112,
    catalog.DCGM_PCIE_LINK_GEN.name: 237,
    catalog.DCGM_PCIE_LINK_WIDTH.name: 238,
}
DCGM_FE_GPU = 1
# dcgm_structs.h health watch bits and results; dcgm_errors.h codes (a subset)
HEALTH_WATCH = {"PCIE": 0x1, "NVLINK": 0x2, "PMU": 0x4, "MCU": 0x8, "MEM": 0x10, "SM": 0x20, "INFOROM": 0x40,
                "THERMAL": 0x80, "POWER": 0x100, "DRIVER": 0x200}  # fmt: skip
ERRORS = {"DCGM_FR_OK": 0, "DCGM_FR_PCI_REPLAY_RATE": 3, "DCGM_FR_VOLATILE_DBE_DETECTED": 4, "DCGM_FR_XID_ERROR": 43}
TOPOLOGY_NVLINK1, TOPOLOGY_SYSTEM, TOPOLOGY_SINGLE = 0x100, 0x20, 0x2


def incident(gpu: int, watch: str, health: int, code: str) -> SimpleNamespace:
    return SimpleNamespace(
        system=HEALTH_WATCH[watch],
        health=health,
        error=SimpleNamespace(code=ERRORS[code], msg=code),
        entityInfo=SimpleNamespace(entityGroupId=DCGM_FE_GPU, entityId=gpu),
    )


def value(v: float | None) -> SimpleNamespace:
    return SimpleNamespace(value=v, isBlank=v is None)


def bindings(
    latest: dict[int, dict[int, float | None]],
    fail: str | None = None,
    incidents: list[SimpleNamespace] | None = None,
    topology: dict[tuple[int, int], int] | None = None,
) -> dict[str, Any]:
    """Modules for DcgmSource: GPU id -> field id -> latest value (None = blank); health
    `incidents` (None: no health watches in these bindings); `topology` (a, b) -> path bits
    (None: bindings without dcgmGetDeviceTopology)."""
    watched: dict[str, Any] = {}

    def health_set(systems: int) -> None:
        if incidents is None:
            raise RuntimeError("DCGM_ST_NOT_SUPPORTED")
        watched["health"] = systems

    health = SimpleNamespace(
        Set=health_set,
        Check=lambda: SimpleNamespace(incidentCount=len(incidents or []), incidents=list(incidents or [])),
    )

    class DcgmHandle:
        def __init__(self, ipAddress: str) -> None:  # noqa: N803
            if fail:
                raise RuntimeError(fail)
            self.handle = 7

        def GetSystem(self) -> Any:  # noqa: N802
            group = SimpleNamespace(
                health=health,
                GetGpuIds=lambda: sorted(latest),
                samples=SimpleNamespace(
                    WatchFields=lambda fg, freq, age, samples: watched.update(fields=fg.ids, freq=freq),
                    GetLatest_v2=lambda fg: SimpleNamespace(
                        values={
                            DCGM_FE_GPU: {g: {f: [value(v)] for f, v in fields.items()} for g, fields in latest.items()}
                        }
                    ),
                ),
            )
            return SimpleNamespace(GetDefaultGroup=lambda: group)

    class DcgmFieldGroup:
        def __init__(self, handle: Any, name: str, fieldIds: list[int]) -> None:  # noqa: N803
            self.ids = fieldIds

    fields = SimpleNamespace(DCGM_FE_GPU=DCGM_FE_GPU, **FIELD_IDS)
    agent = SimpleNamespace(
        dcgmGetDeviceAttributes=lambda handle, gpu: SimpleNamespace(
            identifiers=SimpleNamespace(
                uuid=f"GPU-dcgm-{gpu}",
                pciBusId=f"00000000:{gpu:02X}:00.0",
                deviceName="NVIDIA H200",
            )
        )
    )
    if topology is not None:

        def device_topology(handle: int, gpu: int) -> SimpleNamespace:
            paths = [
                SimpleNamespace(gpuId=b if a == gpu else a, path=bits)
                for (a, b), bits in topology.items()
                if gpu in (a, b)
            ]
            return SimpleNamespace(numGpus=len(paths), gpuPaths=paths)

        agent.dcgmGetDeviceTopology = device_topology
    structs = SimpleNamespace(
        DCGM_HEALTH_WATCH_ALL=0xFFFFFFFF, **{f"DCGM_HEALTH_WATCH_{k}": v for k, v in HEALTH_WATCH.items()}
    )
    return {
        "pydcgm": SimpleNamespace(DcgmHandle=DcgmHandle, DcgmFieldGroup=DcgmFieldGroup),
        "dcgm_fields": fields,
        "dcgm_structs": structs,
        "dcgm_agent": agent,
        "dcgm_errors": SimpleNamespace(**ERRORS),
        "_watched": watched,
    }
