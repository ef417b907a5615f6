"""The drill's on-call pieces that need no running stack: the Alertmanager config (checked by
Alertmanager's own amtool), Prometheus pointed at it, the webhook's drill config, the
stand-in receiver, and the notification as the drill's report shows it."""

from __future__ import annotations

import json
import shutil
import subprocess

import httpx
import pytest
import yaml

from drill import alertmanager, report, scenarios
from drill.prometheus_server import write_config
from drill.report_dir import ReportDir
from kvscope.durations import rfc3339
from tests.unit.test_drill_parts import _run


def test_the_alertmanager_config_pages_kvscope_with_its_token_and_passes_amtool(tmp_path):
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    path = alertmanager.write_config(tmp_path / "am.yml", "http://127.0.0.1:9099/alerts", token)
    config = yaml.safe_load(path.read_text())
    route = config["route"]
    assert route["group_by"] == ["..."] and route["receiver"] == "nobody"  # info alerts page nobody
    assert route["routes"] == [{"receiver": "kvscope", "matchers": ['severity=~"critical|warning"']}]
    (hook,) = config["receivers"][1]["webhook_configs"]
    assert hook["url"] == "http://127.0.0.1:9099/alerts" and hook["send_resolved"] is True
    assert hook["http_config"]["authorization"] == {"type": "Bearer", "credentials_file": str(token.resolve())}
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool (Debian's prometheus-alertmanager) is not installed")
    checked = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheus_sends_its_alerts_to_the_alertmanagers_given(tmp_path):
    path = write_config(tmp_path / "p.yml", {"kvscope": ["127.0.0.1:1"]}, alertmanagers=["127.0.0.1:9093"])
    (manager,) = yaml.safe_load(path.read_text())["alerting"]["alertmanagers"]
    assert manager == {"api_version": "v2", "static_configs": [{"targets": ["127.0.0.1:9093"]}]}
    assert "alerting" not in yaml.safe_load(write_config(tmp_path / "q.yml", {"k": ["h:1"]}).read_text())


def test_the_drills_webhook_config_keeps_the_users_thresholds_and_sets_its_own_webhook(tmp_path):
    users = tmp_path / "kvscope.yaml"
    users.write_text(yaml.safe_dump({"thresholds": {"kv_usage_critical": 0.95}, "webhook": {"max_alerts": 5}}))
    path = alertmanager.write_webhook_config(tmp_path / "w.yaml", tmp_path / "token", "6s", users)
    data = yaml.safe_load(path.read_text())
    assert data["thresholds"] == {"kv_usage_critical": 0.95}
    assert data["webhook"] == {
        "bearer_token_file": str((tmp_path / "token").resolve()),
        "after_start": "6s",
        "workers": 1,
    }


def test_the_stand_in_receiver_keeps_each_post_by_path():
    with alertmanager.receiving() as receiver:
        assert httpx.post(receiver.url + "/notify", json={"a": 1}, timeout=5).status_code == 200
        assert httpx.post(receiver.url + "/notify", content=b"{", timeout=5).status_code == 400
        assert httpx.post(receiver.url + "/other", json=[2], timeout=5).status_code == 200
        assert [p.body for p in receiver.snapshot("/notify")] == [{"a": 1}]
        assert len(receiver.snapshot()) == 2


NOTE = {
    "id": "0123456789ab",
    "alert": {
        "status": "firing",
        "labels": {"alertname": "GPUXidDrainNode", "gpu": "1", "xid": "79", "severity": "critical"},
        "startsAt": rfc3339(1000.0 + 4),
    },
    "diagnosis": {"at": rfc3339(1000.0 + 10)},
    "verdict": {"bottleneck": "gpu_hardware_fault", "severity": "critical", "confidence": 0.9, "explains_alert": True},
    "summary": "GPU 1 on n1: XID 79 (GPU has fallen off the bus).",
    "report_url": "http://127.0.0.1:5/reports/0123456789ab",
    "text": "[FIRING] GPUXidDrainNode (gpu=1, xid=79): gpu_hardware_fault (critical): ...",
}


def test_the_drill_report_shows_the_notification_that_reached_the_receiver(tmp_path):
    post = alertmanager.Post("/notify", 1000.0 + 12, NOTE)
    reports_dir = tmp_path / "logs" / "default" / "oncall" / "reports"
    digest = alertmanager.digest(post, changed=1000.0, reports_dir=reports_dir)
    assert digest["alert_started_s"] == pytest.approx(4) and digest["diagnosed_at_s"] == pytest.approx(10)
    assert digest["reached_receiver_s"] == pytest.approx(12) and digest["labels"] == {"gpu": "1", "xid": "79"}
    folder = ReportDir(tmp_path)
    folder.claim()
    runs = [_run("default", 4.0, 0, {"GPUXidDrainNode": 3})]
    summary = report.write(
        folder,
        scenarios.get("gpu-xid"),
        runs,
        speedup=20,
        min_range=10,
        command="kvscope drill gpu-xid",
        passed=True,
        verdict="passed",
        notifications={"default": [digest]},
    ).read_text()
    assert "### On-call notification" in summary
    assert "- +12 s `GPUXidDrainNode` (gpu=1, xid=79): **gpu_hardware_fault** (critical): GPU 1 on n1" in summary
    assert "(alert started +4 s, diagnosed as of +10 s)" in summary
    assert "kept in `logs/default/oncall/reports/kvscope-report-0123456789ab.json`" in summary
    assert "      [FIRING] GPUXidDrainNode" in summary  # the chat message, as a code block
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["profiles"]["default"]["notifications"][0]["verdict"]["bottleneck"] == "gpu_hardware_fault"


def test_a_drill_without_alertmanager_says_so_in_its_report():
    (line,) = [x for x in report.notification_lines(None) if x.startswith("- ")]
    assert "Alertmanager is not installed" in line
