"""The one Prometheus API client: path prefix and headers reach the server, answers are
size-limited, and every way a server can fail is a PrometheusError with one line, never a crash."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvscope.prometheus import NotPrometheus, PrometheusClient, QueryFailed, Refused, TooLarge, Unreachable


class FakeApi:
    """Answers every GET with `status` and `body`, and keeps the requests' paths and headers."""

    def __init__(self) -> None:
        self.status, self.body = 200, b""
        self.seen: list[tuple[str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append((self.path, dict(self.headers)))
                self.send_response(outer.status)
                self.send_header("content-length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def answer(self, data: object, status: int = 200) -> None:
        self.status, self.body = status, json.dumps(data).encode()


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.server.shutdown()


def vector(*values: float) -> dict:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"pod": f"p{i}"}, "value": [0, str(v)]} for i, v in enumerate(values)],
        },
    }


def test_a_query_goes_under_the_path_prefix_with_the_tenant_header_and_token(api):
    api.answer(vector(0.5, 0.9))
    with PrometheusClient(api.url, "/prometheus/", {"X-Scope-OrgID": "team-a"}, "s3cret") as client:
        assert client.query("up", at=100) == [({"pod": "p0"}, 0.5), ({"pod": "p1"}, 0.9)]
        assert client.value("up") == 0.9
    path, headers = api.seen[0]
    assert path.startswith("/prometheus/api/v1/query?") and "time=100.000" in path
    assert headers["X-Scope-OrgID"] == "team-a" and headers["Authorization"] == "Bearer s3cret"


def test_a_scalar_answer_is_one_value_without_labels(api):
    api.answer({"status": "success", "data": {"resultType": "scalar", "result": [0, "1"]}})
    with PrometheusClient(api.url) as client:
        assert client.query("vector(1)") == [({}, 1.0)]


@pytest.mark.parametrize(
    ("status", "body", "error", "words"),
    [
        (401, b"no", Refused, "bearer token"),
        (200, b"<html>login</html>", NotPrometheus, "wrong URL or path prefix"),
        (200, b'{"status": "error", "errorType": "bad_data", "error": "parse error"}', QueryFailed, "parse error"),
        (
            200,
            b'{"status": "success", "data": {"resultType": "vector", "result": [{"value": 3}]}}',
            NotPrometheus,
            "malformed",
        ),
        (200, b"[1, 2]", NotPrometheus, "wrong URL"),
    ],
)
def test_a_failing_server_is_one_error_naming_what_went_wrong(api, status, body, error, words):
    api.status, api.body = status, body
    with PrometheusClient(api.url) as client, pytest.raises(error, match=words) as raised:
        client.query("up")
    assert "\n" not in str(raised.value)
    with PrometheusClient(api.url) as client:
        assert client.value("up") is None  # the lenient accessor says "no value"


def test_an_answer_larger_than_the_limit_is_refused_without_reading_it_all(api):
    api.answer(vector(*range(20000)))
    with PrometheusClient(api.url, max_bytes=64 << 10) as client, pytest.raises(TooLarge, match="larger than"):
        client.query("up")


def test_nothing_listening_is_unreachable():
    with PrometheusClient("http://127.0.0.1:9", timeout=2) as client, pytest.raises(Unreachable, match="unreachable"):
        client.query("up")
