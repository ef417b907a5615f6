"""`kvscope diagnose --listen ADDR`: an Alertmanager webhook receiver. Each firing alert is
diagnosed scoped to its labels (namespace) and its time, the report is kept (and written to
--reports-dir), optionally forwarded as JSON, and listed at GET /reports."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from diagnosis import report
from diagnosis.run import Request, run, undiagnosable
from diagnosis.sources import SourceError
from kvscope.durations import parse_time

log = logging.getLogger("kvscope.diagnose")
SCOPE_LABELS = ("namespace",)  # labels an alert may narrow every query by
AFTER_START = 120.0  # diagnose a little after the alert started: the window covers its lead-up


def scoped(base: Request, alert: dict[str, Any], now: float) -> Request:
    """The diagnosis request for one alert: its time and its scope."""
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


class Reports:
    def __init__(self, directory: Path | None, keep: int = 500) -> None:
        self.directory = directory
        self.items: deque[dict[str, Any]] = deque(maxlen=keep)
        self.lock = threading.Lock()
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def add(self, item: dict[str, Any]) -> None:
        with self.lock:
            self.items.appendleft(item)
        if self.directory is not None:
            (self.directory / f"{item['id']}.json").write_text(json.dumps(item, indent=2))


def build_app(base: Request, reports: Reports, forward: str | None = None) -> Starlette:
    async def receive(request: HttpRequest) -> Response:
        try:
            payload = json.loads(await request.body())
            alerts = payload["alerts"]
            assert isinstance(alerts, list)
        except (json.JSONDecodeError, KeyError, TypeError, AssertionError):
            return JSONResponse(
                {"error": "not an Alertmanager webhook payload (needs an 'alerts' list)"},
                status_code=400,
            )
        firing = [a for a in alerts if a.get("status", "firing") == "firing"]
        ids = []
        for alert in firing:
            item = await asyncio.to_thread(_diagnose_alert, base, alert)
            reports.add(item)
            ids.append(item["id"])
            if forward:
                await asyncio.to_thread(_forward, forward, item)
        return JSONResponse({"reports": ids, "skipped_resolved": len(alerts) - len(firing)})

    async def listing(_: HttpRequest) -> Response:
        with reports.lock:
            items = list(reports.items)
        return JSONResponse(
            {
                "reports": [
                    {
                        "id": i["id"],
                        "received": i["received"],
                        "alertname": i["alert"].get("labels", {}).get("alertname"),
                        "bottleneck": i["diagnosis"]["bottleneck"],
                        "severity": i["diagnosis"]["severity"],
                    }
                    for i in items
                ]
            }
        )

    async def one(request: HttpRequest) -> Response:
        wanted = request.path_params["report_id"]
        with reports.lock:
            for item in reports.items:
                if item["id"] == wanted:
                    return JSONResponse(item)
        return JSONResponse({"error": f"no report {wanted}"}, status_code=404)

    return Starlette(
        routes=[
            Route("/", receive, methods=["POST"]),
            Route("/alerts", receive, methods=["POST"]),
            Route("/reports", listing),
            Route("/reports/{report_id}", one),
        ]
    )


def _diagnose_alert(base: Request, alert: dict[str, Any]) -> dict[str, Any]:
    now = time.time()
    request = scoped(base, alert, now)
    try:
        result = report.to_dict(run(request))
    except SourceError as exc:
        result = report.to_dict(undiagnosable(request, str(exc)))
    return {
        "id": uuid.uuid4().hex[:12],
        "received": now,
        "alert": alert,
        "selector": str(request.selector),
        "diagnosis": result,
    }


def _forward(url: str, item: dict[str, Any]) -> None:
    try:
        httpx.post(url, json=item, timeout=10)
    except httpx.HTTPError as exc:
        log.warning("forwarding report %s to %s failed: %s", item["id"], url, exc)


def serve_webhook(listen: str, base: Request, *, forward: str | None, reports_dir: Path | None) -> int:
    import uvicorn

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"kvscope diagnose: --listen wants host:port, not {listen!r}", file=sys.stderr)
        return 64
    print(
        f"kvscope diagnose: Alertmanager webhook on http://{listen}/ (reports at /reports)",
        file=sys.stderr,
    )
    uvicorn.run(
        build_app(base, Reports(reports_dir), forward),
        host=host,
        port=int(port),
        log_level="warning",
    )
    return 0
