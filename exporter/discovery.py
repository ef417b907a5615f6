"""Finding the vLLM engines on this node without a target list.

Two methods, each returning /metrics URLs:

- procfs: processes whose command line is exactly a vLLM API server (`python -m
  vllm.entrypoints.openai.api_server`, `vllm serve`) or `kvscope serve`, and the TCP ports that
  process (or a child of it) listens on, read from /proc/PID/net/tcp{,6} and /proc/PID/fd. GPU
  processes (NVML's list) and their parents are looked at first.
- kubernetes / kubelet: the Running pods scheduled on this node that ask to be scraped
  (`kvscope.io/vllm-port`, or `prometheus.io/*` on a vLLM or kvscope pod), listed through the
  API server (field selector spec.nodeName) or the kubelet, with the service account's token.

Deny by default: anything that is not exactly one of those command lines or annotations is not a
target, and a procfs URL is always on a port the process itself listens on.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from prometheus_client.core import Metric

from exporter.exposition import Series
from kvscope import catalog

log = logging.getLogger("kvscope.export.discovery")

METHODS = ("procfs", "kubernetes", "kubelet")
VLLM_DEFAULT_PORT = 8000  # vLLM's and kvscope serve's default --port
MAX_PROCESSES = 4096  # processes whose command line one procfs scan reads
MAX_SOCKET_LINES = 65536  # lines of one /proc/PID/net/tcp file read
MAX_FDS = 4096  # file descriptors of one process looked at
MAX_DESCENDANTS = 64  # children (and theirs) of one engine process looked at
MAX_PORTS = 4  # listeners of one engine kept when several are as likely
MAX_POD_LIST_BYTES = 32 << 20
_LISTEN = "0A"
_PYTHON_MODULES = {
    "vllm.entrypoints.openai.api_server": (),
    "vllm.entrypoints.cli.main": ("serve",),
    "kvscope.cli": ("serve",),
    "kvscope": ("serve",),
}
_CONSOLE_SCRIPTS = {"vllm": ("serve",), "kvscope": ("serve",)}


class Method(Protocol):
    name: str

    def discover(self) -> list[str]:
        """The /metrics URLs this method finds now."""
        ...


# --- procfs ------------------------------------------------------------------------------------


def _is_python(arg0: str) -> bool:
    base = PurePosixPath(arg0).name
    rest = base.removeprefix("python")
    return base.startswith("python") and all(c.isdigit() or c == "." for c in rest)


def is_engine_cmdline(argv: Sequence[str]) -> bool:
    """True only for the exact command lines of a vLLM API server or `kvscope serve`."""
    if not argv:
        return False
    base = PurePosixPath(argv[0]).name
    if base in _CONSOLE_SCRIPTS:  # a console script exec'd directly
        return tuple(argv[1 : 1 + len(_CONSOLE_SCRIPTS[base])]) == _CONSOLE_SCRIPTS[base]
    if not _is_python(argv[0]):
        return False
    i = 1
    while i < len(argv) and argv[i].startswith("-"):  # the interpreter's own options
        option = argv[i]
        if option == "-m":
            module = argv[i + 1] if i + 1 < len(argv) else ""
            words = _PYTHON_MODULES.get(module)
            return words is not None and tuple(argv[i + 2 : i + 2 + len(words)]) == words
        if option in ("-c", "--"):
            return False
        i += 2 if option in ("-X", "-W") else 1
    if i >= len(argv):
        return False
    # `python /venv/bin/vllm serve ...`: what a console script's shebang line makes of it
    script = PurePosixPath(argv[i]).name
    words = _CONSOLE_SCRIPTS.get(script)
    return words is not None and tuple(argv[i + 1 : i + 1 + len(words)]) == words


def _port_flag(argv: Sequence[str]) -> int | None:
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--port" and i + 1 < len(argv) else arg.partition("=")[2]
        if (arg == "--port" or arg.startswith("--port=")) and value.isdigit():
            return int(value)
    return None


def _tls(argv: Sequence[str]) -> bool:
    return any(a.split("=")[0] in ("--ssl-certfile", "--tls-cert") for a in argv)


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """/proc/net/tcp's address: 32-bit words in host (little-endian) byte order."""
    try:
        raw = bytes.fromhex(hex_address)
    except ValueError:
        return None
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    if len(raw) == 16:
        v6 = ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
        return v6.ipv4_mapped or v6
    return None


def parse_listeners(lines: Iterable[str]) -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of each LISTEN socket of a /proc/net/tcp or tcp6 file."""
    out: dict[int, tuple[str, int]] = {}
    for n, line in enumerate(lines):
        if n == 0:
            continue  # the header
        if n > MAX_SOCKET_LINES:
            break
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN or not fields[9].isdigit():
            continue
        address, _, port = fields[1].partition(":")
        ip = _address(address)
        if ip is None or not port:
            continue
        try:
            out[int(fields[9])] = (str(ip), int(port, 16))
        except ValueError:
            continue
    return out


def parse_fib_trie_local(lines: Iterable[str]) -> list[str]:
    """The local IPv4 addresses (not loopback) of a network namespace's /proc/net/fib_trie."""
    found: list[str] = []
    last = ""
    for n, line in enumerate(lines):
        if n > MAX_SOCKET_LINES:
            break
        text = line.strip()
        if text.startswith("|--"):
            last = text[3:].strip()
        elif text == "/32 host LOCAL" and last and not last.startswith("127.") and last not in found:
            found.append(last)
    return found


@dataclass
class _Scan:
    """What one scan has read, so that nothing is read twice."""

    listeners: dict[str, dict[int, tuple[str, int]]] = field(default_factory=dict)  # by netns
    parents: dict[int, int] | None = None


class ProcfsDiscovery:
    """vLLM and `kvscope serve` processes on this machine, from /proc (`root`, for tests)."""

    name = "procfs"

    def __init__(
        self,
        root: Path | str = "/proc",
        gpu_pids: Callable[[], Iterable[int]] | None = None,
        max_processes: int = MAX_PROCESSES,
    ) -> None:
        self.root = Path(root)
        self.gpu_pids = gpu_pids
        self.max_processes = max_processes
        self._own_netns = self._netns("self")

    def discover(self) -> list[str]:
        scan = _Scan()
        urls: list[str] = []
        for pid in self._candidates():
            argv = self._cmdline(pid)
            if argv is None or not is_engine_cmdline(argv):
                continue
            for url in self._urls(pid, argv, scan):
                if url not in urls:
                    urls.append(url)
        return urls

    # which processes, in which order
    def _candidates(self) -> Iterator[int]:
        seen: set[int] = set()
        preferred: list[int] = []
        if self.gpu_pids is not None:
            try:
                for pid in self.gpu_pids():
                    chain = [pid]
                    for _ in range(4):  # the engine core is a child of the API server
                        parent = self._ppid(chain[-1])
                        if parent is None or parent <= 1:
                            break
                        chain.append(parent)
                    preferred += chain
            except Exception as exc:  # the GPU readings are a hint, never a reason to fail
                log.debug("GPU processes not available for discovery: %s", exc)
        try:
            rest = [int(e.name) for e in os.scandir(self.root) if e.name.isdigit()]
        except OSError as exc:
            log.warning("cannot list %s: %s", self.root, exc)
            rest = []
        for pid in [*preferred, *sorted(rest)]:
            if pid in seen:
                continue
            if len(seen) >= self.max_processes:
                return
            seen.add(pid)
            yield pid

    def _read(self, *parts: str | int) -> bytes | None:
        try:
            with self.root.joinpath(*map(str, parts)).open("rb") as f:
                return f.read(1 << 16)
        except OSError:  # gone, or not ours to read
            return None

    def _cmdline(self, pid: int) -> list[str] | None:
        raw = self._read(pid, "cmdline")
        if not raw:
            return None
        return raw.decode("utf-8", "replace").rstrip("\0").split("\0")

    def _ppid(self, pid: int) -> int | None:
        raw = self._read(pid, "stat")
        if not raw:
            return None
        # the name in parentheses may hold spaces and parentheses: the fields follow the last ")"
        fields = raw.decode("utf-8", "replace").rpartition(")")[2].split()
        return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None

    def _netns(self, pid: int | str) -> str:
        try:
            return str((self.root / str(pid) / "ns" / "net").readlink())
        except OSError:
            return ""

    def _descendants(self, pid: int, scan: _Scan) -> list[int]:
        out: list[int] = []
        queue = [pid]
        while queue and len(out) < MAX_DESCENDANTS:
            current = queue.pop(0)
            raw = self._task_children(current)
            if raw is not None:
                children = [int(c) for c in raw.split() if c.isdigit()]
            else:  # a kernel without /proc/PID/task/PID/children: from every process's parent
                if scan.parents is None:
                    scan.parents = {}
                    for n, child in enumerate(self._candidates()):
                        if n >= self.max_processes:
                            break
                        parent = self._ppid(child)
                        if parent is not None:
                            scan.parents[child] = parent
                children = [c for c, p in scan.parents.items() if p == current]
            for child in children:
                if child not in out and child != pid:
                    out.append(child)
                    queue.append(child)
        return out[:MAX_DESCENDANTS]

    def _task_children(self, pid: int) -> bytes | None:
        """The children of every thread of `pid` (a child belongs to the thread that forked it);
        None where the kernel has no such file."""
        try:
            with os.scandir(self.root / str(pid) / "task") as tasks:
                tids = [t.name for _, t in zip(range(MAX_FDS), tasks, strict=False) if t.name.isdigit()]
        except OSError:
            return None
        parts = [raw for tid in tids if (raw := self._read(pid, "task", tid, "children")) is not None]
        return b" ".join(parts) if parts else None

    def _socket_inodes(self, pid: int) -> set[int]:
        inodes: set[int] = set()
        try:
            with os.scandir(self.root / str(pid) / "fd") as entries:
                for n, entry in enumerate(entries):
                    if n >= MAX_FDS:
                        break
                    try:
                        link = str(Path(entry.path).readlink())
                    except OSError:
                        continue
                    if link.startswith("socket:[") and link.endswith("]") and link[8:-1].isdigit():
                        inodes.add(int(link[8:-1]))
        except OSError:  # another user's process: not ours to look into
            return set()
        return inodes

    def _listeners(self, pid: int, netns: str, scan: _Scan) -> dict[int, tuple[str, int]]:
        key = netns or f"pid:{pid}"
        if key not in scan.listeners:
            table: dict[int, tuple[str, int]] = {}
            for name in ("tcp", "tcp6"):
                raw = self._read_all(pid, "net", name)
                if raw is not None:
                    table |= parse_listeners(raw.splitlines())
            scan.listeners[key] = table
        return scan.listeners[key]

    def _read_all(self, pid: int, *parts: str) -> str | None:
        try:
            with self.root.joinpath(str(pid), *parts).open(encoding="ascii", errors="replace") as f:
                return "".join(line for _, line in zip(range(MAX_SOCKET_LINES + 1), f, strict=False))
        except OSError:
            return None

    def _host(self, address: str, pid: int, netns: str) -> str | None:
        ip = ipaddress.ip_address(address)
        elsewhere = bool(netns and self._own_netns and netns != self._own_netns)
        if ip.is_unspecified or ip.is_loopback:
            if not elsewhere:
                return "[::1]" if address == "::1" else "127.0.0.1"
            if ip.is_loopback:
                return None  # another namespace's loopback: not reachable from here
            # a wildcard listener in a pod's network namespace: reachable on the pod's address
            local = parse_fib_trie_local((self._read_all(pid, "net", "fib_trie") or "").splitlines())
            return local[0] if local else None
        return f"[{address}]" if ip.version == 6 else address

    def _urls(self, pid: int, argv: list[str], scan: _Scan) -> list[str]:
        netns = self._netns(pid)
        found: dict[int, str] = {}  # port -> host
        for process in [pid, *self._descendants(pid, scan)]:
            inodes = self._socket_inodes(process)
            if not inodes:
                continue
            table = self._listeners(process, self._netns(process) or netns, scan)
            for inode in inodes & table.keys():
                address, port = table[inode]
                host = self._host(address, process, netns)
                if host is not None:
                    found.setdefault(port, host)
        if not found:
            log.debug("pid %d runs an engine but listens on nothing yet: retried next interval", pid)
            return []
        wanted = _port_flag(argv)
        if wanted is None:
            wanted = VLLM_DEFAULT_PORT if VLLM_DEFAULT_PORT in found else None
        if wanted is not None:
            ports = [wanted] if wanted in found else []
        elif len(found) == 1:
            ports = list(found)
        else:
            log.debug("pid %d listens on %s, none of them its --port: skipped", pid, sorted(found))
            ports = []
        scheme = "https" if _tls(argv) else "http"
        return [f"{scheme}://{found[p]}:{p}/metrics" for p in ports[:MAX_PORTS]]


# --- Kubernetes --------------------------------------------------------------------------------

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
KVSCOPE_PORT = "kvscope.io/vllm-port"
KVSCOPE_PATH = "kvscope.io/vllm-path"
KVSCOPE_SCHEME = "kvscope.io/vllm-scheme"
KVSCOPE_SCRAPE = "kvscope.io/scrape"
PROM_SCRAPE = "prometheus.io/scrape"
PROM_PORT = "prometheus.io/port"
PROM_PATH = "prometheus.io/path"
PROM_SCHEME = "prometheus.io/scheme"


def _valid_path(path: str) -> bool:
    return path.startswith("/") and path.isascii() and not any(c.isspace() or c in "?#@" for c in path)


def _looks_like_engine(spec: Mapping[str, Any]) -> bool:
    for container in spec.get("containers") or []:
        image = str(container.get("image", "")).rpartition("/")[2]
        if image.startswith(("vllm", "kvscope")):
            return True
    return False


def pod_target(pod: Mapping[str, Any]) -> str | None:
    """A pod's /metrics URL, or None when it does not ask for it (deny by default)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    notes: Mapping[str, str] = meta.get("annotations") or {}
    ip = str(status.get("podIP") or "")
    if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
        return None
    if str(notes.get(KVSCOPE_SCRAPE, "")).lower() == "false":
        return None
    if KVSCOPE_PORT in notes:
        port, path, scheme = notes[KVSCOPE_PORT], notes.get(KVSCOPE_PATH, "/metrics"), notes.get(KVSCOPE_SCHEME, "http")
    elif str(notes.get(PROM_SCRAPE, "")).lower() == "true" and (
        str(notes.get(KVSCOPE_SCRAPE, "")).lower() == "true" or _looks_like_engine(pod.get("spec") or {})
    ):
        # any exporter on the node may carry prometheus.io/*: only a vLLM or kvscope pod's count here
        port, path, scheme = notes.get(PROM_PORT, ""), notes.get(PROM_PATH, "/metrics"), notes.get(PROM_SCHEME, "http")
    else:
        return None
    port = str(port)
    if not port.isdigit() or not 0 < int(port) < 65536 or scheme not in ("http", "https") or not _valid_path(path):
        return None
    try:
        host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return None
    return f"{scheme}://{host}:{int(port)}{path}"


def pod_targets(pod_list: Mapping[str, Any]) -> list[str]:
    urls: list[str] = []
    for pod in pod_list.get("items") or []:
        url = pod_target(pod) if isinstance(pod, Mapping) else None
        if url is not None and url not in urls:
            urls.append(url)
    return urls


class KubernetesDiscovery:
    """The pods on this node, from the API server (`kubernetes`) or the kubelet (`kubelet`)."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "kubernetes",
        node_name: str | None = None,
        token_file: Path = SERVICE_ACCOUNT / "token",
        ca_file: Path | None = SERVICE_ACCOUNT / "ca.crt",
        timeout: float = 5.0,
        insecure_skip_verify: bool = False,
    ) -> None:
        self.name = name
        self.insecure_skip_verify = insecure_skip_verify
        self.url = url
        self.node_name = node_name
        self.token_file = token_file
        self.ca_file = ca_file
        self.timeout = timeout

    @classmethod
    def in_cluster(cls, env: Mapping[str, str] = os.environ, **kwargs: Any) -> KubernetesDiscovery:
        """The API server from the pod's environment; $NODE_NAME (the downward API) is this node."""
        host, port, node = (
            env.get("KUBERNETES_SERVICE_HOST"),
            env.get("KUBERNETES_SERVICE_PORT", "443"),
            env.get("NODE_NAME"),
        )
        if not host or not node:
            raise ValueError(
                "--discover kubernetes needs KUBERNETES_SERVICE_HOST (in-cluster) and NODE_NAME "
                "(the downward API's spec.nodeName)"
            )
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}/api/v1/pods", node_name=node, **kwargs)

    @classmethod
    def kubelet(cls, env: Mapping[str, str] = os.environ, **kwargs: Any) -> KubernetesDiscovery:
        """The kubelet's pod list (every pod of its node): $KVSCOPE_KUBELET_URL, else
        https://$NODE_IP:10250/pods, with the service account's token (the kubelet authorises it
        as `nodes/proxy` get) over TLS verified against the cluster CA (the kubelet's serving
        certificate is signed by it with serverTLSBootstrap), or not verified at all where the
        user says so (`kubelet_insecure_skip_verify`: kubelets with self-signed certificates)."""
        url = env.get("KVSCOPE_KUBELET_URL")
        if not url:
            ip = env.get("NODE_IP")
            if not ip:
                raise ValueError(
                    "--discover kubelet needs NODE_IP (the downward API's status.hostIP) or KVSCOPE_KUBELET_URL"
                )
            url = f"https://{f'[{ip}]' if ':' in ip else ip}:10250/pods"
        return cls(url, name="kubelet", **kwargs)

    def _verify(self) -> ssl.SSLContext | bool:
        if not self.url.startswith("https://") or self.insecure_skip_verify:
            return False
        if self.ca_file is not None and self.ca_file.exists():
            return ssl.create_default_context(cafile=str(self.ca_file))
        return True  # the system's trust store

    def discover(self) -> list[str]:
        import httpx

        headers = {"accept": "application/json"}
        try:
            token = self.token_file.read_text().strip()  # read each time: bound tokens rotate
        except OSError:
            token = ""
        if token:
            headers["authorization"] = f"Bearer {token}"
        params = {"fieldSelector": f"spec.nodeName={self.node_name}"} if self.node_name else None
        with (
            httpx.Client(timeout=self.timeout, verify=self._verify(), follow_redirects=False) as client,
            client.stream("GET", self.url, params=params, headers=headers) as response,
        ):
            response.raise_for_status()
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_POD_LIST_BYTES:
                    raise ValueError(f"{self.name}: the pod list is over {MAX_POD_LIST_BYTES:,} bytes")
        import json

        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError(f"{self.name}: not a pod list")
        return pod_targets(data)


# --- the collector -----------------------------------------------------------------------------


class DiscoveryCollector:
    """Runs the methods every `interval` seconds (on the collection that falls due) and keeps
    what they found; a method that fails keeps its last list and makes the collector unhealthy."""

    name = "discovery"

    def __init__(self, methods: Sequence[Method], interval: float) -> None:
        self.methods = list(methods)
        self.interval = interval
        self.healthy = True
        self._found: dict[str, list[str]] = {m.name: [] for m in self.methods}
        self._next = 0.0
        self._lock = threading.Lock()

    def current(self) -> dict[str, str]:
        """url -> the method that found it (the first one, when several did)."""
        with self._lock:
            found = dict(self._found)
        out: dict[str, str] = {}
        for method, urls in found.items():
            for url in urls:
                out.setdefault(url, method)
        return out

    def refresh(self) -> None:
        healthy = True
        for method in self.methods:
            try:
                urls = method.discover()
            except Exception as exc:  # an API server down costs this method's freshness only
                healthy = False
                log.warning("discovery %s failed: %s", method.name, exc)
                continue
            with self._lock:
                self._found[method.name] = urls
        self.healthy = healthy

    def collect(self) -> Iterable[Metric]:
        now = time.monotonic()
        # a little slack: the collection loop's own period would otherwise skip every other one
        if now >= self._next - 0.05 * self.interval:
            self.refresh()
            self._next = now + self.interval
        gauge = Series(catalog.DISCOVERY_TARGETS)
        with self._lock:
            for method, urls in self._found.items():
                gauge.add((method,), len(urls))
        yield gauge.metric
