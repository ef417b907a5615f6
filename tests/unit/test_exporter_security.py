"""The exporter facing the network: exporter-toolkit's web config, probes open when auth is on,
any Authorization header a 401 at worst, the fault API JSON-only, and vLLM targets scraped
within a wall-clock deadline and a byte cap, credentials kept out of labels."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator

import bcrypt
import pytest
from starlette.testclient import TestClient

from exporter.collectors.vllm import VllmCollector
from exporter.config import ConfigError, assemble, load
from exporter.registry import Exporter
from exporter.scrape import Target, scrape_all
from exporter.server import build_app, guarded
from exporter.web_config import WebConfig, load_web_config

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # htpasswd writes $2y$


def _web(tmp_path, text: str) -> WebConfig:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return load_web_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tls_server_config: {cert_file: a, key_file: b, cipher_suites: [X]}", "cipher_suites is not supported"),
        ("tls_server_config: {cert_file: a, key_file: b, client_allowed_sans: [x]}", "client SANs"),
        ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert}", "without verifying"),
        (
            "tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAndVerifyClientCert}",
            "client_ca_file",
        ),
        ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS13, max_version: TLS12}", "above max_version"),
        ("tls_server_config: {cert_file: /nope.crt, key_file: /nope.key}", "cannot load the TLS files"),
        ("basic_auth_users: {prometheus: plaintext}", "bcrypt hash"),
        ("rate_limit: {interval: 1s, burst: 5}", "rate_limit is not supported"),
        ("bogus: 1", "bogus"),
        ("[", "not valid YAML"),
    ],
)
def test_what_cannot_be_honoured_is_refused_in_one_line(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message) as error:
        _web(tmp_path, text)
    assert "\n" not in str(error.value)


@pytest.fixture
def emulated_app(tmp_path) -> Iterator[tuple[TestClient, WebConfig]]:
    web = _web(
        tmp_path,
        f"basic_auth_users: {{prometheus: '{HASH}'}}\nhttp_server_config: {{headers: {{X-Frame-Options: deny}}}}\n",
    )
    config = load(None, {"gpu": "emulated"})
    assembly = assemble(config)
    exporter = Exporter(assembly.collectors, interval=0)
    with TestClient(guarded(build_app(exporter, assembly), config, web)) as client:
        yield client, web
    exporter.stop()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_probes_stay_open_while_metrics_need_the_password(emulated_app):
    client, _ = emulated_app
    assert client.get("/-/healthy").status_code == 200 and client.get("/-/ready").status_code == 200
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
    assert client.get("/metrics", headers=_basic("prometheus", "nope")).status_code == 401
    assert client.get("/metrics", headers=_basic("nobody", "pw")).status_code == 401
    page = client.get("/metrics", headers=_basic("prometheus", "pw"))
    assert page.status_code == 200 and b"DCGM_FI_DEV_GPU_TEMP" in page.content
    assert page.headers["x-frame-options"] == "deny"  # the web config's response headers


@pytest.mark.parametrize(
    "header",
    ["Basic \u00e9\u00e9".encode(), b"Basic !!!!", b"Bearer \xff\xfe", b"Basic " + base64.b64encode(b"no-colon")],
)
def test_any_authorization_header_is_a_401_never_a_500(emulated_app, header):
    client, _ = emulated_app
    assert client.get("/metrics", headers={"authorization": header}).status_code == 401


def test_the_fault_api_takes_json_only_and_needs_auth(emulated_app):
    client, _ = emulated_app
    fault = b'{"gpu": 0, "fault": "xid", "xid": 79}'
    assert client.post("/-/faults", content=fault, headers={"content-type": "application/json"}).status_code == 401
    cross_origin = {"content-type": "text/plain", **_basic("prometheus", "pw")}  # a browser's simple POST
    assert client.post("/-/faults", content=fault, headers=cross_origin).status_code == 415
    good = {"content-type": "application/json", **_basic("prometheus", "pw")}
    assert client.post("/-/faults", content=fault, headers=good).status_code == 201


def test_no_fault_api_without_emulated_gpus():
    config = load(None, {"gpu": "none"})
    assembly = assemble(config)
    with TestClient(guarded(build_app(Exporter(assembly.collectors, interval=0), assembly), config, WebConfig())) as c:
        assert c.post("/-/faults", json={"gpu": 0, "fault": "xid"}).status_code == 404


# --- scraping vLLM targets ---------------------------------------------------------------------


class _Target:
    """A raw HTTP target: `drip` sends its page a byte at a time, forever; else `body` at once."""

    def __init__(self, body: bytes = b"", drip: bool = False) -> None:
        self.body, self.drip = body, drip
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n")
            if not self.drip:
                conn.sendall(b"content-length: %d\r\n\r\n" % len(self.body) + self.body)
                return
            conn.sendall(b"transfer-encoding: chunked\r\n\r\n")
            while not self.stop.is_set():  # a chunk every 0.2 s: no read ever times out
                try:
                    conn.sendall(b"1\r\n#\r\n")
                except OSError:
                    return
                self.stop.wait(0.2)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"


def test_a_slow_drip_target_is_cut_at_the_deadline_and_the_others_still_scraped():
    drip, good = _Target(drip=True), _Target(PAGE)
    try:
        slow, fast = scrape_all([Target.of(drip.url), Target.of(good.url)], deadline=1.0, max_bytes=1 << 20)
    finally:
        drip.close()
        good.close()
    assert not slow.up and "no page within 1 s" in slow.error
    assert fast.up and fast.families[0].samples[0].value == 3


def test_a_page_over_the_cap_is_refused():
    big = _Target(PAGE + b"# " + b"x" * (2 << 20) + b"\n")
    try:
        (result,) = scrape_all([Target.of(big.url)], deadline=10.0, max_bytes=1 << 20)
    finally:
        big.close()
    assert not result.up and "cap" in result.error


def test_credentials_go_in_the_header_never_in_the_target_label():
    target = Target.of("http://scraper:hunter2@10.0.0.1:8000/metrics")
    assert target.url == "http://10.0.0.1:8000/metrics"
    assert target.authorization == "Basic " + base64.b64encode(b"scraper:hunter2").decode()
    collector = VllmCollector(["http://scraper:hunter2@127.0.0.1:9/metrics"], timeout=0.5)
    names = {s.labels.get("target", "") for family in collector.collect() for s in family.samples}
    assert names and not any("hunter2" in name for name in names)
    assert Target.of("http://a:8000/metrics", b"tok").authorization == "Bearer tok"
