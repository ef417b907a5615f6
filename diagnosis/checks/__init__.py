"""Checks: small pure functions over fetched measurements, each returning a finding or None.

They never fetch and never render. The per-entity views group measurements by the labels
that identify an engine instance or a GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from diagnosis.findings import Evidence, Finding
from diagnosis.measures import BY_NAME, Entity, Measurements, Value, entity_key
from kvscope.thresholds import Threshold

View = dict[str, list[Value]]
Key = tuple[tuple[str, str], ...]


@dataclass
class Context:
    m: Measurements
    engines: dict[Key, View] = field(default_factory=dict)
    gpus: dict[Key, View] = field(default_factory=dict)

    @classmethod
    def of(cls, m: Measurements) -> Context:
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
        return cls(m, dict(views[Entity.ENGINE]), dict(views[Entity.GPU]))

    def engine_budget(self, gpu_labels: dict[str, str]) -> float | None:
        """The gpu_memory_utilization of the engine(s) on a GPU's node: by shared `instance`
        (kvscope export re-exposes the node's engines), else the fleet's one value if single."""
        shares = {}
        for view in self.engines.values():
            for v in view.get("cache_config", []):
                try:
                    shares[v.labels.get("instance", "")] = float(v.labels["gpu_memory_utilization"])
                except (KeyError, ValueError):
                    continue
        if gpu_labels.get("instance") in shares:
            return shares[gpu_labels["instance"]]
        distinct = set(shares.values())
        return distinct.pop() if len(distinct) == 1 else None


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


def evidence(view: View, name: str, threshold: Threshold | float | None = None) -> Evidence:
    v = first(view, name)
    assert v is not None, name
    limit = threshold.value if isinstance(threshold, Threshold) else threshold
    return Evidence(query=v.query, value=round(v.value, 6), threshold=limit, labels=dict(v.labels))


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
