"""Thanos and Mimir settings end to end: `kvscope diagnose --prometheus URL --path-prefix /prometheus
--header 'X-Scope-OrgID: team-a'` against a stand-in API (a small local HTTP server that keeps
every request's path, query and headers and answers canned Prometheus API JSON). Every request
goes under the prefix with the tenant header; a redirect to another host is not followed, so
the header never reaches it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from kvscope import catalog, exitcodes
from kvscope.cli import app


@dataclass
class Seen:
    path: str
    params: dict[str, list[str]]
    headers: dict[str, str]


class StandIn:
    """A Prometheus-compatible API under `prefix`: the probe `vector(1)` answers 1, a KV-usage
    query answers 0.5 for one pod, everything else an empty result; `redirect` maps an API path
    to a URL it answers 302 with instead."""

    def __init__(self, prefix: str = "", redirect: dict[str, str] | None = None) -> None:
        self.prefix, self.redirect = prefix, redirect or {}
        self.seen: list[Seen] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                params = parse_qs(url.query)
                outer.seen.append(Seen(url.path, params, {k.lower(): v for k, v in self.headers.items()}))
                api = url.path.removeprefix(outer.prefix)
                if api in outer.redirect:
                    self.send_response(302)
                    self.send_header("location", outer.redirect[api])
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if url.path.startswith(outer.prefix):
                    status, answer = outer.answer(api, params)
                    body, kind = json.dumps(answer).encode(), "application/json"
                else:  # what Mimir answers outside its prefix
                    status, body, kind = 404, b"404 page not found\n", "text/plain"
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def answer(self, api: str, params: dict[str, list[str]]) -> tuple[int, dict]:
        query = params.get("query", [""])[0]
        if api == "/api/v1/query":
            result = []
            if query == "vector(1)":
                result = [{"metric": {}, "value": [0, "1"]}]
            elif catalog.VLLM_KV_CACHE_USAGE.name in query and "max_over_time" in query:
                result = [{"metric": {"pod": "vllm-0", "namespace": "prod"}, "value": [0, "0.5"]}]
            return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
        if api == "/api/v1/query_range":
            return 200, {"status": "success", "data": {"resultType": "matrix", "result": []}}
        if api == "/api/v1/rules":
            return 200, {"status": "success", "data": {"groups": []}}
        return 404, {"status": "error", "errorType": "not_found", "error": f"no {api}"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def elsewhere() -> Iterator[StandIn]:
    other = StandIn()
    yield other
    other.close()


def diagnose(*args: str):
    return CliRunner().invoke(app, ["diagnose", "--at", "1796000000", "--window", "15m", *args])


def test_every_request_goes_under_the_path_prefix_with_the_tenant_header(elsewhere):
    mimir = StandIn("/prometheus", redirect={"/api/v1/rules": elsewhere.url + "/api/v1/rules"})
    try:
        result = diagnose(
            "--prometheus",
            mimir.url,
            "--path-prefix",
            "/prometheus",
            "--header",
            "X-Scope-OrgID: team-a",
            "--selector",
            'namespace="prod"',
            "--format",
            "json",
        )
    finally:
        mimir.close()
    report = json.loads(result.stdout)
    assert report["source"] == mimir.url + "/prometheus" and report["sources"][0]["status"] == "ok"
    paths = {s.path for s in mimir.seen}
    assert {"/prometheus/api/v1/query", "/prometheus/api/v1/rules"} <= paths
    assert all(p.startswith("/prometheus/api/v1/") for p in paths), paths
    assert all(s.headers.get("x-scope-orgid") == "team-a" for s in mimir.seen)
    queries = [s.params for s in mimir.seen if s.path.endswith("/query")]
    # the window ending at --at, and the baseline window before it
    assert {q["time"][0] for q in queries} == {"1796000000.000", "1795999100.000"}
    assert all('namespace="prod"' in q["query"][0] for q in queries if q["query"] != ["vector(1)"])
    assert elsewhere.seen == []  # the redirect to another host was not followed: no header leaked


def test_a_bearer_token_and_several_headers_go_together(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    thanos = StandIn()
    try:
        diagnose(
            "--prometheus",
            thanos.url + "/",
            "--header",
            "X-Scope-OrgID: team-a|team-b",
            "--header",
            "X-Extra: 1",
            "--bearer-token-file",
            str(token),
        )
    finally:
        thanos.close()
    assert thanos.seen and all(s.path.startswith("/api/v1/") for s in thanos.seen)
    assert {s.headers["x-scope-orgid"] for s in thanos.seen} == {"team-a|team-b"}
    assert {s.headers["authorization"] for s in thanos.seen} == {"Bearer s3cret"}
    assert {s.headers["x-extra"] for s in thanos.seen} == {"1"}


def test_a_wrong_path_prefix_is_undiagnosable_and_says_so():
    mimir = StandIn("/prometheus")
    try:
        result = CliRunner().invoke(app, ["diagnose", "--prometheus", mimir.url, "--at", "1796000000"])
    finally:
        mimir.close()
    assert result.exit_code == exitcodes.UNDIAGNOSABLE
    assert "path prefix" in result.output
