"""Discovery of vLLM targets on the node: procfs against a fake /proc tree, Kubernetes against a
stand-in API server, and the vLLM collector following what was found."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from exporter.collectors.vllm import VllmCollector
from exporter.config import ConfigError, ExportConfig, assemble
from exporter.discovery import (
    DiscoveryCollector,
    KubernetesDiscovery,
    ProcfsDiscovery,
    is_engine_cmdline,
    parse_listeners,
    pod_target,
)
from exporter.exposition import render
from kvscope import catalog, promtext
from tests.fakes.pages import PageServer

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
PY = "/venv/bin/python3.11"


def _v4(ip: str, port: int) -> str:
    return "".join(f"{int(o):02X}" for o in reversed(ip.split("."))) + f":{port:04X}"


def _v6(words: Sequence[int], port: int) -> str:
    """/proc/net/tcp6's spelling: four 32-bit words, each in little-endian byte order."""
    return "".join(w.to_bytes(4, "big")[::-1].hex().upper() for w in words) + f":{port:04X}"


V6_ANY = (0, 0, 0, 0)
V6_LOOPBACK = (0, 0, 0, 1)


def _line(local: str, inode: int, state: str = "0A") -> str:
    return f"   0: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0\n"


def send_json(handler: BaseHTTPRequestHandler, code: int, body: object) -> None:
    """Answer a stand-in API request with `body` as JSON."""
    raw = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


class FakeProc:
    """A /proc tree: processes with a command line, a parent, sockets and their net tables."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "self" / "ns").mkdir(parents=True)
        (root / "self" / "ns" / "net").symlink_to("net:[4026531840]")

    def process(
        self,
        pid: int,
        argv: Sequence[str] | bytes,
        *,
        ppid: int = 1,
        sockets: Sequence[int] = (),
        tcp: Sequence[str] = (),
        tcp6: Sequence[str] = (),
        children: Sequence[int] = (),
        netns: str = "net:[4026531840]",
        fib_trie: str | None = None,
    ) -> Path:
        d = self.root / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "net").mkdir()
        (d / "ns").mkdir()
        (d / "task" / str(pid)).mkdir(parents=True)
        raw = argv if isinstance(argv, bytes) else b"\0".join(a.encode() for a in argv) + b"\0"
        (d / "cmdline").write_bytes(raw)
        (d / "stat").write_text(f"{pid} (a (weird) name) S {ppid} 1 1 0 -1\n")
        (d / "ns" / "net").symlink_to(netns)
        (d / "task" / str(pid) / "children").write_text(" ".join(map(str, children)) + (" " if children else ""))
        (d / "fd" / "0").symlink_to("/dev/null")
        for n, inode in enumerate(sockets, start=3):
            (d / "fd" / str(n)).symlink_to(f"socket:[{inode}]")
        (d / "net" / "tcp").write_text(HEADER + "".join(tcp))
        (d / "net" / "tcp6").write_text(HEADER + "".join(tcp6))
        if fib_trie is not None:
            (d / "net" / "fib_trie").write_text(fib_trie)
        return d


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


def _found(proc: FakeProc, **kwargs) -> list[str]:
    return ProcfsDiscovery(proc.root, **kwargs).discover()


# --- command lines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
        [PY, "-u", "-X", "dev", "-m", "vllm.entrypoints.openai.api_server"],
        [PY, "/venv/bin/vllm", "serve", "m"],  # a console script, as its shebang line runs it
        ["/usr/local/bin/vllm", "serve", "m"],
        [PY, "-m", "kvscope.cli", "serve", "--port", "8000"],
        [PY, "/venv/bin/kvscope", "serve"],
        ["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"],
    ],
)
def test_the_exact_engine_command_lines_are_accepted(argv):
    assert is_engine_cmdline(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/bin/vllm-evil", "serve"],
        [PY, "/opt/tools/vllm-evil", "serve"],
        [PY, "evil.py", "-m", "vllm.entrypoints.openai.api_server"],
        [PY, "evil.py", "vllm.entrypoints.openai.api_server", "vllm serve"],
        [PY, "-c", "import vllm.entrypoints.openai.api_server", "-m", "vllm.entrypoints.openai.api_server"],
        [PY, "-m", "vllm_evil.entrypoints.openai.api_server"],
        [PY, "-m", "kvscope.cli", "export", "--vllm", "http://x/metrics"],  # the exporter itself
        [PY, "/venv/bin/vllm", "bench", "serve"],
        ["bash", "-c", "vllm serve m"],
        ["notpython", "-m", "vllm.entrypoints.openai.api_server"],
        [f"{PY} -m vllm.entrypoints.openai.api_server --port 8000"],  # rewritten into one string
        ["VLLM::EngineCore"],
        [],
    ],
)
def test_lookalikes_are_refused(argv):
    assert not is_engine_cmdline(argv)


# --- procfs -------------------------------------------------------------------------------------


def test_an_api_server_is_found_on_the_port_it_listens_on(proc):
    proc.process(
        100,
        [PY, "-m", "vllm.entrypoints.openai.api_server", "--served-model-name", "my model", "--port", "8123"],
        sockets=[5001, 5002],
        tcp=[_line(_v4("0.0.0.0", 8123), 5001), _line(_v4("127.0.0.1", 41000), 5002, state="01")],
    )
    assert _found(proc) == ["http://127.0.0.1:8123/metrics"]


def test_nuls_and_spaces_in_the_command_line_are_arguments_not_separators(proc):
    argv = b"\0".join([PY.encode(), b"-m", b"kvscope.cli", b"serve", b"--model", b"/models/my model\0\0"])
    proc.process(101, argv, sockets=[7], tcp=[_line(_v4("127.0.0.1", 8000), 7)])
    assert _found(proc) == ["http://127.0.0.1:8000/metrics"]


@pytest.mark.parametrize(
    ("address", "url"),
    [
        (_v6(V6_ANY, 9000), "http://127.0.0.1:9000/metrics"),
        (_v6(V6_LOOPBACK, 9000), "http://[::1]:9000/metrics"),
        (_v6((0x20010DB8, 0, 0, 5), 9000), "http://[2001:db8::5]:9000/metrics"),
        (_v6((0, 0, 0xFFFF, 0x0A000005), 9000), "http://10.0.0.5:9000/metrics"),  # v4-mapped
    ],
)
def test_ipv6_listeners(proc, address, url):
    proc.process(102, [PY, "/venv/bin/vllm", "serve", "m", "--port", "9000"], sockets=[9], tcp6=[_line(address, 9)])
    assert _found(proc) == [url]


def test_a_port_another_process_listens_on_is_not_the_engines(proc):
    proc.process(103, [PY, "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"], sockets=[])
    proc.process(104, ["/usr/sbin/nginx"], sockets=[11], tcp=[_line(_v4("0.0.0.0", 8000), 11)])
    proc.process(105, [PY, "-m", "kvscope.cli", "serve"], sockets=[12], tcp=[_line(_v4("0.0.0.0", 8000), 11)])
    assert _found(proc) == []


def test_unreadable_fds_skip_the_process_quietly(proc):
    hidden = proc.process(106, ["/usr/bin/vllm", "serve"], sockets=[13], tcp=[_line(_v4("0.0.0.0", 8000), 13)])
    for entry in (hidden / "fd").iterdir():
        entry.unlink()
    (hidden / "fd").rmdir()
    (hidden / "fd").write_text("")  # reading the folder fails, as another user's does
    odd = proc.process(
        107, ["/usr/bin/vllm", "serve", "--port=8100"], sockets=[14], tcp=[_line(_v4("0.0.0.0", 8100), 14)]
    )
    (odd / "fd" / "9").write_text("not a link")  # one unreadable entry costs only itself
    (proc.root / "108").mkdir()  # a process that vanished: no files at all
    assert _found(proc) == ["http://127.0.0.1:8100/metrics"]


def test_a_listener_of_a_child_process_counts(proc):
    proc.process(110, [PY, "/venv/bin/vllm", "serve", "m", "--port", "8200"], children=[111])
    proc.process(111, ["VLLM::APIServer_0"], ppid=110, sockets=[21], tcp=[_line(_v4("0.0.0.0", 8200), 21)])
    assert _found(proc) == ["http://127.0.0.1:8200/metrics"]


def test_a_child_forked_by_another_thread_counts_too(proc):
    d = proc.process(112, ["/usr/bin/vllm", "serve"])
    (d / "task" / "113").mkdir()
    (d / "task" / "113" / "children").write_text("114 ")
    proc.process(114, ["VLLM::APIServer_0"], ppid=112, sockets=[22], tcp=[_line(_v4("0.0.0.0", 8000), 22)])
    assert _found(proc) == ["http://127.0.0.1:8000/metrics"]


def test_an_engine_with_no_listener_yet_is_found_on_a_later_scan(proc):
    d = proc.process(120, [PY, "-m", "vllm.entrypoints.openai.api_server"])
    discovery = ProcfsDiscovery(proc.root)
    assert discovery.discover() == []
    (d / "fd" / "3").symlink_to("socket:[31]")
    (d / "net" / "tcp").write_text(HEADER + _line(_v4("0.0.0.0", 8000), 31))
    assert discovery.discover() == ["http://127.0.0.1:8000/metrics"]


def test_several_listeners_without_a_port_flag_use_the_default_port_or_none(proc):
    tcp = [_line(_v4("0.0.0.0", 8000), 41), _line(_v4("127.0.0.1", 5555), 42), _line(_v4("127.0.0.1", 6666), 43)]
    proc.process(130, ["/usr/bin/vllm", "serve"], sockets=[41, 42], tcp=tcp)
    proc.process(131, ["/usr/bin/vllm", "serve"], sockets=[42, 43], tcp=tcp)  # which one? neither
    assert _found(proc) == ["http://127.0.0.1:8000/metrics"]


def test_a_wildcard_listener_in_a_pods_network_namespace_is_reached_on_the_pods_address(proc):
    trie = "Local:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.244.1.7\n        /32 host LOCAL\n     |-- 127.0.0.1\n        /32 host LOCAL\n"
    proc.process(
        140,
        ["/usr/bin/vllm", "serve"],
        sockets=[51],
        tcp=[_line(_v4("0.0.0.0", 8000), 51)],
        netns="net:[4026532999]",
        fib_trie=trie,
    )
    proc.process(
        141, ["/usr/bin/vllm", "serve"], sockets=[52], tcp=[_line(_v4("127.0.0.1", 8000), 52)], netns="net:[4026533000]"
    )  # its loopback is not ours
    assert _found(proc) == ["http://10.244.1.7:8000/metrics"]


def test_gpu_processes_and_their_parents_come_first_within_the_cap(proc):
    for pid in range(10, 20):
        proc.process(pid, ["/usr/bin/sleep", "1000"])
    proc.process(900, [PY, "-m", "kvscope.cli", "serve"], sockets=[61], tcp=[_line(_v4("0.0.0.0", 8000), 61)])
    proc.process(901, ["VLLM::EngineCore"], ppid=900)
    assert _found(proc, max_processes=3) == []  # the cap: only the first three processes are read
    assert _found(proc, max_processes=3, gpu_pids=lambda: [901]) == ["http://127.0.0.1:8000/metrics"]


def test_the_parser_keeps_only_listening_sockets_and_ignores_junk():
    lines = [
        HEADER,
        _line(_v4("0.0.0.0", 80), 1),
        _line(_v4("1.2.3.4", 81), 2, state="01"),
        "garbage\n",
        "   9: zz:zz 0 0A a b c d e f\n",
    ]
    assert parse_listeners(lines) == {1: ("0.0.0.0", 80)}


def test_the_real_proc_scan_is_bounded_and_does_not_fail():
    assert isinstance(ProcfsDiscovery(max_processes=50).discover(), list)


# --- Kubernetes ---------------------------------------------------------------------------------


def _pod(
    name: str,
    annotations: dict[str, str],
    *,
    phase: str = "Running",
    ip: str = "10.0.0.9",
    image: str = "vllm/vllm-openai:v0.32",
) -> dict:
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": image}]},
        "status": {"phase": phase, "podIP": ip},
    }


PODS = [
    _pod("kv", {"kvscope.io/vllm-port": "8000"}, ip="10.0.0.1", image="example/anything"),
    _pod(
        "prom",
        {"prometheus.io/scrape": "true", "prometheus.io/port": "9000", "prometheus.io/path": "/m"},
        ip="10.0.0.2",
    ),
    _pod("v6", {"kvscope.io/vllm-port": "8000", "kvscope.io/vllm-scheme": "https"}, ip="fd00::7"),
    _pod("node-exporter", {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"}, image="prom/node-exporter"),
    _pod(
        "opted-in",
        {"prometheus.io/scrape": "true", "prometheus.io/port": "9300", "kvscope.io/scrape": "true"},
        ip="10.0.0.3",
        image="x/y",
    ),
    _pod("pending", {"kvscope.io/vllm-port": "8000"}, phase="Pending"),
    _pod("no-ip", {"kvscope.io/vllm-port": "8000"}, ip=""),
    _pod("bad-port", {"kvscope.io/vllm-port": "http"}),
    _pod("bad-path", {"kvscope.io/vllm-port": "8000", "kvscope.io/vllm-path": "/m?x=http://evil"}),
    _pod("bad-scheme", {"kvscope.io/vllm-port": "8000", "kvscope.io/vllm-scheme": "file"}),
    _pod("opted-out", {"kvscope.io/vllm-port": "8000", "kvscope.io/scrape": "false"}),
    _pod("plain", {}),
]
EXPECTED = [
    "http://10.0.0.1:8000/metrics",
    "http://10.0.0.2:9000/m",
    "https://[fd00::7]:8000/metrics",
    "http://10.0.0.3:9300/metrics",
]


class FakeApiServer:
    """Answers GET /api/v1/pods with PODS, only with the bearer token and this node's field selector."""

    def __init__(self, token: str, node: str) -> None:
        self.requests: list[tuple[str, dict[str, list[str]], str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                auth = self.headers.get("authorization", "")
                outer.requests.append((parts.path, query, auth))
                if auth != f"Bearer {token}":
                    self._answer(401, {"kind": "Status", "code": 401})
                elif parts.path != "/api/v1/pods" or query.get("fieldSelector") != [f"spec.nodeName={node}"]:
                    self._answer(400, {"kind": "Status", "code": 400})
                else:
                    self._answer(200, {"kind": "PodList", "items": PODS})

            def _answer(self, code: int, body: dict) -> None:
                send_json(self, code, body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1/pods"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def serve_tls(self, cert: Path, key: Path) -> None:
        """HTTPS, as the API server speaks it (call before the first request)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = self.url.replace("http://", "https://")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _pki(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, its key) of a fresh CA."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, public, issuer: str, *, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    paths = folder / f"{name}-ca.crt", folder / f"{name}.crt", folder / f"{name}.key"
    paths[0].write_bytes(
        cert(f"{name} CA", ca_key.public_key(), f"{name} CA", ca=True).public_bytes(serialization.Encoding.PEM)
    )
    paths[1].write_bytes(
        cert("apiserver", key.public_key(), f"{name} CA", ca=False).public_bytes(serialization.Encoding.PEM)
    )
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer("sa-token", "node-a")
    yield server
    server.close()


def test_pods_on_this_node_that_ask_for_it_are_targets(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    found = KubernetesDiscovery(api.url, node_name="node-a", token_file=token, ca_file=None).discover()
    assert found == EXPECTED
    (path, query, auth) = api.requests[-1]
    assert path == "/api/v1/pods"
    assert query["fieldSelector"] == ["spec.nodeName=node-a"] and auth == "Bearer sa-token"


def test_a_refused_token_keeps_the_last_list_and_marks_discovery_unhealthy(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("sa-token")
    collector = DiscoveryCollector(
        [KubernetesDiscovery(api.url, node_name="node-a", token_file=token, ca_file=None)], 60
    )
    list(collector.collect())
    assert collector.healthy and list(collector.current()) == EXPECTED
    token.write_text("rotated-and-wrong")  # read at each discovery: bound tokens rotate
    collector.refresh()
    assert not collector.healthy and list(collector.current()) == EXPECTED


def test_the_api_server_is_trusted_only_through_the_service_account_ca(tmp_path):
    ca, cert, key = _pki(tmp_path, "cluster")
    other_ca, _, _ = _pki(tmp_path, "other")
    token = tmp_path / "token"
    token.write_text("sa-token")
    server = FakeApiServer("sa-token", "node-a")
    server.serve_tls(cert, key)
    try:
        trusted = KubernetesDiscovery(server.url, node_name="node-a", token_file=token, ca_file=ca)
        assert trusted.discover() == EXPECTED
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            KubernetesDiscovery(server.url, node_name="node-a", token_file=token, ca_file=other_ca).discover()
    finally:
        server.close()


def test_in_cluster_config_needs_the_node_name():
    with pytest.raises(ValueError, match="NODE_NAME"):
        KubernetesDiscovery.in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    k = KubernetesDiscovery.in_cluster(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443", "NODE_NAME": "n"}
    )
    assert (k.url, k.node_name, k.name) == ("https://[fd00::1]:6443/api/v1/pods", "n", "kubernetes")
    assert KubernetesDiscovery.kubelet({"NODE_IP": "10.1.2.3"}).url == "https://10.1.2.3:10250/pods"


def test_a_terminating_pod_is_not_a_target():
    pod = _pod("t", {"kvscope.io/vllm-port": "8000"})
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_target(pod) is None


# --- the vLLM collector follows discovery --------------------------------------------------------

PAGE = f'# TYPE {catalog.VLLM_KV_CACHE_USAGE.name} gauge\n{catalog.VLLM_KV_CACHE_USAGE.name}{{engine="0"}} 0.5\n'


def test_discovered_targets_are_labelled_scraped_and_dropped_when_gone():
    static, found = PageServer(PAGE), PageServer(PAGE)
    current: dict[str, str] = {found.url: "procfs", static.url.replace("127.0.0.1", "localhost"): "procfs"}
    try:
        collector = VllmCollector([static.url], discovered=lambda: dict(current))
        samples = promtext.parse(render(collector.collect()).decode())
        kv = {s.labels["target"]: s.labels for s in promtext.select(samples, catalog.VLLM_KV_CACHE_USAGE.name)}
        assert kv[found.url]["discovered"] == "procfs"
        assert kv[static.url] == {"engine": "0", "target": static.url}  # static wins, listed once
        assert len(kv) == 2
        assert {s.labels["target"] for s in promtext.select(samples, catalog.TARGET_UP.name)} == {static.url, found.url}
        current.clear()
        samples = promtext.parse(render(collector.collect()).decode())
        assert {s.labels["target"] for s in promtext.select(samples, catalog.VLLM_KV_CACHE_USAGE.name)} == {static.url}
        assert {s.labels["target"] for s in promtext.select(samples, catalog.TARGET_UP.name)} == {static.url}
        assert set(collector.latest) == {static.url}
    finally:
        static.close()
        found.close()


# --- configuration ------------------------------------------------------------------------------


def test_procfs_is_the_default_only_without_a_static_list():
    assert ExportConfig().discovery_methods == ["procfs"]
    assert ExportConfig(vllm=["http://a/metrics"]).discovery_methods == []
    assert ExportConfig(vllm=["http://a/metrics"], discover=["procfs,kubernetes"]).discovery_methods == [
        "procfs",
        "kubernetes",
    ]
    assert ExportConfig(discover="none").discovery_methods == []
    assert ExportConfig(collect_interval=2).discovery_interval == 2
    assert ExportConfig(collect_interval=0).discovery_interval == 5
    with pytest.raises(ValueError, match="none goes alone"):
        ExportConfig(discover=["none", "procfs"])


def test_discovery_runs_before_the_vllm_collector_and_kubernetes_outside_a_cluster_is_one_line(monkeypatch):
    names = [c.name for c in assemble(ExportConfig(gpu="none")).collectors]
    assert names.index("discovery") < names.index("vllm")
    assert "discovery" not in [c.name for c in assemble(ExportConfig(gpu="none", vllm=["http://a"])).collectors]
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="NODE_NAME"):
        assemble(ExportConfig(gpu="none", discover=["kubernetes"]))


def test_the_discovery_gauge_counts_by_method(proc):
    proc.process(150, ["/usr/bin/vllm", "serve"], sockets=[71], tcp=[_line(_v4("0.0.0.0", 8000), 71)])
    collector = DiscoveryCollector([ProcfsDiscovery(proc.root)], interval=5)
    samples = promtext.parse(render(collector.collect()).decode())
    assert promtext.total(samples, catalog.DISCOVERY_TARGETS.name, method="procfs") == 1


# --- the kubelet, as the shipped DaemonSet reaches it ------------------------------------------------


def _kubelet_pod(name: str, ip: str, annotations: dict[str, str]) -> dict:
    """A pod as the kubelet's GET /pods lists it: the whole object, as the API server stores it."""
    return {
        "metadata": {
            "name": name,
            "namespace": "inference",
            "uid": f"0b6c8a2e-{name}",
            "resourceVersion": "918273",
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": {"app": "vllm"},
            "annotations": {"kubernetes.io/config.source": "api", **annotations},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-7d9f", "uid": "r1"}],
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.32.0",
                    "args": ["--model", "/models/qwen"],
                    "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "serviceAccountName": "default",
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.20",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0}],
        },
    }


KUBELET_PODS = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {},
    "items": [
        _kubelet_pod("vllm-7d9f-abcde", "10.244.1.17", {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}),
        _kubelet_pod("vllm-7d9f-fghij", "10.244.1.18", {"kvscope.io/vllm-port": "8000"}),
        {**_kubelet_pod("sidecar", "10.244.1.19", {}), "spec": {"nodeName": "gpu-node-1", "containers": []}},
    ],
}


class FakeKubelet:
    """HTTPS on 127.0.0.1 answering GET /pods (no field selector: the kubelet lists its own node's
    pods) only with the service account's bearer token, as the kubelet's webhook authn does."""

    def __init__(self, token: str, cert: Path, key: Path) -> None:
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("authorization", "")))
                ok = self.path == "/pods" and self.headers.get("authorization") == f"Bearer {token}"
                send_json(self, 200 if ok else 401, KUBELET_PODS if ok else {"kind": "Status", "code": 401})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


KUBELET_TARGETS = ["http://10.244.1.17:8000/metrics", "http://10.244.1.18:8000/metrics"]


def test_the_kubelet_is_asked_at_node_ip_with_the_token_and_verified_against_the_cluster_ca(tmp_path):
    ca, cert, key = _pki(tmp_path, "cluster")
    token = tmp_path / "token"
    token.write_text("sa-token\n")
    kubelet = FakeKubelet("sa-token", cert, key)
    try:
        # what the DaemonSet gives it: NODE_IP from status.hostIP (the port is the stand-in's)
        env = {"KVSCOPE_KUBELET_URL": f"https://127.0.0.1:{kubelet.port}/pods"}
        found = KubernetesDiscovery.kubelet(env, token_file=token, ca_file=ca).discover()
        assert found == KUBELET_TARGETS
        assert kubelet.requests[-1] == ("/pods", "Bearer sa-token")
    finally:
        kubelet.close()


def test_a_self_signed_kubelet_is_refused_unless_the_user_says_skip_verify(tmp_path):
    cluster_ca, _, _ = _pki(tmp_path, "cluster")
    _, self_signed, key = _pki(tmp_path, "kubelet-own")  # not signed by the cluster CA
    token = tmp_path / "token"
    token.write_text("sa-token")
    kubelet = FakeKubelet("sa-token", self_signed, key)
    env = {"KVSCOPE_KUBELET_URL": f"https://127.0.0.1:{kubelet.port}/pods"}
    try:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            KubernetesDiscovery.kubelet(env, token_file=token, ca_file=cluster_ca).discover()
        insecure = KubernetesDiscovery.kubelet(env, token_file=token, ca_file=cluster_ca, insecure_skip_verify=True)
        assert insecure.discover() == KUBELET_TARGETS
    finally:
        kubelet.close()


def test_the_exporter_takes_the_skip_verify_setting_to_its_kubelet_discovery(monkeypatch):
    from exporter.config import ExportConfig, _discovery

    monkeypatch.setenv("NODE_IP", "10.0.0.20")
    config = ExportConfig.model_validate({"discover": ["kubelet"], "kubelet_insecure_skip_verify": True})
    collector = _discovery(config, lambda: [])
    (method,) = collector.methods
    assert method.url == "https://10.0.0.20:10250/pods" and method.insecure_skip_verify
