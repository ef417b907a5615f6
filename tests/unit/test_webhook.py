"""The Alertmanager webhook (`kvscope diagnose --listen`) facing whoever reaches its port:
authentication, caps, label values checked before PromQL, a reply at once with the diagnoses
queued, reports pruned, every refusal a JSON error; and the notification it forwards to a
person's receiver (a stand-in HTTP server here), retried within bounds."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from starlette.testclient import TestClient

from diagnosis import webhook
from diagnosis.run import Request
from diagnosis.webhook import (
    PayloadError,
    Reports,
    build_app,
    default_external_url,
    firing_alerts,
    notification,
    scoped,
)
from diagnosis.webhook_config import ConfigError, Credentials, WebhookConfig, credentials
from kvscope.durations import parse_time, rfc3339
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


# --- the notification forwarded to the person's receiver (--forward) ---------------------------


@dataclass
class StandIn:
    """A person's receiver on 127.0.0.1: answers each post with the next of `statuses` (200 once
    they run out), or not at all while `hang` is clear."""

    url: str
    statuses: list[int]
    bodies: list[dict] = field(default_factory=list)
    hang: threading.Event | None = None


@pytest.fixture
def stand_in() -> Iterator[Callable[..., StandIn]]:
    servers: list[tuple[ThreadingHTTPServer, StandIn]] = []

    def start(statuses: Sequence[int] = (), hang: bool = False) -> StandIn:
        receiver = StandIn("", list(statuses), hang=threading.Event() if hang else None)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                if receiver.hang is not None:
                    receiver.hang.wait(30)
                    return
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T0/B0/secret-path"
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append((server, receiver))
        return receiver

    yield start
    for server, receiver in servers:
        if receiver.hang is not None:
            receiver.hang.set()
        server.shutdown()
        server.server_close()


def _forwarding(tmp_path, url: str, settings: WebhookConfig | None = None) -> TestClient:
    settings = settings or WebhookConfig()
    reports = Reports(tmp_path / "reports", settings.keep_reports, settings.keep_seconds)
    app = build_app(BASE, reports, url, settings, Credentials(token=TOKEN), "https://kvscope.example/webhook/")
    return TestClient(app, raise_server_exceptions=False)


def _forwarded(client: TestClient, report_id: str) -> dict:
    def forward() -> dict:  # {} until the outcome is kept
        return client.get(f"/reports/{report_id}", headers=AUTH).json().get("forward") or {}

    return eventually(forward, timeout=60, what="the notification's outcome in the report")


def test_the_receiver_gets_the_report_with_its_verdict_summary_link_and_text(tmp_path, stand_in):
    receiver = stand_in()
    with _forwarding(tmp_path, receiver.url) as client:
        (report_id,) = client.post("/", json={"alerts": [_alert()]}, headers=AUTH).json()["accepted"]
        assert _forwarded(client, report_id) == {"delivered": True, "attempts": 1, "status": 200}
    (note,) = receiver.bodies
    assert note["id"] == report_id and note["alert"]["labels"]["alertname"] == "VLLMKVCacheFull"
    assert note["diagnosis"]["bottleneck"] == "insufficient_data"  # nothing listens on port 9
    assert note["verdict"]["bottleneck"] == "insufficient_data" and note["verdict"]["explains_alert"] is False
    assert note["summary"] == " ".join(note["diagnosis"]["summary"].split())
    assert note["report_url"] == f"https://kvscope.example/webhook/reports/{report_id}"
    assert note["text"].startswith("[FIRING] VLLMKVCacheFull (namespace=prod): insufficient_data (")
    assert note["text"].endswith(f"Report: {note['report_url']}")


def _diagnosed(*incidents: dict, alerts: Sequence[dict] = ()) -> dict:
    return {"bottleneck": incidents[0]["id"], "severity": incidents[0]["severity"], "summary": "fleet: 2 incidents",
            "incidents": list(incidents), "alerts": list(alerts)}  # fmt: skip


KV = {"id": "kv_cache_exhaustion", "severity": "critical", "confidence": 0.9,
      "summary": "Pool full on pod a.", "affected": [{"pod": "a"}]}  # fmt: skip
XID_0 = {"id": "gpu_hardware_fault", "severity": "critical", "confidence": 0.9,
         "summary": "GPU 0 on n1: XID 79.", "affected": [{"instance": "n1", "gpu": "0"}]}  # fmt: skip
XID_1 = {**XID_0, "summary": "GPU 1 on n1:\n XID 48 & <DBE>.", "affected": [{"instance": "n1", "gpu": "1"}]}


def test_the_verdict_is_the_incident_that_explains_this_alert_on_its_scope():
    labels = {"alertname": "GPUXidResetRequired", "instance": "n1", "gpu": "1", "xid": "48", "cluster": "eu"}
    seen = {"alertname": "GPUXidResetRequired", "labels": {"instance": "n1", "gpu": "1", "xid": "48"},
            "explained_by": "gpu_hardware_fault"}  # fmt: skip
    item = {
        "id": "abc",
        "alert": {"status": "firing", "labels": labels},
        "diagnosis": _diagnosed(KV, XID_0, XID_1, alerts=[seen]),
    }
    note = notification(item, "http://h:9099")
    assert note["verdict"] == {"bottleneck": "gpu_hardware_fault", "severity": "critical", "confidence": 0.9,
                               "explains_alert": True}  # fmt: skip
    assert note["summary"] == "GPU 1 on n1: XID 48 & <DBE>."  # one line, the incident on gpu 1
    assert note["text"] == (
        "[FIRING] GPUXidResetRequired (instance=n1, gpu=1, xid=48): gpu_hardware_fault (critical): "
        "GPU 1 on n1: XID 48 &amp; &lt;DBE&gt;. Report: http://h:9099/reports/abc"
    )


def test_an_alert_nothing_explains_gets_the_top_incident():
    item = {"id": "abc", "alert": {"labels": {"alertname": "VLLMTTFTHigh"}}, "diagnosis": _diagnosed(KV, XID_0)}
    note = notification(item, "http://h:9099")
    assert note["verdict"]["bottleneck"] == "kv_cache_exhaustion" and not note["verdict"]["explains_alert"]
    assert note["summary"] == "Pool full on pod a."


def test_a_failing_receiver_is_tried_again_with_backoff(tmp_path, stand_in, monkeypatch):
    monkeypatch.setattr(webhook, "FORWARD_BACKOFF", 0.05)
    receiver = stand_in([503, 502])
    with _forwarding(tmp_path, receiver.url) as client:
        (report_id,) = client.post("/", json={"alerts": [_alert()]}, headers=AUTH).json()["accepted"]
        assert _forwarded(client, report_id) == {"delivered": True, "attempts": 3, "status": 200}
    assert len(receiver.bodies) == 3


def test_a_refusal_is_not_retried_and_is_logged_without_the_urls_secret_path(tmp_path, stand_in, monkeypatch, caplog):
    monkeypatch.setattr(webhook, "FORWARD_BACKOFF", 0.05)
    receiver = stand_in([404])
    with caplog.at_level(logging.WARNING, "kvscope.diagnose"), _forwarding(tmp_path, receiver.url) as client:
        (report_id,) = client.post("/", json={"alerts": [_alert()]}, headers=AUTH).json()["accepted"]
        outcome = _forwarded(client, report_id)
    assert outcome == {"delivered": False, "attempts": 1, "status": 404, "error": "HTTP 404"}
    assert len(receiver.bodies) == 1
    assert "1 of 1 notifications failed" in caplog.text and "secret-path" not in caplog.text


def test_a_receiver_that_never_answers_costs_a_bounded_time_and_the_next_alert_still_goes(
    tmp_path, stand_in, monkeypatch
):
    monkeypatch.setattr(webhook, "FORWARD_BACKOFF", 0.05)
    receiver = stand_in(hang=True)
    settings = WebhookConfig(workers=1, forward_timeout="500ms", forward_attempts=2)
    with _forwarding(tmp_path, receiver.url, settings) as client:
        first, second = client.post("/", json={"alerts": [_alert(), _alert("dev")]}, headers=AUTH).json()["accepted"]
        began = time.monotonic()
        assert _forwarded(client, first) == {
            "delivered": False, "attempts": 2, "status": None, "error": "no answer within 0.5 s"
        }  # fmt: skip
        assert _forwarded(client, second)["attempts"] == 2  # the worker moved on
        assert time.monotonic() - began < 20


def test_the_diagnosis_runs_at_the_alerts_start_not_its_arrival(tmp_path):
    started = time.time() - 3600  # an alert Alertmanager delivers an hour late (a retry, a restart)
    alert = {**_alert(), "startsAt": rfc3339(started)}
    with _client(tmp_path) as client:
        (report_id,) = client.post("/", json={"alerts": [alert]}, headers=AUTH).json()["accepted"]

        def done() -> dict:
            item = client.get(f"/reports/{report_id}", headers=AUTH).json()
            return item if item["state"] == "done" else {}

        item = eventually(done, timeout=60, what="the diagnosis")
    assert parse_time(item["diagnosis"]["at"]) == pytest.approx(started + webhook.AFTER_START, abs=0.01)
    assert webhook.AFTER_START == 120.0  # docs/diagnosis.md: "at its start time (+2 min)"


ARRIVED = parse_time("2026-12-01T00:00:00Z")


@pytest.mark.parametrize(
    ("starts", "after", "expected"),
    [
        ("2026-11-30T02:00:00Z", 120.0, parse_time("2026-11-30T02:02:00Z")),
        ("2026-11-30T02:00:00.123456789Z", 0.0, parse_time("2026-11-30T02:00:00.123456Z")),
        ("2026-11-30T02:00:00Z", 86400.0, ARRIVED),  # never later than its arrival
        ("0001-01-01T00:00:00Z", 120.0, ARRIVED),  # Go's zero time: no start given
        ("yesterday", 120.0, ARRIVED),
    ],
)
def test_scoped_takes_the_start_plus_the_offset(starts, after, expected):
    assert scoped(BASE, {"startsAt": starts}, ARRIVED, after).at == pytest.approx(expected, abs=1e-6)


def test_webhook_settings_for_links_offsets_and_forwarding():
    assert WebhookConfig(external_url="https://kvscope.example/hook/").external_url == "https://kvscope.example/hook"
    for bad in ("kvscope.example", "https://kvscope.example/?token=x", "ftp://x"):
        with pytest.raises(ValueError, match="http"):
            WebhookConfig(external_url=bad)
    assert WebhookConfig(after_start="0s").after_start_seconds == 0.0
    assert WebhookConfig().after_start_seconds == 120.0 and WebhookConfig().forward_timeout_seconds == 10.0
    with pytest.raises(ValueError):
        WebhookConfig(forward_attempts=0)
    assert default_external_url("127.0.0.1:9099") == "http://127.0.0.1:9099"
    assert default_external_url("0.0.0.0:9099") == f"http://{socket.gethostname()}:9099"
