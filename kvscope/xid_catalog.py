"""NVIDIA's XID catalog: what each XID means, what to do, and the bucket alerts page by.

Used by the exporter (an info series per code), the alert rules (one alert per bucket) and
the diagnosis (meaning and action in the finding).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Bucket(StrEnum):
    APP = "app"  # the application faulted; restart it
    IGNORE = "ignore"  # recorded, no action
    RESET_GPU = "reset_gpu"  # drain the GPU and reset it
    DRAIN_NODE = "drain_node"  # reboot the host / take the node out


@dataclass(frozen=True)
class Xid:
    code: int
    meaning: str
    action: str
    bucket: Bucket


CATALOG: dict[int, Xid] = {
    x.code: x
    for x in (
        Xid(
            13,
            "graphics engine exception",
            "restart the application (usually an app bug)",
            Bucket.APP,
        ),
        Xid(
            31,
            "GPU memory page fault (MMU)",
            "restart the application; if repeated on one GPU, run diagnostics",
            Bucket.APP,
        ),
        Xid(43, "channel reset after an application fault", "none: the GPU is healthy", Bucket.APP),
        Xid(45, "preemptive cleanup", "follow the XIDs that come with it", Bucket.IGNORE),
        Xid(
            48,
            "double-bit ECC error",
            "reset the GPU (drain first when with XID 63/64)",
            Bucket.RESET_GPU,
        ),
        Xid(62, "internal micro-controller halt", "reset the GPU", Bucket.RESET_GPU),
        Xid(63, "row-remap / page retirement event", "none: recorded", Bucket.IGNORE),
        Xid(
            64,
            "row-remap / page retirement failure",
            "reset the GPU and contact support",
            Bucket.RESET_GPU,
        ),
        Xid(68, "video decoder error", "restart the application", Bucket.APP),
        Xid(
            74,
            "NVLink error",
            "reset the GPU or reboot; the peer GPU may be the faulty one",
            Bucket.DRAIN_NODE,
        ),
        Xid(
            79,
            "GPU has fallen off the bus",
            "drain the node, reboot the host, contact support",
            Bucket.DRAIN_NODE,
        ),
        Xid(92, "excessive single-bit ECC interrupts", "none", Bucket.IGNORE),
        Xid(
            94,
            "contained ECC error",
            "restart the application; reset the GPU when convenient",
            Bucket.APP,
        ),
        Xid(95, "uncontained ECC error", "reset the GPU", Bucket.RESET_GPU),
        Xid(119, "GSP RPC timeout", "reset the GPU; power-cycle if it persists", Bucket.RESET_GPU),
        Xid(120, "GSP error", "reset the GPU; power-cycle if it persists", Bucket.RESET_GPU),
        Xid(140, "unrecoverable ECC error escape", "reset the GPU", Bucket.RESET_GPU),
    )
}


def describe(code: int) -> Xid:
    """The catalog entry, or an 'unknown' one (treated as needing a GPU reset)."""
    return CATALOG.get(code) or Xid(
        code, "not in kvscope's catalog", "look it up in NVIDIA's XID catalog", Bucket.RESET_GPU
    )


def codes(bucket: Bucket) -> tuple[int, ...]:
    return tuple(sorted(c for c, x in CATALOG.items() if x.bucket is bucket))
