"""Scopes: which engines and GPUs are one machine, as far as the labels tell.

An incident is one root cause on one scope with the symptoms it explains there, so two faults on
two machines stay two incidents. The joins, each from what real exporters write:

- the GPUs of one host (dcgm-exporter's `Hostname`, or `hostname` on its main branch) are one
  machine; so are the data-parallel engines of one pod (vLLM's `engine` label);
- a GPU series that names a pod (dcgm-exporter's Kubernetes mapping: `namespace`, `pod`) joins
  that pod's engines;
- a GPU and an engine re-exposed by one kvscope exporter share the `instance` label;
- an engine and GPUs on one machine however it is spelled: the host part of the engine's
  `instance` (`node-a:8000`), a Kubernetes node label on it (`node`, `kubernetes_node`), the
  GPUs' host label or the host part of their scrape target (`node-a:9400`). Loopback addresses
  name no machine (every test and drill serves from them).

Without any of these (plain vLLM and plain dcgm-exporter on different targets), an engine is
its own scope and its node's GPUs another: nothing is linked that the data does not link.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvscope.catalog import DCGM_HOST_LABELS

HOST_LABELS = DCGM_HOST_LABELS  # the one list of spellings (kvscope/catalog.py)


def host_of(labels: dict[str, str]) -> str:
    """The host a GPU series names, whichever spelling the exporter used."""
    return next((labels[k] for k in HOST_LABELS if labels.get(k)), "")


ENGINE_NODE_LABELS = ("node", "kubernetes_node")  # what Kubernetes service discovery relabels into
LOOPBACK = frozenset({"", "127.0.0.1", "localhost", "::1", "0.0.0.0"})


def host_part(address: str) -> str:
    """`node-a` of `node-a:8000`, `10.0.0.5` of `10.0.0.5:9400`, `::1` of `[::1]:9400`."""
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def _machines(labels: dict[str, str], gpu: bool) -> set[str]:
    """The names of the machine an engine or a GPU series is on, as far as its labels say."""
    names = {host_part(labels.get("instance", ""))}
    if gpu:
        names.add(host_of(labels))
    else:
        names |= {labels.get(k, "") for k in ENGINE_NODE_LABELS}
    return {n for n in names if n not in LOOPBACK}


def _engine_key(labels: dict[str, str]) -> str:
    if labels.get("pod"):
        return f"pod/{labels.get('namespace', '')}/{labels['pod']}"
    return f"instance/{labels.get('instance') or labels.get('target') or '?'}"


def _gpu_key(labels: dict[str, str]) -> str:
    host = host_of(labels)
    if host:
        return f"host/{host}"
    return f"instance/{labels.get('instance', '?')}"


@dataclass
class Scopes:
    """Union-find over entity keys; `of_labels` gives a scope's name (its host when known)."""

    parent: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, engines: Iterable[dict[str, str]], gpus: Iterable[dict[str, str]]) -> Scopes:
        scopes = cls()
        engines, gpus = list(engines), list(gpus)
        by_instance: dict[str, str] = {}
        for labels in engines:
            key = _engine_key(labels)
            scopes._add(key)
            if labels.get("instance"):
                by_instance.setdefault(labels["instance"], key)
                scopes._union(key, by_instance[labels["instance"]])
        # a machine joins an engine to GPUs only: engines on one host without GPU series beside
        # them stay their own scopes, named as before
        engine_machines = {m for labels in engines for m in _machines(labels, gpu=False)}
        gpu_machines = {m for labels in gpus for m in _machines(labels, gpu=True)}
        for labels in engines:
            for machine in _machines(labels, gpu=False) & gpu_machines:
                scopes._add(f"machine/{machine}")
                scopes._union(_engine_key(labels), f"machine/{machine}")
        for labels in gpus:
            key = _gpu_key(labels)
            scopes._add(key)
            if labels.get("pod"):  # dcgm-exporter's pod mapping
                pod = f"pod/{labels.get('namespace', '')}/{labels['pod']}"
                if pod in scopes.parent:
                    scopes._union(key, pod)
            if labels.get("instance") in by_instance:  # one kvscope exporter re-exposes both
                scopes._union(key, by_instance[labels["instance"]])
            for machine in _machines(labels, gpu=True) & engine_machines:
                scopes._union(key, f"machine/{machine}")
        for key in list(scopes.parent):  # name each scope after its host where it has one
            root = scopes._find(key)
            if key.startswith("host/") or (root not in scopes.names and not key.startswith("machine/")):
                scopes.names[root] = key.split("/")[-1]
        return scopes

    def _add(self, key: str) -> None:
        self.parent.setdefault(key, key)

    def _find(self, key: str) -> str:
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def _union(self, a: str, b: str) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def of_labels(self, labels: dict[str, str]) -> str:
        """The scope of an engine's or a GPU's labels (GPU series carry a GPU index)."""
        key = _gpu_key(labels) if "gpu" in labels or "UUID" in labels else _engine_key(labels)
        if key not in self.parent:
            return key.split("/")[-1]
        return self.names.get(self._find(key), key.split("/")[-1])

    def count(self) -> int:
        return len({self._find(k) for k in self.parent if not k.startswith("machine/")})
