"""The verdict against the alerts: every firing kvscope alert, and the incident that explains it.

Each kvscope rule carries the incidents that account for it (annotation `explained_by`,
written by `kvscope alerts build` from alerts/definitions.py); Prometheus' rules API gives them
back, and `ALERTS{alertstate="firing"}` at `--at` gives what fired then. An alert is explained
by an incident of one of those ids whose affected entities share its identifying labels (an alert
without any, as the SLO burn alerts by namespace, matches the incident anywhere). A rule with
an empty annotation is about the monitoring itself (a target or a collector down): benign for
the serving path, and `sources` says more. A firing alert nothing explains is a disagreement the
diagnosis then looks at over the alert's own, shorter window (diagnosis/run.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.incidents import Incident
from kvscope import catalog
from kvscope.durations import format_duration, rfc3339
from kvscope.prometheus import PrometheusClient, PrometheusError
from kvscope.promql import Selector, metric

ANNOTATION = catalog.ALERT_EXPLAINED_BY
MATCH_LABELS = ("namespace", "pod", "instance", "engine", "Hostname", "hostname", "gpu", "model_name")
BENIGN = "about the monitoring itself, not the serving path: see sources"


@dataclass
class Firing:
    alertname: str
    labels: dict[str, str]
    explainers: tuple[str, ...]  # the incidents that account for it; () = about the monitoring
    explained_by: str | None = None
    why: str = ""
    last: float = 0.0  # the last time it was firing in the window

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "alertname": self.alertname,
            "labels": self.labels,
            "explained_by": self.explained_by,
            "last_firing": rfc3339(self.last) if self.last else None,
        }
        if self.why:
            out["why"] = self.why
        return out


def fetch(client: PrometheusClient, at: float, window: float, selector: Selector) -> list[Firing]:
    """kvscope's alerts that fired in the window ending at `at`, each with the last time it was
    firing (none when the server keeps no rules or no alert state)."""
    try:
        rules = client.rule_groups()
        # the raw samples (a range selector): an alert that fired for one evaluation is still seen
        expr = metric(catalog.ALERTS, selector & Selector.of(alertstate="firing")).range(format_duration(window))
        firing = client.samples(str(expr), at)
    except PrometheusError:
        return []
    explainers: dict[str, tuple[str, ...]] = {}
    for group in rules:
        for rule in group.get("rules", []):
            note = (rule.get("annotations") or {}).get(ANNOTATION)
            if rule.get("type") == "alerting" and note is not None:
                explainers[str(rule.get("name"))] = tuple(note.split())
    out = []
    for labels, points in firing:
        name = labels.pop("alertname", "")
        labels.pop("alertstate", None)
        labels.pop("__name__", None)
        if name in explainers and points:
            out.append(Firing(name, labels, explainers[name], last=max(t for t, _ in points)))
    return sorted(out, key=lambda f: (f.alertname, sorted(f.labels.items())))


def matches(alert: Firing, affected_entities: list[dict[str, str]]) -> bool:
    """The alert names one of these entities (or no entity at all: a fleet-level alert)."""
    keys = [k for k in MATCH_LABELS if alert.labels.get(k)]
    entity = [k for k in keys if k not in ("namespace", "model_name")]
    if not entity:  # fleet-level (an SLO by namespace and model): any incident of its kinds
        return True
    for affected in affected_entities:
        shared = [k for k in entity if k in affected]
        if shared and all(affected[k] == alert.labels[k] for k in shared):
            return True
    return False


def explain(alerts: list[Firing], incidents: list[Incident]) -> list[Firing]:
    """Set each alert's explaining incident, or why it has none."""
    for alert in alerts:
        alert.explained_by, alert.why = None, ""
        if not alert.explainers:
            alert.why = BENIGN
            continue
        found = next((i for i in incidents if i.id in alert.explainers and matches(alert, i.affected)), None)
        if found is not None:
            alert.explained_by = found.id
        else:
            alert.why = "no incident on its scope explains it over the window"
    return alerts


def unexplained(alerts: list[Firing]) -> list[Firing]:
    return [a for a in alerts if a.explainers and a.explained_by is None]


def keep_active(incidents: list[Incident], firing: list[Firing], since: float) -> None:
    """An incident whose signals cleared while an alert it explains still fired after `since`
    has not recovered (a burst that recurs, a rule with a longer window): it stays active."""
    for incident in incidents:
        if incident.ended is None:
            continue
        if any(a.last >= since and incident.id in a.explainers and matches(a, incident.affected) for a in firing):
            incident.ended = None
