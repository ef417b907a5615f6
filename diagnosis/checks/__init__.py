"""Checks: small pure functions over fetched measurements, each returning a finding or None.

They never fetch and never render. The per-entity views group measurements by the labels
that identify an engine (instance, data-parallel engine) or a GPU (or MIG device). Entities
are joined into scopes, one per machine as far as the data tells: a GPU and an engine share a
scope when dcgm-exporter's pod mapping names the engine's pod on the GPU, or when both come
from one kvscope exporter (the same `instance`); the GPUs of one host share it, and so do the
engines of one pod. Every check has the same skeleton, `scoped_findings`: judge each view (a
`Hit` or nothing), and describe one finding per scope from its worst hit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from diagnosis.findings import Evidence, Finding, Severity, affected, confidence_of, describe
from diagnosis.measures import BY_NAME, Entity, Measurements, Value, entity_key
from diagnosis.scopes import Scopes
from kvscope import catalog as c
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
    scopes: Scopes = field(default_factory=Scopes)
    baseline: dict[Key, View] = field(default_factory=dict)  # the same entities, the window before
    # labels of engines gone: seen only before the window, or (judged at its end) silent since
    gone: list[dict[str, str]] = field(default_factory=list)
    end: dict[Key, View] = field(default_factory=dict)  # engines' SHAPES over the end of the window
    _scope_index: dict[int, tuple[dict[Key, View], dict[str, list[View]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _server_index: dict[tuple[str, ...], View] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, m: Measurements, limits: Thresholds = DEFAULTS, models: GpuModels = DEFAULT_MODELS) -> Context:
        views: dict[Entity, dict[Key, View]] = {
            Entity.ENGINE: defaultdict(lambda: defaultdict(list)),
            Entity.GPU: defaultdict(lambda: defaultdict(list)),
        }
        key_of = {entity: _keys(entity) for entity in Entity}
        gpu_key = key_of[Entity.GPU]
        same = _one_gpu_each(
            gpu_key(v.labels)
            for got in (m.values, m.baseline)
            for name, values in got.items()
            if name in BY_NAME and BY_NAME[name].entity is Entity.GPU
            for v in values
        )
        for name, values in m.values.items():
            entity = BY_NAME[name].entity if name in BY_NAME else None
            if entity is None:
                continue
            keyer = key_of[entity]
            for v in values:
                key = keyer(v.labels)
                views[entity][same.get(key, key)][name].append(v)
        baseline: dict[Key, View] = defaultdict(lambda: defaultdict(list))
        for name, values in m.baseline.items():
            if name in BY_NAME:
                keyer = key_of[BY_NAME[name].entity]
                for v in values:
                    key = keyer(v.labels)
                    baseline[same.get(key, key)][name].append(v)
        for key, view in views[Entity.GPU].items():  # labels_of() reads the first: the fullest first
            name = next(n for n, values in view.items() if any(gpu_key(v.labels) == key for v in values))
            view[name].sort(key=lambda v: gpu_key(v.labels) != key)
            views[Entity.GPU][key] = defaultdict(list, {name: view[name], **view})
        engines, gpus = dict(views[Entity.ENGINE]), dict(views[Entity.GPU])
        # engines seen only before the window are gone now (crashed, not restarted): their scope
        # still holds their GPUs, whose memory nothing should hold any more
        gone = [
            labels_of(view)
            for key, view in baseline.items()
            if key not in engines and any(BY_NAME[n].entity is Entity.ENGINE for n in view)
        ]
        scopes = Scopes.of([*(labels_of(v) for v in engines.values()), *gone], [labels_of(v) for v in gpus.values()])
        return cls(m, engines, gpus, limits, models, scopes, dict(baseline), gone)

    def shape(self, view: View) -> View:
        """Where to read an engine's latency distributions' shape (a tail against its median):
        over the end of the window where the source has it there, else over the whole window. A
        window holding two regimes, healthy minutes then a saturated queue, has a tail neither has."""
        end = self.end.get(entity_key(labels_of(view), Entity.ENGINE))
        return end if end and any(end.get(n) for n in SHAPES) else view

    def before(self, view: View, name: str) -> Value | None:
        """The measure for the same entity over the baseline window before this one."""
        past = self.baseline.get(entity_key(labels_of(view), BY_NAME[name].entity), {})
        return first(past, name)

    def scope(self, view: View) -> str:
        """The scope (machine, or pod where no machine is known) a view belongs to."""
        return self.scopes.of_labels(labels_of(view))

    def gpus_with(self, view: View) -> list[View]:
        """The GPU views in the same scope as `view`."""
        return self._by_scope(self.gpus).get(self.scope(view), [])

    def engines_with(self, view: View) -> list[View]:
        """The engine views in the same scope as `view`."""
        return self._by_scope(self.engines).get(self.scope(view), [])

    def server_view(self, view: View) -> View | None:
        """The view of the server an engine runs in, where it writes series of its own: kvscope
        serve's gateway counts the whole server (requests held in its KV lanes, arrivals), with
        no `engine` label. None for a view that is itself no engine of a server."""
        if not labels_of(view).get("engine"):
            return None
        if self._server_index is None:
            self._server_index = {
                server_key(labels_of(v)): v for v in self.engines.values() if not labels_of(v).get("engine")
            }
        return self._server_index.get(server_key(labels_of(view)))

    def _by_scope(self, views: dict[Key, View]) -> dict[str, list[View]]:
        """`views` (the engines or the GPUs) by scope, built once: a check asks it of every
        entity, which a scan of the fleet each time would make quadratic in the fleet's size."""
        index = self._scope_index.get(id(views))
        if index is None or index[0] is not views:
            grouped: dict[str, list[View]] = defaultdict(list)
            for v in views.values():
                grouped[self.scope(v)].append(v)
            index = (views, dict(grouped))
            self._scope_index[id(views)] = index
        return index[1]

    def util(self, view: View) -> float | None:
        """A GPU's mean utilisation in percent: the utilisation gauge, else the graphics engine's
        activity (profiling-only configurations have no GPU_UTIL). On a MIG instance the gauge is
        not supported (dcgm-exporter 3.x writes 0 there: NVIDIA/dcgm-exporter#216): only the
        activity counts, and without it the instance's use is unknown. The alert GPUUtilLow
        reads the same."""
        active = value(view, "gr_active_avg")
        if labels_of(view).get(c.DCGM_MIG_LABELS[1]):
            return None if active is None else active * 100
        util = value(view, "gpu_util_avg")
        if util is None and active is not None:
            util = active * 100
        return util

    def limit(self, threshold: Threshold) -> float:
        """The effective value of a threshold (the user's kvscope.yaml, else the default)."""
        return self.limits.value(threshold)

    def engine_budget(self, gpu_labels: dict[str, str]) -> float | None:
        """The gpu_memory_utilization of the engine(s) scraped with a GPU (same `instance`:
        kvscope export re-exposes its node's engines), the largest when several. The alert
        GPUMemoryFull joins the same way, so the two agree."""
        shares = []
        scope = self.scopes.of_labels(gpu_labels)
        gone = [labels for labels in self.gone]
        live = [view for view in self._by_scope(self.engines).get(scope, []) if labels_of(view) not in gone]
        for view in live:
            for v in view.get("cache_config", []):
                try:
                    shares.append(float(v.labels["gpu_memory_utilization"]))
                except (KeyError, ValueError):
                    continue
        if not live and any(self.scopes.of_labels(labels) == scope for labels in gone):
            return 0.0  # its engine is gone: nothing of vLLM's should hold the GPU's memory
        return max(shares) if shares else None


def _keys(entity: Entity) -> Callable[[dict[str, str]], Key]:
    """entity_key for `entity`, once per label dict: a source shares one dict among the values
    of one series across its queries (kvscope/prometheus.py), and the values keep them alive
    while a Context is built, so a dict's id names it for that long."""
    memo: dict[int, Key] = {}

    def key(labels: dict[str, str]) -> Key:
        found = memo.get(id(labels))
        if found is None:
            found = memo[id(labels)] = entity_key(labels, entity)
        return found

    return key


def server_key(labels: dict[str, str]) -> tuple[str, ...]:
    """What one server's series share, its engines' and its own: where it was scraped."""
    return tuple(labels.get(k, "") for k in SERVER_LABELS)


SERVER_LABELS = ("instance", "target", "pod")
UTIL_READS = ("gr_active_avg", "gpu_util_avg")  # what Context.util reads
# the quantiles whose ratios are a distribution's shape (Context.shape)
SHAPES = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")


def engine_views(values: dict[str, list[Value]], names: Iterable[str]) -> dict[Key, View]:
    """The engine measures `names` of `values`, by engine."""
    views: dict[Key, View] = defaultdict(lambda: defaultdict(list))
    for name in names:
        for v in values.get(name, []):
            views[entity_key(v.labels, Entity.ENGINE)][name].append(v)
    return dict(views)


def _one_gpu_each(keys: Iterable[Key]) -> dict[Key, Key]:
    """GPU keys that name one device in several spellings -> the fullest of them: the same UUID
    (and MIG instance), or the same index where no UUID is given, and every label of the one
    also on the other (kvscope export's XID counter carries gpu and UUID, DCGM's fields add the
    host and the model). A key that would fit two different devices is left alone."""
    groups: dict[tuple[str, ...], list[set[tuple[str, str]]]] = defaultdict(list)
    for key in set(keys):
        labels = dict(key)
        device = ("UUID", labels["UUID"]) if labels.get("UUID") else ("gpu", labels.get("gpu", ""))
        if device[1]:
            groups[(*device, labels.get("GPU_I_ID", ""))].append(set(key))
    out: dict[Key, Key] = {}
    for members in groups.values():
        for part in members:
            wider = [m for m in members if part < m]
            widest = [m for m in wider if not any(m < o for o in wider)]
            if len(widest) == 1:
                out[_key(part)] = _key(widest[0])
    return out


def _key(labels: set[tuple[str, str]]) -> Key:
    return entity_key(dict(labels), Entity.GPU)


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


def evidence(view: View, name: str, threshold: float | None = None, above: bool = True) -> Evidence:
    """A measure of a view as evidence; `above`: the finding holds at or above the threshold."""
    v = first(view, name)
    assert v is not None, name
    return Evidence(
        query=v.query, value=round(v.value, 6), threshold=threshold, labels=dict(v.labels), measure=name, above=above
    )


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
    summary: str
    evidence: list[Evidence]  # the finding's confidence is computed from it (findings.confidence_of)
    remediation: list[str]


Judge = Callable[[View], Hit | None]
Describe = Callable[[Hit, list[Hit]], Parts | None]


def scoped_findings(
    id_: str, views: Iterable[View], judge: Judge, describe_: Describe, ctx: Context | None = None
) -> list[Finding]:
    """The check skeleton: judge every view, then per scope describe its worst hit (None: no
    finding there). Without a context (a fleet-wide finding) all hits form one scope."""
    by_scope: dict[str, list[Hit]] = defaultdict(list)
    for view in views:
        if (hit := judge(view)) is not None:
            by_scope[ctx.scope(view) if ctx else ""].append(hit)
    out = []
    for scope, hits in by_scope.items():
        worst = max(hits, key=lambda h: h.score)
        parts = describe_(worst, hits)
        if parts is None:
            continue
        out.append(
            Finding(
                id=id_,
                severity=parts.severity,
                confidence=confidence_of(parts.evidence),
                summary=parts.summary,
                affected=[affected(h.labels) for h in hits],
                evidence=parts.evidence,
                remediation=parts.remediation,
                scope=scope,
            )
        )
    return out


def names(hits: Iterable[Hit]) -> str:
    """The hits' entities for a sentence: 'pod-a, pod-b'."""
    return ", ".join(h.name for h in hits)


Check = Callable[[Context], list[Finding]]


def all_checks() -> list[Check]:
    """Every check, one per vocabulary id (the order does not matter: the verdict ranks)."""
    from diagnosis.checks import (
        decode,
        gateway,
        hardware,
        imbalance,
        kv_cache,
        kv_transfer,
        memory,
        pcie,
        prefill,
        prefix,
        progress,
        saturation,
        speculative,
        throttling,
        underutilized,
    )

    return [
        kv_cache.check,
        kv_transfer.check,
        progress.check,
        speculative.check,
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
        imbalance.check,
    ]
