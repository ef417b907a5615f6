"""The on-call path end to end, every part real: `kvscope export --gpu emulated` -> Prometheus
with the generated rules (on a drill's faster clock) -> Alertmanager -> `kvscope diagnose
--listen` (bearer token) -> the person's receiver (a stand-in HTTP server). An injected XID
fires its rule; the notification the receiver gets names the alert and carries the verdict,
the incident's summary and a working link to the report, diagnosed at the alert's start; the
resolution that follows is not diagnosed again."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import yaml

from alerts import build as alert_build
from drill import alertmanager, prometheus_server
from drill import rules as drill_rules
from drill.launcher import ServerProcess, free_port, kvscope_exporter, running
from kvscope.durations import parse_time
from kvscope.prometheus import PrometheusClient
from tests.waiting import eventually, holds

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]

ALERT = "GPUXidDrainNode"  # no `for:`: it fires on the first evaluation that sees the XID
SPEEDUP = 20  # the drills' clock: the rule's 5m window is 15 s, so the alert also resolves
DEADLINE = 120.0  # a busy 2-core machine: starts, evaluations and a diagnosis or two


@dataclass
class OnCallStack:
    exporter: ServerProcess
    prometheus: PrometheusClient
    oncall: alertmanager.OnCall
    injected: float = 0.0  # when the XID went in (0: not yet)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnCallStack]:
    work = tmp_path_factory.mktemp("oncall")
    source = yaml.safe_load((alert_build.ALERTS_DIR / alert_build.RULES_FILE).read_text())
    rules = work / "kvscope-rules.fast.yaml"
    rules.write_text(yaml.safe_dump(drill_rules.compress(source, SPEEDUP, 1), sort_keys=False, width=1000))
    export_port, prom_port = free_port(), free_port()
    exporter = kvscope_exporter(
        work / "export.log", "--gpu", "emulated", "--emulated-gpus", "2", "--collect-interval", "1", port=export_port
    )
    with (
        running(exporter, ready_path="/-/healthy", timeout=60),
        # after_start 0s: the diagnosis time is exactly the alert's start, told apart from its arrival
        alertmanager.on_call(
            work / "oncall", f"http://127.0.0.1:{prom_port}", window="10m", recent="30s", after_start="0s", tap=True
        ) as oncall,
    ):
        prom = prometheus_server.start(
            work / "prometheus",
            {"kvscope": [f"127.0.0.1:{export_port}"]},
            interval="1s",
            rule_files=[rules],
            port=prom_port,
            alertmanagers=[oncall.alertmanager_target],
        )
        with running(prom, ready_path="/-/ready", timeout=60):
            api = PrometheusClient(prom.base_url)
            api.wait_for_scrapes("kvscope")
            yield OnCallStack(exporter, api, oncall)
            api.close()


def _about(post: alertmanager.Post, status: str = "firing") -> bool:
    labels = post.body.get("alert", {}).get("labels", {})
    return labels.get("alertname") == ALERT and post.body.get("alert", {}).get("status") == status


def _tapped(oncall: alertmanager.OnCall, status: str) -> list[dict]:
    """The alerts Alertmanager itself sent with `status` (its webhook payload, version 4)."""
    return [
        a
        for p in oncall.receiver.snapshot(alertmanager.TAP_PATH)
        if p.body.get("version") == "4"
        for a in p.body.get("alerts", [])
        if a["labels"].get("alertname") == ALERT and a["status"] == status
    ]


@pytest.fixture
def xid(stack: OnCallStack) -> OnCallStack:
    """The stack with XID 79 injected on GPU 1, once per stack: each test runs alone or in any order."""
    if not stack.injected:
        command = ["export", "inject", "xid", "--gpu", "1", "--set", "xid=79", "--url", stack.exporter.base_url]
        inject = subprocess.run(
            [sys.executable, "-m", "kvscope.cli", *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert inject.returncode == 0, inject.stdout + inject.stderr
        stack.injected = time.time()
    return stack


def test_an_xid_reaches_the_receiver_diagnosed_with_a_link_to_the_report(xid: OnCallStack):
    stack, injected = xid, xid.injected

    notes = eventually(
        lambda: [p for p in stack.oncall.notifications() if _about(p)],
        timeout=DEADLINE,
        what=f"kvscope's notification of {ALERT} at the receiver",
    )
    note = notes[0].body
    alert = note["alert"]
    assert alert["labels"]["gpu"] == "1" and alert["labels"]["xid"] == "79"
    assert alert["fingerprint"] and alert["startsAt"]  # as Alertmanager sent it, kept whole
    assert note["verdict"] == {**note["verdict"], "bottleneck": "gpu_hardware_fault", "severity": "critical"}
    assert note["verdict"]["explains_alert"] is True
    assert "XID 79" in note["summary"] and "\n" not in note["summary"]
    assert note["diagnosis"]["bottleneck"] == "gpu_hardware_fault"  # the full report rides along
    assert note["text"].startswith(f"[FIRING] {ALERT} (")
    assert "gpu_hardware_fault (critical)" in note["text"] and note["report_url"] in note["text"]

    # diagnosed at the alert's start (after_start 0s), not when the post arrived
    starts = parse_time(alert["startsAt"])
    assert injected - 5 < starts <= note["received"]
    assert abs(parse_time(note["diagnosis"]["at"]) - starts) < 0.01
    assert note["received"] - starts > 0.5  # Alertmanager's group_wait at least

    # the link answers, with the webhook's token only
    assert note["report_url"] == f"{stack.oncall.webhook.base_url}/reports/{note['id']}"
    assert httpx.get(note["report_url"], timeout=10).status_code == 401
    report = httpx.get(note["report_url"], headers=stack.oncall.auth, timeout=10)
    assert report.status_code == 200
    assert report.json()["id"] == note["id"] and report.json()["diagnosis"]["bottleneck"] == "gpu_hardware_fault"

    def outcome() -> dict:  # kept once the receiver's answer is in
        return httpx.get(note["report_url"], headers=stack.oncall.auth, timeout=10).json().get("forward") or {}

    assert eventually(outcome, timeout=30, what="the delivery in the report")["delivered"] is True


def test_the_resolution_is_not_diagnosed_again(xid: OnCallStack):
    stack = xid
    firing = eventually(
        lambda: [p for p in stack.oncall.notifications() if _about(p)],
        timeout=DEADLINE,
        what=f"kvscope's notification of {ALERT}",
    )
    # Alertmanager tells the webhook and the tap in the same flush
    eventually(lambda: _tapped(stack.oncall, "resolved"), timeout=DEADLINE, what=f"Alertmanager resolving {ALERT}")

    def diagnosed() -> list[dict]:
        return [r for r in stack.oncall.reports() if r["alertname"] == ALERT]

    # long enough for a post made with the tap's to be queued
    holds(lambda: len(diagnosed()) == 1, seconds=5, what="one report for the alert")
    assert len([p for p in stack.oncall.notifications() if _about(p)]) == len(firing) == 1
