"""gpu_hardware_fault: a critical XID, a failed row remap, a GPU lost from the bus. The XID
catalog gives meaning and action; dcgm-exporter's sticky last-XID gauge counts only if it
appeared or changed inside the window (its value alone may be days old)."""

from __future__ import annotations

from diagnosis.checks import Context, labels_of, value
from diagnosis.findings import Evidence, Finding, Severity, affected, describe
from kvscope.xid_catalog import Bucket
from kvscope.xid_catalog import describe as xid_describe

_SEVERITY = {
    Bucket.DRAIN_NODE: Severity.CRITICAL,
    Bucket.RESET_GPU: Severity.CRITICAL,
    Bucket.APP: Severity.WARNING,
}
_ORDER = (Bucket.DRAIN_NODE, Bucket.RESET_GPU, Bucket.APP)


def check(ctx: Context) -> Finding | None:
    faults: list[tuple[dict, int | None, Evidence]] = []  # (labels, xid or None for remap, evidence)
    for view in ctx.gpus.values():
        for v in view.get("xid_increase", []):
            if v.value > 0 and v.labels.get("xid", "").isdigit():
                faults.append((v.labels, int(v.labels["xid"]), Evidence(v.query, v.value, 0, v.labels)))
        changed, last = value(view, "xid_changed"), value(view, "xid_last")
        if changed and last and not any(f[0].get("gpu") == labels_of(view).get("gpu") for f in faults):
            faults.append(
                (
                    labels_of(view),
                    int(last),
                    Evidence(view["xid_last"][0].query, last, None, labels_of(view)),
                )
            )
        if (value(view, "row_remap_failure") or 0) >= 1:
            faults.append(
                (
                    labels_of(view),
                    None,
                    Evidence(view["row_remap_failure"][0].query, 1.0, 0, labels_of(view)),
                )
            )
    faults = [f for f in faults if f[1] is None or xid_describe(f[1]).bucket is not Bucket.IGNORE]
    if not faults:
        return None

    def bucket(f: tuple) -> Bucket:
        return Bucket.RESET_GPU if f[1] is None else xid_describe(f[1]).bucket

    worst = min(faults, key=lambda f: _ORDER.index(bucket(f)))
    labels, code = worst[0], worst[1]
    if code is None:
        what, action = (
            "a row remap failed (uncorrectable memory)",
            "reset the GPU and contact support",
        )
    else:
        entry = xid_describe(code)
        what, action = f"XID {code} ({entry.meaning})", entry.action
    remediation = [f"{what}: {action}"]
    if bucket(worst) is Bucket.DRAIN_NODE:
        host = labels.get("Hostname", "<node>")
        remediation.append(
            f"take the node out first: kubectl cordon {host} && kubectl drain {host} "
            "--ignore-daemonsets; traffic moves to healthy replicas"
        )
    remediation.append("check the kernel log for the full XID line: dmesg -T | grep -i xid")
    gpus = {(f[0].get("Hostname"), f[0].get("gpu")) for f in faults}
    return Finding(
        id="gpu_hardware_fault",
        severity=_SEVERITY[bucket(worst)],
        confidence=0.95 if code is None or code in (48, 62, 64, 74, 79, 95, 119, 120, 140) else 0.8,
        summary=f"{describe(labels)}: {what}" + (f" (and {len(gpus) - 1} more GPU(s))" if len(gpus) > 1 else "") + ".",
        affected=[affected(f[0]) for f in faults],
        evidence=[f[2] for f in faults],
        remediation=remediation,
    )
