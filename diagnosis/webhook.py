"""`kvscope diagnose --listen ADDR`: an Alertmanager webhook receiver.

Each firing alert is diagnosed scoped to its labels (namespace) and its time; the report is
kept (and written to --reports-dir), optionally forwarded as JSON, and listed at GET /reports.

It faces whoever can reach its port, so (diagnosis/webhook_config.py): posts and report reads
need the configured bearer token or basic auth (from a file or the environment); a payload is
read up to `max_body_bytes` and may carry `max_alerts`; a scope label's value must be a valid
Kubernetes name before it reaches PromQL (where it is escaped as well), because every query
runs with the operator's token and headers; the answer comes at once (202) and the diagnoses
run in a bounded queue of `workers` (503 with Retry-After when it is full, which Alertmanager
retries); reports are pruned by count and age. Every refusal is a JSON error. `/-/healthy`
stays open for probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from diagnosis import report
from diagnosis.run import Request, run, undiagnosable
from diagnosis.sources import SourceError
from diagnosis.webhook_config import Credentials, WebhookConfig
from kvscope.durations import parse_time

log = logging.getLogger("kvscope.diagnose")
SCOPE_LABELS = ("namespace",)  # labels an alert may narrow every query by
AFTER_START = 120.0  # diagnose a little after the alert started: the window covers its lead-up
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label: a namespace
_REPORT_FILE = re.compile(r"kvscope-report-[0-9a-f]{12}\.json")  # the only files pruning touches
_RETRY_AFTER = "30"


class PayloadError(ValueError):
    """A webhook body that is not a usable Alertmanager payload: a 400 (or 413) saying why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def scoped(base: Request, alert: dict[str, Any], now: float) -> Request:
    """The diagnosis request for one alert: its time and its scope (labels already checked)."""
    labels = alert.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    selector = base.selector
    for key in SCOPE_LABELS:
        if isinstance(labels.get(key), str) and labels[key]:
            selector = selector.where(key, "=", labels[key])
    starts = alert.get("startsAt")
    try:
        at = min(now, parse_time(starts) + AFTER_START) if isinstance(starts, str) and starts else now
    except ValueError:
        at = now
    return dataclasses.replace(base, at=at, selector=selector, save_bundle=None)


def firing_alerts(payload: object, max_alerts: int) -> tuple[list[dict[str, Any]], int]:
    """The firing alerts of a payload and how many were resolved; PayloadError saying what is wrong."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise PayloadError("not an Alertmanager webhook payload (needs an 'alerts' list)")
    alerts = payload["alerts"]
    if len(alerts) > max_alerts:
        raise PayloadError(f"the payload holds {len(alerts)} alerts; this receiver takes at most {max_alerts}", 413)
    firing = []
    for i, alert in enumerate(alerts):
        if not isinstance(alert, dict):
            raise PayloadError(f"alerts[{i}] is not an object")
        labels = alert.get("labels", {})
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise PayloadError(f"alerts[{i}].labels must map names to strings")
        for key in SCOPE_LABELS:
            value = labels.get(key)
            if value and not _K8S_NAME.fullmatch(value):
                raise PayloadError(f"alerts[{i}].labels.{key} is not a Kubernetes name: {value[:80]!r}")
        if alert.get("status", "firing") == "firing":
            firing.append(alert)
    return firing, len(alerts) - len(firing)


class Reports:
    """The reports, newest first, at most `keep` and none older than `keep_seconds`."""

    def __init__(self, directory: Path | None, keep: int = 500, keep_seconds: float = 7 * 86400) -> None:
        self.directory = directory
        self.keep, self.keep_seconds = keep, keep_seconds
        self.items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def add(self, item: dict[str, Any]) -> None:
        with self.lock:
            self.items[item["id"]] = item
            self.items.move_to_end(item["id"], last=False)
        if self.directory is not None and item.get("diagnosis") is not None:
            (self.directory / f"kvscope-report-{item['id']}.json").write_text(json.dumps(item, indent=2))
        self.prune()

    def get(self, report_id: str) -> dict[str, Any] | None:
        with self.lock:
            return self.items.get(report_id)

    def listing(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.items.values())

    def prune(self, now: float | None = None) -> None:
        """Drop reports past the count or the age, in memory and the files this receiver wrote."""
        oldest = (now if now is not None else time.time()) - self.keep_seconds
        with self.lock:
            for report_id in list(self.items)[self.keep :]:
                del self.items[report_id]
            for report_id, item in list(self.items.items()):
                if item["received"] < oldest:
                    del self.items[report_id]
        if self.directory is None:
            return
        files = sorted(
            (p for p in self.directory.iterdir() if _REPORT_FILE.fullmatch(p.name) and p.is_file()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for index, path in enumerate(files):
            if index >= self.keep or path.stat().st_mtime < oldest:
                path.unlink(missing_ok=True)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _read_capped(request: HttpRequest, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadError(f"the payload is over {limit} bytes", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadError(f"the payload is over {limit} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(
    base: Request,
    reports: Reports,
    forward: str | None = None,
    settings: WebhookConfig | None = None,
    credentials: Credentials | None = None,
) -> Starlette:
    settings = settings or WebhookConfig()
    credentials = credentials or Credentials()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=settings.queue)

    async def worker() -> None:
        while True:
            item = await queue.get()
            try:
                done = await asyncio.to_thread(_diagnose_alert, base, item)
                reports.add(done)
                if forward:
                    await asyncio.to_thread(_forward, forward, done)
            except Exception:  # one bad diagnosis never stops the worker
                log.exception("diagnosing alert %s failed", item["id"])
                reports.add({**item, "state": "failed"})
            finally:
                queue.task_done()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(worker()) for _ in range(settings.workers)]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()

    def guard(request: HttpRequest) -> Response | None:
        header = request.headers.get("authorization")
        raw = header.encode("latin-1") if header is not None else None
        if not credentials.allow(raw):
            return _error(401, "this receiver needs its bearer token or basic auth", {"www-authenticate": "Bearer"})
        return None

    async def receive(request: HttpRequest) -> Response:
        refused = guard(request)
        if refused is not None:
            return refused
        try:
            raw = await _read_capped(request, settings.max_body_bytes)
            try:
                payload = json.loads(raw)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise PayloadError("the payload is not JSON") from None
            firing, resolved = firing_alerts(payload, settings.max_alerts)
        except PayloadError as exc:
            return _error(exc.status, str(exc))
        except ClientDisconnect:
            return _error(400, "the sender went away")
        if queue.maxsize - queue.qsize() < len(firing):
            return _error(503, "the diagnosis queue is full; retry later", {"retry-after": _RETRY_AFTER})
        now = time.time()
        ids = []
        for alert in firing:
            item = {"id": uuid.uuid4().hex[:12], "received": now, "alert": alert, "state": "queued"}
            reports.add(item)
            queue.put_nowait(item)
            ids.append(item["id"])
        return JSONResponse({"accepted": ids, "skipped_resolved": resolved}, status_code=202)

    async def listing(request: HttpRequest) -> Response:
        refused = guard(request)
        if refused is not None:
            return refused
        return JSONResponse({"reports": [_summary(i) for i in reports.listing()]})

    async def one(request: HttpRequest) -> Response:
        refused = guard(request)
        if refused is not None:
            return refused
        wanted = request.path_params["report_id"]
        item = reports.get(wanted)
        if item is None:
            return _error(404, f"no report {wanted[:40]!r}")
        return JSONResponse(item)

    async def healthy(_: HttpRequest) -> Response:  # open, for the kubelet's probes
        return JSONResponse({"status": "ok", "queued": queue.qsize()})

    async def http_error(_: HttpRequest, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error in the webhook receiver"
        return _error(status, str(detail))

    return Starlette(
        routes=[
            Route("/", receive, methods=["POST"]),
            Route("/alerts", receive, methods=["POST"]),
            Route("/reports", listing),
            Route("/reports/{report_id}", one),
            Route("/-/healthy", healthy),
        ],
        exception_handlers={HTTPException: http_error, Exception: http_error},
        lifespan=lifespan,
    )


def _summary(item: dict[str, Any]) -> dict[str, Any]:
    diagnosis = item.get("diagnosis") or {}
    labels = item["alert"].get("labels", {})
    return {
        "id": item["id"],
        "received": item["received"],
        "state": item.get("state", "done"),
        "alertname": labels.get("alertname") if isinstance(labels, dict) else None,
        "bottleneck": diagnosis.get("bottleneck"),
        "severity": diagnosis.get("severity"),
    }


def _diagnose_alert(base: Request, item: dict[str, Any]) -> dict[str, Any]:
    request = scoped(base, item["alert"], item["received"])
    try:
        result = report.to_dict(run(request))
    except SourceError as exc:
        result = report.to_dict(undiagnosable(request, str(exc)))
    return {**item, "state": "done", "selector": str(request.selector), "diagnosis": result}


def _forward(url: str, item: dict[str, Any]) -> None:
    try:
        httpx.post(url, json=item, timeout=10)
    except httpx.HTTPError as exc:
        log.warning("forwarding report %s to %s failed: %s", item["id"], url, exc)


def serve_webhook(
    listen: str,
    base: Request,
    *,
    forward: str | None,
    reports_dir: Path | None,
    settings: WebhookConfig,
    credentials: Credentials,
) -> int:
    import uvicorn

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"kvscope diagnose: --listen wants host:port, not {listen!r}", file=sys.stderr)
        return 64
    guarded = "with auth" if credentials.required else "WITHOUT auth (set webhook.bearer_token_file)"
    print(
        f"kvscope diagnose: Alertmanager webhook on http://{listen}/ {guarded} (reports at /reports)",
        file=sys.stderr,
    )
    reports = Reports(reports_dir, settings.keep_reports, settings.keep_seconds)
    uvicorn.run(
        build_app(base, reports, forward, settings, credentials),
        host=host,
        port=int(port),
        log_level="warning",
    )
    return 0
