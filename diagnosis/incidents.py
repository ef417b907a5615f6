"""From findings to incidents: one root cause on one scope with the symptoms it explains there.

The causal links are explicit (EXPLAINS) and hold only within one scope (a machine, or a pod
where no machine is known): a throttled GPU explains slow decode on the engine it serves, never
on another node; between two findings about GPUs themselves (PER_GPU), only on the same GPU. A
load imbalance explains its saturated members' queues and KV pools, wherever they run, because
the balancer in front of them is the one cause. Findings of a kind that is about how a fleet is
configured (idle capacity, decode bound by HBM, gateway overhead) are one incident across the
machines that show them.

Incidents are ordered by severity, then the share of the fleet they affect, then confidence;
ties fall back to the root-cause order of the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnosis.findings import ROOT_CAUSE_ORDER, Finding, Severity
from diagnosis.scopes import Scopes

# cause -> the findings it accounts for on its own scope
EXPLAINS: dict[str, frozenset[str]] = {
    "gpu_hardware_fault": frozenset(
        {
            "engine_stall",
            "capacity_saturation",
            "decode_bandwidth_bound",
            "prefill_head_of_line",
            "pcie_bottleneck",
            "thermal_power_throttling",
            "gpu_underutilized",
            "gateway_overhead",
        }
    ),
    # an engine that makes no progress: everything behind it waits
    "engine_stall": frozenset({"capacity_saturation", "prefill_head_of_line", "kv_cache_exhaustion"}),
    # requests recompute their prefill or wait for a KV load that does not come
    "kv_transfer_failure": frozenset({"capacity_saturation", "prefill_head_of_line"}),
    "spec_decode_inefficient": frozenset({"decode_bandwidth_bound", "capacity_saturation"}),
    "gpu_memory_pressure": frozenset({"capacity_saturation"}),
    "thermal_power_throttling": frozenset({"decode_bandwidth_bound", "capacity_saturation", "prefill_head_of_line"}),
    "pcie_bottleneck": frozenset({"capacity_saturation", "decode_bandwidth_bound"}),
    # every request prefills its whole prompt again: chunked prefill shares each step with decode,
    # so the steps (inter-token latency) slow with it (drill prefix-miss on a slow engine)
    "prefix_cache_miss": frozenset({"prefill_head_of_line", "capacity_saturation", "decode_bandwidth_bound"}),
    "load_imbalance": frozenset(
        {
            "prefix_cache_miss",  # the siblings' hit rate falls when the shared traffic leaves them
            "kv_cache_exhaustion",
            "capacity_saturation",
            "prefill_head_of_line",
            "decode_bandwidth_bound",
            "gpu_underutilized",
        }
    ),
    "kv_cache_exhaustion": frozenset({"capacity_saturation", "prefill_head_of_line", "decode_bandwidth_bound"}),
    "prefill_head_of_line": frozenset({"capacity_saturation", "decode_bandwidth_bound"}),
    "capacity_saturation": frozenset({"decode_bandwidth_bound"}),
}
# findings about a fleet's configuration: one incident wherever they show
FLEET_WIDE = frozenset({"gpu_underutilized", "decode_bandwidth_bound", "gateway_overhead"})
# findings about one GPU's own state: one of them explains another only on the same GPU (an XID
# on GPU 0 says nothing of GPU 1's heat on the same node: the combined drill)
PER_GPU = frozenset({"gpu_hardware_fault", "thermal_power_throttling", "pcie_bottleneck", "gpu_memory_pressure"})


@dataclass
class Incident:
    id: str
    severity: Severity
    confidence: float
    summary: str
    scopes: list[str]
    cause: Finding
    symptoms: list[Finding] = field(default_factory=list)
    onset: float | None = None
    trigger: dict[str, object] | None = None
    ended: float | None = None  # set when it held earlier in the window and has cleared since

    @property
    def status(self) -> str:
        """active: its condition holds at the end of the window; recovered: it held and cleared."""
        return "active" if self.ended is None else "recovered"

    @property
    def affected(self) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        for f in (self.cause, *self.symptoms):
            out += [a for a in f.affected if a not in out]
        return out

    @property
    def explains(self) -> list[str]:
        return sorted({f.id for f in self.symptoms})


def _order(f: Finding) -> tuple[int, int, float]:
    return (ROOT_CAUSE_ORDER.index(f.id), -f.severity.rank, -f.confidence)


def group(
    findings: list[Finding], scopes: Scopes, fleet_size: int, late: list[Finding] | None = None
) -> list[Incident]:
    """Every finding in exactly one incident: as its cause, or as a symptom its cause explains.

    `late`: findings seen only over an alert's shorter window (a burst); they never become the
    cause of the findings of the whole window: a symptom of one of their incidents, or their own."""
    incidents: list[Incident] = []
    pending = sorted(findings, key=_order) + sorted(late or [], key=_order)
    for finding in pending:
        host = _explainer(incidents, finding, scopes)
        if host is not None:
            host.symptoms.append(finding)
            host.severity = max(host.severity, finding.severity, key=lambda s: s.rank)
            continue
        merged = next((i for i in incidents if i.id == finding.id and finding.id in FLEET_WIDE), None)
        if merged is not None:
            merged.symptoms.append(finding)
            merged.scopes.append(finding.scope)
            continue
        incidents.append(
            Incident(finding.id, finding.severity, finding.confidence, finding.summary, [finding.scope], finding)
        )
    size = max(fleet_size, 1)
    incidents.sort(
        key=lambda i: (-i.severity.rank, -len(set(i.scopes)) / size, -i.confidence, ROOT_CAUSE_ORDER.index(i.id))
    )
    return incidents


def _explainer(incidents: list[Incident], finding: Finding, scopes: Scopes) -> Incident | None:
    for incident in incidents:
        if finding.id not in EXPLAINS.get(incident.id, frozenset()):
            continue
        if incident.id == "load_imbalance":
            members = {scopes.of_labels(a) for a in incident.cause.affected}
            if finding.scope in members or finding.scope in incident.scopes:
                return incident
        elif finding.scope in incident.scopes and (
            not {finding.id, incident.id} <= PER_GPU or _gpus(finding) & _gpus(incident.cause)
        ):
            return incident
    return None


def _gpus(finding: Finding) -> set[tuple[str, str]]:
    """The GPUs a finding names on its scope (one machine), as (index, MIG instance)."""
    return {(a["gpu"], a.get("GPU_I_ID", "")) for a in finding.affected if a.get("gpu")}
