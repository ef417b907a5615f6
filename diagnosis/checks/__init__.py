"""Checks: small pure functions over fetched measurements, each returning a finding or None.

They never fetch and never render. The per-entity views group measurements by the labels
that identify an engine instance or a GPU. Every check has the same skeleton, `one_finding`:
judge each view (a `Hit` or nothing), take the worst hit, describe the finding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from diagnosis.findings import Evidence, Finding, Severity, affected, describe
from diagnosis.measures import BY_NAME, Entity, Measurements, Value, entity_key
from kvscope.gpu_models import DEFAULT_MODELS, GpuModels
from kvscope.thresholds import DEFAULTS, Threshold, Thresholds

View = dict[str, list[Value]]
Key = tuple[tuple[str, str], ...]


@dataclass
class Context:
    m: Measurements
    engines: dict[Key, View] = field(default_factory=dict)
    gpus: dict[Key, View] = field(default_factory=dict)
    limits: Thresholds = DEFAULTS
    models: GpuModels = DEFAULT_MODELS

    @classmethod
    def of(cls, m: Measurements, limits: Thresholds = DEFAULTS, models: GpuModels = DEFAULT_MODELS) -> Context:
        views: dict[Entity, dict[Key, View]] = {
            Entity.ENGINE: defaultdict(lambda: defaultdict(list)),
            Entity.GPU: defaultdict(lambda: defaultdict(list)),
        }
        for name, values in m.values.items():
            entity = BY_NAME[name].entity if name in BY_NAME else None
            if entity is None:
                continue
            for v in values:
                views[entity][entity_key(v.labels, entity)][name].append(v)
        return cls(m, dict(views[Entity.ENGINE]), dict(views[Entity.GPU]), limits, models)

    def limit(self, threshold: Threshold) -> float:
        """The effective value of a threshold (the user's kvscope.yaml, else the default)."""
        return self.limits.value(threshold)

    def engine_budget(self, gpu_labels: dict[str, str]) -> float | None:
        """The gpu_memory_utilization of the engine(s) scraped with a GPU (same `instance`:
        kvscope export re-exposes its node's engines), the largest when several. The alert
        GPUMemoryFull joins the same way, so the two agree."""
        shares = []
        for view in self.engines.values():
            for v in view.get("cache_config", []):
                if v.labels.get("instance") != gpu_labels.get("instance"):
                    continue
                try:
                    shares.append(float(v.labels["gpu_memory_utilization"]))
                except (KeyError, ValueError):
                    continue
        return max(shares) if shares else None


def first(view: View, name: str) -> Value | None:
    values = view.get(name)
    return values[0] if values else None


def value(view: View, name: str) -> float | None:
    v = first(view, name)
    return v.value if v is not None else None


def labels_of(view: View) -> dict[str, str]:
    """The identifying labels of a view (from any of its values)."""
    for values in view.values():
        if values:
            return dict(values[0].labels)
    return {}


def evidence(view: View, name: str, threshold: float | None = None) -> Evidence:
    v = first(view, name)
    assert v is not None, name
    return Evidence(query=v.query, value=round(v.value, 6), threshold=threshold, labels=dict(v.labels))


@dataclass
class Hit:
    """One entity a check fired on; `score` orders hits (the largest is the worst)."""

    view: View
    score: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        return labels_of(self.view)

    @property
    def name(self) -> str:
        return describe(self.labels)


@dataclass
class Parts:
    """What a check says about its worst hit (the skeleton adds the id and the affected list)."""

    severity: Severity
    confidence: float
    summary: str
    evidence: list[Evidence]
    remediation: list[str]


Judge = Callable[[View], Hit | None]
Describe = Callable[[Hit, list[Hit]], Parts | None]


def one_finding(id_: str, views: Iterable[View], judge: Judge, describe_: Describe) -> Finding | None:
    """The check skeleton: judge every view, take the worst hit, describe it (None: no finding)."""
    hits = [hit for view in views if (hit := judge(view)) is not None]
    if not hits:
        return None
    worst = max(hits, key=lambda h: h.score)
    parts = describe_(worst, hits)
    if parts is None:
        return None
    return Finding(
        id=id_,
        severity=parts.severity,
        confidence=parts.confidence,
        summary=parts.summary,
        affected=[affected(h.labels) for h in hits],
        evidence=parts.evidence,
        remediation=parts.remediation,
    )


def names(hits: Iterable[Hit]) -> str:
    """The hits' entities for a sentence: 'pod-a, pod-b'."""
    return ", ".join(h.name for h in hits)


Check = Callable[[Context], Finding | None]


def all_checks() -> list[Check]:
    """Every check, one per vocabulary id (the order does not matter: the verdict ranks)."""
    from diagnosis.checks import (
        decode,
        gateway,
        hardware,
        kv_cache,
        memory,
        pcie,
        prefill,
        prefix,
        saturation,
        throttling,
        underutilized,
    )

    return [
        kv_cache.check,
        prefill.check,
        saturation.check,
        prefix.check,
        memory.check,
        hardware.check,
        throttling.check,
        pcie.check,
        underutilized.check,
        decode.check,
        gateway.check,
    ]
