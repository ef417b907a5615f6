"""gpu_hardware_fault: a critical XID, a failed row remap, a GPU lost from the bus. The XID
catalog gives meaning and action; dcgm-exporter's sticky last-XID gauge counts only if it
appeared or changed inside the window (its value alone may be days old), or, for an XID that
needs the GPU reset or the node drained, in the baseline window before it: nobody reset the GPU
since, so the fault is still there (wtdcode/vllm-backport#62: XID 48, then the engine hung). An XID the catalog
does not know is treated as needing a GPU reset, as the GPUXidResetRequired alert does."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, Value, View, labels_of, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope.xid_catalog import CATALOG, Bucket
from kvscope.xid_catalog import describe as xid_describe

_SEVERITY = {
    Bucket.DRAIN_NODE: Severity.CRITICAL,
    Bucket.RESET_GPU: Severity.CRITICAL,
    Bucket.APP: Severity.WARNING,
}
_RANK = {Bucket.APP: 1, Bucket.RESET_GPU: 2, Bucket.DRAIN_NODE: 3}
HEALTH_FAIL = 20.0  # dcgmHealthResult: 0 pass, 10 warn, 20 fail (go-dcgm)
_CERTAIN = (48, 62, 64, 74, 79, 95, 119, 120, 140)  # codes that are faults whatever the context


def _line(code: int) -> float:
    """The count past which an XID is evidence of a fault: any for the codes that are faults
    whatever the context (and those the catalog lacks), more than one for the others (XID 13 or
    31 once can be the application's own bug; again and again, the GPU's)."""
    return 0.0 if code in _CERTAIN or code not in CATALOG else 1.0


def _faults(view: View, before: Value | None = None) -> list[tuple[dict[str, str], int | None, Evidence]]:
    """(labels, XID or None for a failed row remap, evidence) for every fault on one GPU;
    `before`: the sticky gauge's change in the baseline window."""
    faults: list[tuple[dict[str, str], int | None, Evidence]] = []
    for name in ("xid_increase", "xid_window_max"):  # kvscope's counter; dcgm-exporter's windowed count
        for v in view.get(name, []):
            code = v.labels.get("xid", "")
            if v.value > 0 and code.isdigit() and all(f[1] != int(code) for f in faults):
                faults.append((v.labels, int(code), Evidence(v.query, v.value, _line(int(code)), v.labels, name)))
    changed, last = value(view, "xid_changed"), value(view, "xid_last")
    fatal = bool(last) and xid_describe(int(last or 0)).bucket in (Bucket.RESET_GPU, Bucket.DRAIN_NODE)
    if not changed and before is not None and before.value and fatal and not faults:  # never reset since
        evidence_ = Evidence(before.query, before.value, 0.0, labels_of(view), "xid_changed")
        faults.append((labels_of(view), int(last or 0), evidence_))
    if changed and last and not faults:
        seen = view["xid_changed"][0]  # it appeared or changed in the window: a new XID
        faults.append(
            (
                labels_of(view),
                int(last),
                Evidence(seen.query, seen.value, _line(int(last)), labels_of(view), "xid_changed"),
            )
        )
    if (value(view, "row_remap_failure") or 0) >= 1:
        faults.append(
            (
                labels_of(view),
                None,
                Evidence(view["row_remap_failure"][0].query, 1.0, 0.5, labels_of(view), "row_remap_failure"),
            )
        )
    for v in view.get("health_status", []):  # DCGM's passive health watches: 20 is a failure
        if v.value >= HEALTH_FAIL and not faults:
            faults.append((v.labels, None, Evidence(v.query, v.value, HEALTH_FAIL, v.labels, "health_status")))
    return [f for f in faults if f[1] is None or xid_describe(f[1]).bucket is not Bucket.IGNORE]


def _bucket(code: int | None) -> Bucket:
    return Bucket.RESET_GPU if code is None else xid_describe(code).bucket


def check(ctx: Context) -> list[Finding]:
    def judge(view: View) -> Hit | None:
        faults = _faults(view, ctx.before(view, "xid_changed"))
        if not faults:
            return None
        worst = max(faults, key=lambda f: _RANK[_bucket(f[1])])
        return Hit(view, _RANK[_bucket(worst[1])], {"faults": faults, "worst": worst})

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        labels, code, _ = worst.facts["worst"]
        bucket = _bucket(code)
        if code is None and "health_watch" in labels:
            watch, error = labels.get("health_watch", "?"), labels.get("health_error_code", "")
            what = f"DCGM health watch {watch} failed" + (f" ({error})" if error else "")
            action = "run dcgmi health --check and dcgmi diag -r 2 on the node; drain it if the failure stays"
        elif code is None:
            what, action = "a row remap failed (uncorrectable memory)", "reset the GPU and contact support"
        else:
            entry = xid_describe(code)
            what, action = f"XID {code} ({entry.meaning})", entry.action
        remediation = [f"{what}: {action}"]
        if bucket is Bucket.DRAIN_NODE:
            host = labels.get("Hostname") or labels.get("hostname") or "<node>"
            remediation.append(
                f"take the node out first: kubectl cordon {host} && kubectl drain {host} "
                "--ignore-daemonsets; traffic moves to healthy replicas"
            )
        remediation.append("check the kernel log for the full XID line: dmesg -T | grep -i xid")
        more = len(hits) - 1
        return Parts(
            _SEVERITY[bucket],
            f"{worst.name}: {what}" + (f" (and {more} more GPU(s))" if more else "") + ".",
            [f[2] for h in hits for f in h.facts["faults"]],
            remediation,
        )

    return scoped_findings("gpu_hardware_fault", ctx.gpus.values(), judge, describe, ctx)
