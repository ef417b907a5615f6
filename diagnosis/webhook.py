"""`kvscope diagnose --listen ADDR`: an Alertmanager webhook receiver.

Each firing alert is diagnosed scoped to its labels (namespace) and its time; the report is
kept (and written to --reports-dir), listed at GET /reports, and optionally forwarded to a
person's receiver (`--forward`) as a notification: the stored report plus its verdict, the
incident's one-line summary, a link to the report and a chat-ready `text` (`notification`).

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
import socket
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
from diagnosis.alerts import Firing, matches
from diagnosis.run import Request, run, undiagnosable
from diagnosis.sources import SourceError
from diagnosis.webhook_config import Credentials, WebhookConfig
from kvscope.durations import parse_time

log = logging.getLogger("kvscope.diagnose")
SCOPE_LABELS = ("namespace",)  # labels an alert may narrow every query by
# diagnose a little after the alert started (webhook.after_start): the window covers its lead-up
AFTER_START = WebhookConfig().after_start_seconds
FORWARD_BACKOFF = 1.0  # seconds before the second attempt at a notification, doubled after each
_WHERE_LABELS = ("namespace", "pod", "instance", "Hostname", "hostname", "gpu", "xid")  # in `text`
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label: a namespace
_REPORT_FILE = re.compile(r"kvscope-report-[0-9a-f]{12}\.json")  # the only files pruning touches
_REPORT_ID = re.compile(r"[0-9a-f]{12}")  # what `receive` hands out; nothing else is looked up
_RETRY_AFTER = "30"


class PayloadError(ValueError):
    """A webhook body that is not a usable Alertmanager payload: a 400 (or 413) saying why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def scoped(base: Request, alert: dict[str, Any], now: float, after_start: float = AFTER_START) -> Request:
    """The diagnosis request for one alert: its time (its start plus `after_start`, never later
    than `now`, its arrival) and its scope (labels already checked)."""
    labels = alert.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    selector = base.selector
    for key in SCOPE_LABELS:
        if isinstance(labels.get(key), str) and labels[key]:
            selector = selector.where(key, "=", labels[key])
    starts = alert.get("startsAt")
    try:
        at = min(now, parse_time(starts) + after_start) if isinstance(starts, str) and starts else now
    except ValueError:
        at = now
    if at <= 0:  # Go's zero time (0001-01-01): a sender that set no start
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
    external_url: str | None = None,
) -> Starlette:
    """The receiver; `external_url` is the base of the report links it sends (default:
    `settings.external_url`, else links relative to this server)."""
    settings = settings or WebhookConfig()
    credentials = credentials or Credentials()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=settings.queue)
    links = (external_url or settings.external_url or "").rstrip("/")
    forwarder = Forwarder(forward, settings.forward_attempts, settings.forward_timeout_seconds) if forward else None

    async def worker() -> None:
        async with httpx.AsyncClient() as client:
            while True:
                item = await queue.get()
                try:
                    done = await asyncio.to_thread(_diagnose_alert, base, item, settings.after_start_seconds)
                    reports.add(done)
                    if forwarder is not None:
                        outcome = await forwarder.send(client, notification(done, links))
                        reports.add({**done, "forward": outcome})
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
        item = reports.get(wanted) if _REPORT_ID.fullmatch(wanted) else None
        if item is None:
            return _error(404, f"no report {wanted[:40]!r}")
        wants = _wanted_format(request)
        if wants is None:
            return _error(400, "format must be json or html")
        return _html_report(item) if wants == "html" else JSONResponse(item)

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


def _wanted_format(request: HttpRequest) -> str | None:
    """`?format=html|json`, else HTML for a browser (text/html accepted before JSON), else JSON."""
    asked = request.query_params.get("format")
    if asked is not None:
        return asked if asked in ("json", "html") else None
    accept = request.headers.get("accept", "").lower()
    html_at, json_at = accept.find("text/html"), accept.find("application/json")
    return "html" if html_at >= 0 and (json_at < 0 or html_at < json_at) else "json"


def _html_report(item: dict[str, Any]) -> Response:
    """A stored report as one self-contained page, locked down as the page's own CSP says."""
    from diagnosis import report_html

    if isinstance(item.get("diagnosis"), dict):
        page = report_html.render(item["diagnosis"], alert=item.get("alert"))
    else:
        page = report_html.render_state(item["id"], str(item.get("state", "queued")), item.get("alert"))
    headers = {
        "content-security-policy": report_html.CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-store",
    }
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)


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


def _diagnose_alert(base: Request, item: dict[str, Any], after_start: float = AFTER_START) -> dict[str, Any]:
    request = scoped(base, item["alert"], item["received"], after_start)
    try:
        result = report.to_dict(run(request))
    except SourceError as exc:
        result = report.to_dict(undiagnosable(request, str(exc)))
    return {**item, "state": "done", "selector": str(request.selector), "diagnosis": result}


def notification(item: dict[str, Any], external_url: str) -> dict[str, Any]:
    """What `--forward` posts for a diagnosed alert: the stored report plus `verdict`, `summary`,
    `report_url` and `text` (a Slack / Mattermost incoming-webhook message).

    The verdict and summary are those of the incident that explains this alert (the diagnosis'
    `alerts[].explained_by`, on the alert's own scope), else of the diagnosis' first incident,
    else of the diagnosis itself (healthy, insufficient_data).
    """
    diagnosis = item.get("diagnosis") or {}
    labels = item["alert"].get("labels")
    labels = labels if isinstance(labels, dict) else {}
    name = str(labels.get("alertname") or "alert")
    explaining = _explaining_incident(diagnosis, name, labels)
    incidents = [i for i in diagnosis.get("incidents") or [] if isinstance(i, dict)]
    chosen = explaining or (incidents[0] if incidents else diagnosis)
    verdict = {
        "bottleneck": chosen.get("id", diagnosis.get("bottleneck")),
        "severity": chosen.get("severity"),
        "confidence": chosen.get("confidence"),
        "explains_alert": explaining is not None,
    }
    summary = " ".join(str(chosen.get("summary") or "").split())
    report_url = f"{external_url}/reports/{item['id']}"
    where = ", ".join(f"{k}={labels[k]}" for k in _WHERE_LABELS if labels.get(k))
    status = str(item["alert"].get("status") or "firing").upper()
    text = f"[{status}] {name}{f' ({where})' if where else ''}: {verdict['bottleneck']} ({verdict['severity']})"
    said = summary if summary.endswith((".", "!", "?")) or not summary else summary + "."
    text += f": {said} Report: {report_url}" if said else f". Report: {report_url}"
    return {**item, "verdict": verdict, "summary": summary, "report_url": report_url, "text": _slack_escape(text)}


def _explaining_incident(diagnosis: dict[str, Any], name: str, labels: dict[str, Any]) -> dict[str, Any] | None:
    # the diagnosis' own view of this alert: same name, no shared label that disagrees (an alert
    # as Alertmanager sends it carries Prometheus' external labels, the ALERTS series does not)
    seen = next(
        (
            a
            for a in diagnosis.get("alerts") or []
            if isinstance(a, dict)
            and a.get("alertname") == name
            and all(labels.get(k, v) == v for k, v in (a.get("labels") or {}).items())
        ),
        None,
    )
    if seen is None or not seen.get("explained_by"):
        return None
    firing = Firing(name, {k: str(v) for k, v in labels.items() if k != "alertname"}, ())
    same = [i for i in diagnosis.get("incidents") or [] if isinstance(i, dict) and i.get("id") == seen["explained_by"]]
    return next((i for i in same if matches(firing, i.get("affected") or [])), same[0] if same else None)


def _slack_escape(text: str) -> str:
    # Slack's three control characters; Mattermost's markdown decodes the same entities
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_unescape(text: str) -> str:
    """The notification's `text` as a terminal shows it: the exact inverse of its Slack escaping."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@dataclasses.dataclass
class Forwarder:
    """Posts notifications to --forward: each attempt within `timeout` seconds (the answer
    included), up to `attempts` with a doubling pause between; failures are logged and counted,
    and a refusal (4xx other than 408/429) is not tried again."""

    url: str
    attempts: int = 3
    timeout: float = 10.0
    delivered: int = 0
    failed: int = 0

    async def send(self, client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
        """The outcome, as the report keeps it: delivered, attempts, the last status and error."""
        status: int | None = None
        error = ""
        attempt = 0
        for attempt in range(1, self.attempts + 1):
            try:
                async with asyncio.timeout(self.timeout):
                    response = await client.post(self.url, json=body)
                status = response.status_code
                if response.is_success:
                    self.delivered += 1
                    return {"delivered": True, "attempts": attempt, "status": status}
                error = f"HTTP {status}"
                if status < 500 and status not in (408, 429):
                    break  # refused: the same post would be refused again
            except TimeoutError:
                error = f"no answer within {self.timeout:g} s"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt < self.attempts:
                await asyncio.sleep(FORWARD_BACKOFF * 2 ** (attempt - 1))
        self.failed += 1
        log.warning(
            "forwarding report %s to %s failed after %d attempt(s): %s (%d of %d notifications failed)",
            body.get("id"),
            _origin(self.url),
            attempt,
            error,
            self.failed,
            self.failed + self.delivered,
        )
        return {"delivered": False, "attempts": attempt, "status": status, "error": error}


def _origin(url: str) -> str:
    # a chat webhook's path is its secret (Slack: /services/T../B../XXXX): logs name the host only
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.netloc.decode('ascii', 'replace')}"


def default_external_url(listen: str) -> str:
    """The base of report links when webhook.external_url is not set: the --listen address, with
    this machine's name for a wildcard host (as Alertmanager derives its own external URL)."""
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = socket.gethostname()
    return f"http://{host}:{port}"


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
    links = settings.external_url or default_external_url(listen)
    uvicorn.run(
        build_app(base, reports, forward, settings, credentials, links),
        host=host,
        port=int(port),
        log_level="warning",
    )
    return 0
