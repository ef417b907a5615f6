"""The webhook's stored reports as pages: `GET /reports/ID` is HTML for a browser (or
`?format=html`), locked down by a Content-Security-Policy that forbids the network, and JSON
otherwise; an ID that is unknown or not one the receiver hands out is a JSON 404."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from diagnosis import report, report_html
from diagnosis.findings import Evidence, Finding, Severity
from diagnosis.incidents import Incident
from diagnosis.run import Request
from diagnosis.verdict import Diagnosis
from diagnosis.webhook import Reports, build_app
from diagnosis.webhook_config import Credentials, WebhookConfig
from kvscope.promql import Selector

BASE = Request(prometheus="http://127.0.0.1:9", selector=Selector.parse('{cluster="a"}'))
TOKEN = b"s3cret-token"
AUTH = {"authorization": "Bearer " + TOKEN.decode()}
BROWSER = {**AUTH, "accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
HOSTILE = "<img src=x onerror=alert(1)>"
DONE, QUEUED = "0123456789ab", "ba9876543210"


def _diagnosis() -> dict:
    labels = {"pod": f"vllm-{HOSTILE}", "namespace": "prod"}
    finding = Finding(
        "kv_cache_exhaustion",
        Severity.CRITICAL,
        0.95,
        "KV cache full",
        affected=[labels],
        evidence=[Evidence('max(x{pod="a"}) > 0.9 & <b>', 0.98, 0.9, labels, measure="kv_usage_max")],
        remediation=["cap concurrency"],
    )
    incident = Incident(finding.id, finding.severity, 0.95, finding.summary, [""], finding)
    result = Diagnosis(
        1796004000.0, 1800, "prom", finding.id, Severity.CRITICAL, 0.95, "KV", findings=[finding], incidents=[incident]
    )
    return report.to_dict(result)


@pytest.fixture
def client(tmp_path):
    reports = Reports(tmp_path / "reports")
    alert = {"labels": {"alertname": "VLLMKVCacheFull", "namespace": "prod"}}
    reports.add({"id": DONE, "received": time.time(), "alert": alert, "state": "done", "diagnosis": _diagnosis()})
    reports.add({"id": QUEUED, "received": time.time(), "alert": alert, "state": "queued"})
    app = build_app(BASE, reports, None, WebhookConfig(), Credentials(token=TOKEN))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_a_browser_gets_the_page_with_a_csp_that_forbids_the_network(client):
    answer = client.get(f"/reports/{DONE}", headers=BROWSER)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["content-security-policy"] == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    assert answer.headers["x-content-type-options"] == "nosniff"
    page = answer.text
    assert page.startswith("<!doctype html>") and "kv_cache_exhaustion" in page and "VLLMKVCacheFull" in page
    assert HOSTILE not in page and report_html._e(HOSTILE) in page
    assert report_html._e('max(x{pod="a"}) > 0.9 & <b>') in page


def test_format_html_asks_for_the_page_and_json_stays_the_default(client):
    assert client.get(f"/reports/{DONE}?format=html", headers=AUTH).headers["content-type"].startswith("text/html")
    plain = client.get(f"/reports/{DONE}", headers=AUTH)
    assert plain.headers["content-type"] == "application/json" and plain.json()["diagnosis"]["bottleneck"]
    asked = client.get(f"/reports/{DONE}?format=json", headers=BROWSER)
    assert asked.json()["id"] == DONE
    both = client.get(f"/reports/{DONE}", headers={**AUTH, "accept": "application/json, text/html"})
    assert both.headers["content-type"] == "application/json"


def test_an_unknown_format_is_a_json_400(client):
    answer = client.get(f"/reports/{DONE}?format=pdf", headers=AUTH)
    assert answer.status_code == 400 and "error" in answer.json()


def test_a_queued_report_is_a_page_that_says_so(client):
    answer = client.get(f"/reports/{QUEUED}", headers=BROWSER)
    assert answer.status_code == 200 and "queued" in answer.text and "reload" in answer.text


def test_the_page_needs_the_token_too(client):
    assert client.get(f"/reports/{DONE}", headers={"accept": "text/html"}).status_code == 401


@pytest.mark.parametrize(
    "wanted",
    [
        "fedcba987654",  # well formed, unknown
        "0123456789AB",  # not what the receiver hands out
        "0123456789ab0",
        "..%2F..%2Fetc%2Fpasswd",
        "%2e%2e",
        "kvscope-report-0123456789ab.json",
        "0123456789ab%00",
        "0123456789ab.json",
    ],
)
def test_unknown_or_malformed_ids_are_a_json_404(client, wanted):
    answer = client.get(f"/reports/{wanted}", headers=BROWSER)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/json" and "error" in answer.json()


def test_a_path_that_leaves_reports_is_not_a_report(client):
    answer = client.get("/reports/../../etc/passwd", headers=BROWSER)
    assert answer.status_code == 404 and "root:" not in answer.text
