"""The on-call end of a drill: a real Alertmanager (Debian's `prometheus-alertmanager`) routing
kvscope's alerts to `kvscope diagnose --listen`, which forwards each diagnosed alert to a
stand-in for the person's receiver (`Receiver`: what a chat or pager webhook would be given).

Alertmanager runs as a child process with its own storage and clustering off (no gossip port);
never as the system service. Every alert is its own group (`group_by: ['...']`): the webhook
diagnoses each alert of a post, so an alert grouped with others would be diagnosed again each
time its group changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from drill.launcher import DebianPackageMissing, ServerProcess, debian_binary, free_port, running, start_process
from kvscope.config import read_yaml
from kvscope.durations import parse_time

PAGED = ("critical", "warning")  # the severities routed to the webhook; info alerts page nobody
GROUP_WAIT = "1s"  # drills and tests: production waits ~30 s to batch a burst
GROUP_INTERVAL = "2s"  # how soon a group's change (its resolution) is sent
REPEAT_INTERVAL = "4h"  # longer than any drill: one notification per alert
_MAX_POST = 16 << 20  # the stand-in reads a notification up to this size
NOTIFY_PATH = "/notify"  # where kvscope forwards its notifications on the stand-in receiver
TAP_PATH = "/alertmanager"  # where Alertmanager itself posts, when tapped


class AlertmanagerMissing(DebianPackageMissing):
    """Alertmanager is not installed (the message names the Debian package)."""


def binary() -> str:
    return debian_binary(["prometheus-alertmanager", "alertmanager"], "prometheus-alertmanager", AlertmanagerMissing)


def write_config(
    path: Path,
    webhook_url: str,
    token_file: Path,
    *,
    also: Sequence[str] = (),
    severities: Sequence[str] = PAGED,
    group_wait: str = GROUP_WAIT,
    group_interval: str = GROUP_INTERVAL,
    repeat_interval: str = REPEAT_INTERVAL,
) -> Path:
    """An alertmanager.yml sending alerts of `severities` to kvscope's webhook with its bearer
    token (read from `token_file`), resolutions included; `also`: more webhooks on the same
    receiver, told the same (a test's tap on what Alertmanager itself sent)."""
    hooks: list[dict[str, Any]] = [
        {
            "url": webhook_url,
            "send_resolved": True,
            "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token_file.resolve())}},
        }
    ]
    hooks += [{"url": url, "send_resolved": True} for url in also]
    config = {
        "route": {
            "receiver": "nobody",
            "group_by": ["..."],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
            "routes": [{"receiver": "kvscope", "matchers": [f'severity=~"{"|".join(severities)}"']}],
        },
        "receivers": [{"name": "nobody"}, {"name": "kvscope", "webhook_configs": hooks}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start(
    workdir: Path,
    webhook_url: str,
    token_file: Path,
    *,
    port: int | None = None,
    also: Sequence[str] = (),
    severities: Sequence[str] = PAGED,
) -> ServerProcess:
    """Alertmanager on 127.0.0.1 routing to `webhook_url`; ready when /-/ready answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = write_config(workdir / "alertmanager.yml", webhook_url, token_file, also=also, severities=severities)
    argv = [
        binary(),
        f"--config.file={config}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # empty: no cluster, no gossip port
    ]
    return start_process("alertmanager", argv, f"http://127.0.0.1:{port}", workdir / "alertmanager.log")


@dataclass
class Post:
    """One JSON body the stand-in receiver was sent."""

    path: str
    received: float
    body: Any


@dataclass
class Receiver:
    """A stand-in for the person's receiver (a chat or pager webhook): an HTTP server on
    127.0.0.1 keeping every JSON body posted to it, answering 200."""

    url: str = ""
    posts: list[Post] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self, path: str | None = None) -> list[Post]:
        """What arrived so far (only at `path` when given), oldest first."""
        with self.lock:
            return [p for p in self.posts if path is None or p.path == path]

    def _keep(self, post: Post) -> None:
        with self.lock:
            self.posts.append(post)


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    """A running `Receiver`, shut down on exit."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            if not 0 <= size <= _MAX_POST:
                self.send_error(413)
                return
            raw = self.rfile.read(size)
            try:
                body = json.loads(raw)
            except ValueError:
                self.send_error(400, "not JSON")
                return
            receiver._keep(Post(self.path, time.time(), body))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="stand-in receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class OnCall:
    """The running on-call path: Alertmanager -> `kvscope diagnose --listen` -> the stand-in receiver."""

    alertmanager: ServerProcess
    webhook: ServerProcess
    receiver: Receiver
    token: str
    reports_dir: Path  # where the webhook keeps its reports (the links die with the drill)

    @property
    def alertmanager_target(self) -> str:
        """host:port, for Prometheus' `alerting.alertmanagers`."""
        return self.alertmanager.base_url.removeprefix("http://")

    def notifications(self) -> list[Post]:
        """What kvscope forwarded to the person's receiver so far."""
        return self.receiver.snapshot(NOTIFY_PATH)

    def reports(self) -> list[dict[str, Any]]:
        """kvscope's report listing (GET /reports), with the webhook's token."""
        answer = httpx.get(self.webhook.base_url + "/reports", headers=self.auth, timeout=10)
        answer.raise_for_status()
        return list(answer.json()["reports"])

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}


def write_webhook_config(path: Path, token_file: Path, after_start: str, base: Path | None = None) -> Path:
    """kvscope.yaml for the drill's webhook: `base` (the user's file: thresholds, selectors, ...)
    with its `webhook:` section replaced by the drill's token and diagnosis offset."""
    data = read_yaml(base) if base is not None else {}
    # one diagnosis at a time: the drill shares the machine with the engine it measures (a
    # diagnosis is as of the alert's start, so one that waits its turn reads the same data)
    data["webhook"] = {"bearer_token_file": str(token_file.resolve()), "after_start": after_start, "workers": 1}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def on_call(
    workdir: Path,
    prometheus_url: str,
    *,
    window: str,
    recent: str,
    after_start: str = "2m",
    config: Path | None = None,
    tap: bool = False,
    severities: Sequence[str] = PAGED,
) -> Iterator[OnCall]:
    """Start the stand-in receiver, `kvscope diagnose --listen` (diagnosing over `window` with
    `recent`, `after_start` past each alert's start) forwarding to it, and Alertmanager routing to
    the webhook with its token; stop them all on exit. `tap`: Alertmanager also posts to the
    receiver's TAP_PATH, so a test sees what it sent (resolutions included)."""
    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    token_file = workdir / "webhook-token"
    with os.fdopen(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(token + "\n")
    settings = write_webhook_config(workdir / "kvscope.webhook.yaml", token_file, after_start, config)
    with contextlib.ExitStack() as stack:
        stack.callback(token_file.unlink, missing_ok=True)  # the last to run: once nothing uses it
        receiver = stack.enter_context(receiving())
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "kvscope.cli",
            "diagnose",
            "--prometheus",
            prometheus_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--forward",
            receiver.url + NOTIFY_PATH,
            "--reports-dir",
            str(workdir / "reports"),
            "--window",
            window,
            "--recent",
            recent,
            "--config",
            str(settings),
        ]
        webhook = start_process("kvscope diagnose --listen", argv, f"http://127.0.0.1:{port}", workdir / "webhook.log")
        stack.enter_context(running(webhook, ready_path="/-/healthy", timeout=60))
        manager = start(
            workdir / "alertmanager",
            webhook.base_url + "/alerts",
            token_file,
            also=[receiver.url + TAP_PATH] if tap else (),
            severities=severities,
        )
        stack.enter_context(running(manager, ready_path="/-/ready", timeout=60))
        yield OnCall(manager, webhook, receiver, token, workdir / "reports")


_SHOWN_LABELS = ("namespace", "pod", "instance", "gpu", "xid", "target")


def digest(post: Post, changed: float, reports_dir: Path | None = None) -> dict[str, Any]:
    """One notification as a drill's report shows it: the alert, the verdict, the summary, the
    link (and the file the report is kept in, since the link dies with the drill), times in
    seconds after the change."""
    body = post.body if isinstance(post.body, dict) else {}
    alert = body.get("alert") or {}
    labels = alert.get("labels") or {}
    diagnosis = body.get("diagnosis") or {}

    def after(text: object) -> float | None:
        try:
            return parse_time(str(text)) - changed if text else None
        except ValueError:
            return None

    out: dict[str, Any] = {
        "alertname": labels.get("alertname", "?"),
        "labels": {k: labels[k] for k in _SHOWN_LABELS if k in labels},
        "verdict": body.get("verdict"),
        "summary": body.get("summary"),
        "text": body.get("text"),
        "report_url": body.get("report_url"),
        "alert_started_s": after(alert.get("startsAt")),
        "diagnosed_at_s": after(diagnosis.get("at")),
        "reached_receiver_s": post.received - changed,
    }
    if reports_dir is not None and body.get("id"):
        out["report_file"] = str(reports_dir / f"kvscope-report-{body['id']}.json")
    return out
