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


def node_of(labels: dict[str, str]) -> str:
    """The machine a series names by a Kubernetes node label (service discovery relabels the
    target's node into `node` or `kubernetes_node`), else by its GPU host label, unless that is
    only the exporter's own pod (a container's hostname is its pod's name: dcgm-exporter in a
    DaemonSet writes `Hostname="dcgm-exporter-bx7l2"`)."""
    node = next((labels[k] for k in ENGINE_NODE_LABELS if labels.get(k)), "")
    host = host_of(labels)
    return node or ("" if host and host == labels.get("pod") else host)


def _machines(labels: dict[str, str], gpu: bool) -> set[str]:
    """The names of the machine an engine or a GPU series is on, as far as its labels say."""
    names = {host_part(labels.get("instance", "")), *(labels.get(k, "") for k in ENGINE_NODE_LABELS)}
    if gpu:
        names.add(node_of(labels))
    return {n for n in names if n not in LOOPBACK}


def _engine_key(labels: dict[str, str]) -> str:
    if labels.get("pod"):
        return f"pod/{labels.get('namespace', '')}/{labels['pod']}"
    return f"instance/{labels.get('instance') or labels.get('target') or '?'}"


def _gpu_key(labels: dict[str, str]) -> str:
    host = node_of(labels)
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
        scopes._name(engines, gpus)
        return scopes

    def _name(self, engines: list[dict[str, str]], gpus: list[dict[str, str]]) -> None:
        """Each scope's name, as an on-call searches for it: its machine (node or host) where one
        is known, with the vLLM pod it concerns when it is one pod ("node-b (vllm-1)"); else the
        pod, the instance or the target."""
        machine: dict[str, str] = {}
        for labels in gpus:
            if node := node_of(labels):
                machine.setdefault(self._find(_gpu_key(labels)), node)
        for labels in engines:
            if node := next((labels[k] for k in ENGINE_NODE_LABELS if labels.get(k)), ""):
                machine.setdefault(self._find(_engine_key(labels)), node)
        for key in self.parent:  # a bare-metal machine join names its host
            if key.startswith("machine/"):
                machine.setdefault(self._find(key), key.split("/", 1)[1])
        pods: dict[str, set[str]] = {}
        for labels in engines:
            if labels.get("pod"):
                pods.setdefault(self._find(_engine_key(labels)), set()).add(labels["pod"])
        for key in self.parent:
            root = self._find(key)
            if root in self.names or key.startswith("machine/"):
                continue
            own = sorted(pods.get(root, ()))
            if root in machine:
                self.names[root] = machine[root] + (f" ({own[0]})" if len(own) == 1 else "")
            else:
                self.names[root] = key.split("/")[-1] if not key.startswith("instance/") else key.split("/", 1)[1]

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
