"""What checks produce: findings with evidence and remediation, in the fixed vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

SCHEMA = "kvscope.diagnosis/v1"


class Severity(StrEnum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return ("ok", "info", "warning", "critical").index(self.value)


# The bottleneck vocabulary (fixed by the diagnosis contract), in root-cause order: when
# several findings hold, the one earlier here is the cause and the later ones its symptoms
# (an XID that kills an engine outranks the queue that follows).
ROOT_CAUSE_ORDER = (
    "gpu_hardware_fault",
    "engine_stall",
    "gpu_memory_pressure",
    "thermal_power_throttling",
    "pcie_bottleneck",
    "kv_transfer_failure",
    "spec_decode_inefficient",
    "load_imbalance",
    "prefix_cache_miss",
    "kv_cache_exhaustion",
    "prefill_head_of_line",
    "capacity_saturation",
    "decode_bandwidth_bound",
    "gateway_overhead",
    "gpu_underutilized",
)
HEALTHY = "healthy"
INSUFFICIENT_DATA = "insufficient_data"
VOCABULARY = (*ROOT_CAUSE_ORDER, HEALTHY, INSUFFICIENT_DATA)

AFFECTED_LABELS = (
    "namespace",
    "pod",
    "instance",
    "target",
    "engine",
    "gpu",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "Hostname",
    "hostname",
)


@dataclass
class Evidence:
    query: str
    value: float
    threshold: float | None
    labels: dict[str, str]
    measure: str = ""  # the measure it came from (diagnosis/measures.py), for the onset search
    above: bool = True  # the finding holds with the value at or above the threshold (False: at or below)

    @property
    def margin(self) -> float | None:
        """How far past its threshold, as a share of it (capped at 1); None when it is not past
        it (context, or a signal that missed) or has no threshold. A threshold of 0 (an event
        counted, an XID) is past by all of it."""
        if self.threshold is None:
            return None
        past = self.value >= self.threshold if self.above else self.value <= self.threshold
        if not past:
            return None
        if self.threshold == 0:
            return 1.0 if self.value != 0 else None
        return min(1.0, abs(self.value - self.threshold) / abs(self.threshold))


# Confidence from evidence (docs/diagnosis.md): each independent signal past its threshold
# supports the finding with SUPPORT_FLOOR + SUPPORT_SPAN x its margin (0.5 when barely past,
# 0.9 at twice its threshold or more); signals combine as independent witnesses,
# 1 - prod(1 - support); a finding no thresholded signal supports gets UNSUPPORTED.
SUPPORT_FLOOR, SUPPORT_SPAN, UNSUPPORTED = 0.5, 0.4, 0.3


def confidence_of(evidence: list[Evidence]) -> float:
    doubt, seen = 1.0, set()
    for e in evidence:
        key = (e.measure or e.query, tuple(sorted(e.labels.items())))
        margin = e.margin
        if margin is None or key in seen:
            continue
        seen.add(key)
        doubt *= 1 - (SUPPORT_FLOOR + SUPPORT_SPAN * margin)
    return UNSUPPORTED if not seen else round(min(0.99, 1 - doubt), 2)


@dataclass
class Finding:
    id: str
    severity: Severity
    confidence: float
    summary: str
    affected: list[dict[str, str]] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    remediation: list[str] = field(default_factory=list)
    scope: str = ""  # the machine (or pod) it was found on: diagnosis/scopes.py

    def __post_init__(self) -> None:
        if self.id not in VOCABULARY:
            raise ValueError(f"{self.id!r} is not in the bottleneck vocabulary")
        self.confidence = round(max(0.0, min(1.0, self.confidence)), 2)


def affected(labels: dict[str, str]) -> dict[str, str]:
    """The identifying labels a finding reports, whichever the data had."""
    return {k: labels[k] for k in AFFECTED_LABELS if labels.get(k)}


def describe(labels: dict[str, str]) -> str:
    """A short name for an entity in a sentence: pod, else target, else instance, + GPU."""
    host = labels.get("Hostname") or labels.get("hostname") or ""
    name = labels.get("pod") or labels.get("target") or labels.get("instance") or host or "?"
    if "gpu" in labels:
        host = host or labels.get("instance") or ""
        device = f"GPU {labels['gpu']}"
        if labels.get("GPU_I_ID"):
            device += f" MIG {labels['GPU_I_ID']} ({labels.get('GPU_I_PROFILE', '?')})"
        return device + (f" on {host}" if host else "")
    if labels.get("engine"):
        return f"{name} engine {labels['engine']}"
    return name
