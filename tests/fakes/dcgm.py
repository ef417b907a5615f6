"""Fake DCGM Python bindings (pydcgm, dcgm_fields, dcgm_structs, dcgm_agent): the hardware
seam for the DCGM backend, shaped like NVIDIA's bindings' read path."""

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


def value(v: float | None) -> SimpleNamespace:
    return SimpleNamespace(value=v, isBlank=v is None)


def bindings(latest: dict[int, dict[int, float | None]], fail: str | None = None) -> dict[str, Any]:
    """Modules for DcgmSource: GPU id -> field id -> latest value (None = blank)."""
    watched: dict[str, Any] = {}

    class DcgmHandle:
        def __init__(self, ipAddress: str) -> None:  # noqa: N803
            if fail:
                raise RuntimeError(fail)
            self.handle = 7

        def GetSystem(self) -> Any:  # noqa: N802
            group = SimpleNamespace(
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
    return {
        "pydcgm": SimpleNamespace(DcgmHandle=DcgmHandle, DcgmFieldGroup=DcgmFieldGroup),
        "dcgm_fields": fields,
        "dcgm_structs": SimpleNamespace(),
        "dcgm_agent": agent,
        "_watched": watched,
    }
