"""The Alertmanager webhook (`kvscope diagnose --listen`) facing whoever reaches its port:
authentication, caps, label values checked before PromQL, a reply at once with the diagnoses
queued, reports pruned, every refusal a JSON error."""

from __future__ import annotations

import base64
import json
import os
import time

import pytest
from starlette.testclient import TestClient

from diagnosis.run import Request
from diagnosis.webhook import PayloadError, Reports, build_app, firing_alerts
from diagnosis.webhook_config import ConfigError, Credentials, WebhookConfig, credentials
from kvscope.http_auth import fixed_basic
from kvscope.promql import Selector
from tests.waiting import eventually

# Nothing listens on port 9: each diagnosis fails fast with "unreachable" (exit 3's verdict).
BASE = Request(prometheus="http://127.0.0.1:9", selector=Selector.parse('{cluster="a"}'))
TOKEN = b"s3cret-token"


def _alert(namespace: str = "prod", status: str = "firing") -> dict:
    return {"status": status, "labels": {"alertname": "VLLMKVCacheFull", "namespace": namespace}}


def _client(tmp_path, settings: WebhookConfig | None = None, creds: Credentials | None = None) -> TestClient:
    settings = settings or WebhookConfig()
    reports = Reports(tmp_path / "reports", settings.keep_reports, settings.keep_seconds)
    app = build_app(BASE, reports, None, settings, creds or Credentials(token=TOKEN))
    return TestClient(app, raise_server_exceptions=False)


AUTH = {"authorization": "Bearer " + TOKEN.decode()}


def test_posts_and_reads_need_the_token(tmp_path):
    with _client(tmp_path) as client:
        payload = {"alerts": [_alert()]}
        assert client.post("/", json=payload).status_code == 401
        assert client.post("/", json=payload, headers={"authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/reports").status_code == 401
        refused = client.post("/", json=payload, headers={"authorization": "Bearer t\u00e9".encode()})
        assert refused.status_code == 401 and "error" in refused.json()
        assert client.post("/", json=payload, headers=AUTH).status_code == 202


def test_basic_auth_as_alertmanager_sends_it(tmp_path):
    creds = Credentials(basic=fixed_basic(b"am", b"pw"))
    with _client(tmp_path, creds=creds) as client:
        good = "Basic " + base64.b64encode(b"am:pw").decode()
        bad = "Basic " + base64.b64encode(b"am:nope").decode()
        assert client.post("/", json={"alerts": []}, headers={"authorization": good}).status_code == 202
        assert client.post("/", json={"alerts": []}, headers={"authorization": bad}).status_code == 401
        assert client.post("/", json={"alerts": []}, headers={"authorization": "Basic !!!"}).status_code == 401


def test_the_reply_comes_at_once_and_the_report_follows(tmp_path):
    with _client(tmp_path) as client:
        answer = client.post("/", json={"alerts": [_alert(), _alert(status="resolved")]}, headers=AUTH)
        assert answer.status_code == 202
        (report_id,) = answer.json()["accepted"]
        assert answer.json()["skipped_resolved"] == 1

        def done() -> dict | None:
            item = client.get(f"/reports/{report_id}", headers=AUTH).json()
            return item if item["state"] == "done" else None

        item = eventually(done, timeout=60, what="the queued diagnosis to finish")
        assert item["selector"] == '{cluster="a",namespace="prod"}'
        assert item["diagnosis"]["bottleneck"] == "insufficient_data"
        assert (tmp_path / "reports" / f"kvscope-report-{report_id}.json").is_file()


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"{", 400, "not JSON"),
        (b"[]", 400, "needs an 'alerts' list"),
        (b'{"alerts": [5]}', 400, "alerts[0] is not an object"),
        (b'{"alerts": [{"labels": {"namespace": 5}}]}', 400, "map names to strings"),
        (b'{"alerts": [{"labels": {"namespace": "prod\\"} or vector(1) or {x=\\""}}]}', 400, "not a Kubernetes name"),
        (b'{"alerts": [{"labels": {"namespace": "a\\nb"}}]}', 400, "not a Kubernetes name"),
        (json.dumps({"alerts": [_alert()] * 101}).encode(), 413, "at most 100"),
        (b'{"alerts": [], "pad": "' + b"x" * (1 << 20) + b'"}', 413, "over 1048576 bytes"),
    ],
)
def test_bad_payloads_are_json_errors(tmp_path, raw, status, message):
    with _client(tmp_path) as client:
        response = client.post("/", content=raw, headers=AUTH)
        assert response.status_code == status
        assert message in response.json()["error"]


def test_a_namespace_label_cannot_inject_promql():
    injected = {"alerts": [{"labels": {"namespace": 'prod"} or up{job="x'}}]}
    with pytest.raises(PayloadError, match="not a Kubernetes name"):
        firing_alerts(injected, 100)
    firing, resolved = firing_alerts({"alerts": [_alert("team-a-prod")]}, 100)
    assert len(firing) == 1 and resolved == 0


def test_a_full_queue_is_a_503_with_retry_after(tmp_path):
    settings = WebhookConfig(queue=2, workers=1)
    with _client(tmp_path, settings) as client:
        response = client.post("/", json={"alerts": [_alert()] * 3}, headers=AUTH)
        assert response.status_code == 503 and response.headers["retry-after"]
        assert client.post("/", json={"alerts": [_alert()] * 2}, headers=AUTH).status_code == 202


def test_unknown_routes_and_methods_are_json(tmp_path):
    with _client(tmp_path) as client:
        assert client.get("/nope").json() == {"error": "Not Found"}
        assert client.get("/").status_code == 405 and "error" in client.get("/").json()


def test_reports_are_pruned_by_count_and_age_and_only_its_own_files(tmp_path):
    folder = tmp_path / "reports"
    reports = Reports(folder, keep=2, keep_seconds=3600)
    theirs = folder / "notes.json"
    theirs.write_text("{}")
    now = time.time()
    for i in range(4):
        reports.add({"id": f"{i:012x}", "received": now, "alert": {}, "diagnosis": {}})
    assert [i["id"] for i in reports.listing()] == [f"{3:012x}", f"{2:012x}"]
    assert len(list(folder.glob("kvscope-report-*.json"))) == 2 and theirs.is_file()
    old = folder / f"kvscope-report-{3:012x}.json"
    os.utime(old, (now - 7200, now - 7200))
    reports.prune(now)
    assert not old.exists() and theirs.is_file()


def test_secrets_come_from_files_or_the_environment(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("from-a-file\n")
    assert credentials(WebhookConfig(bearer_token_file=token)).token == b"from-a-file"
    monkeypatch.setenv("KVSCOPE_WEBHOOK_TOKEN", "from-env")
    assert credentials(WebhookConfig()).token == b"from-env"
    with pytest.raises(ConfigError, match="cannot read"):
        credentials(WebhookConfig(bearer_token_file=tmp_path / "absent"))
    with pytest.raises(ConfigError, match="needs a password_file"):
        credentials(WebhookConfig.model_validate({"basic_auth": {"username": "am"}}))
