"""Faults an emulated GPU can be given (`POST /-/faults`, `kvscope export inject`).

{"gpu": 3, "fault": "xid", "xid": 79}
{"gpu": 0, "fault": "thermal", "temp_c": 94}
{"gpu": 1, "fault": "power_cap", "limit_w": 350}
{"gpu": 2, "fault": "pcie_degraded", "generation": 3, "width": 8}
{"gpu": 2, "fault": "pcie_saturated", "ratio": 0.95}
{"gpu": 0, "fault": "memory_leak", "mib_per_minute": 4000}
{"gpu": 0, "fault": "colocated_process", "mib": 12000}
{"gpu": 5, "fault": "row_remap_failure"}
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FaultName = Literal[
    "xid",
    "thermal",
    "power_cap",
    "pcie_degraded",
    "pcie_saturated",
    "memory_leak",
    "colocated_process",
    "row_remap_failure",
]

# The parameters each fault accepts (and needs, where it has no default).
PARAMETERS: dict[str, tuple[str, ...]] = {
    "xid": ("xid",),
    "thermal": ("temp_c",),
    "power_cap": ("limit_w",),
    "pcie_degraded": ("generation", "width"),
    "pcie_saturated": ("ratio",),
    "memory_leak": ("mib_per_minute",),
    "colocated_process": ("mib",),
    "row_remap_failure": (),
}


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: int = Field(ge=0)
    fault: FaultName
    xid: int | None = Field(None, ge=1, le=1000)
    temp_c: float = Field(94.0, ge=0, le=130)
    limit_w: float = Field(350.0, gt=0)
    generation: int = Field(3, ge=1, le=6)
    width: int = Field(8, ge=1, le=32)
    ratio: float = Field(0.95, gt=0, le=1.0)
    mib_per_minute: float = Field(4000.0, gt=0)
    mib: float = Field(12000.0, gt=0)

    @model_validator(mode="after")
    def _params_fit_the_fault(self) -> Fault:
        if self.fault == "xid" and self.xid is None:
            raise ValueError("fault 'xid' needs an 'xid' number, e.g. 79")
        given = {k for k in self.model_fields_set if k not in ("gpu", "fault")}
        foreign = given - set(PARAMETERS[self.fault])
        if foreign:
            takes = list(PARAMETERS[self.fault]) or "no parameters"
            raise ValueError(f"fault {self.fault!r} takes {takes}, not {sorted(foreign)}")
        return self

    def public(self) -> dict[str, object]:
        """The fault as clients gave it: gpu, fault and its own parameters."""
        keys = ("gpu", "fault", *PARAMETERS[self.fault])
        return {k: getattr(self, k) for k in keys}
