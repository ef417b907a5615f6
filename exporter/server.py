"""The exporter's HTTP side: /metrics, health, and (emulated GPUs only) the fault API."""

from __future__ import annotations

import base64
import hmac
import json
import logging
import sys
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from exporter.collectors.emulated import EmulatedSource
from exporter.config import Assembly, ExportConfig
from exporter.exposition import CONTENT_TYPE
from exporter.faults import Fault
from exporter.registry import Exporter

log = logging.getLogger("kvscope.export")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def build_app(exporter: Exporter, assembly: Assembly) -> Starlette:
    async def metrics(_: Request) -> Response:
        return Response(exporter.page(), media_type=CONTENT_TYPE)

    async def healthy(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def index(_: Request) -> Response:
        return PlainTextResponse(f"kvscope export: {assembly.description}\nmetrics at /metrics\n")

    routes = [
        Route("/", index),
        Route("/metrics", metrics),
        Route("/-/healthy", healthy),
        Route("/-/ready", healthy),
    ]
    source = assembly.gpu_source
    if isinstance(source, EmulatedSource):
        routes.append(Route("/-/faults", _fault_endpoint(source, exporter), methods=["GET", "POST", "DELETE"]))
    return Starlette(routes=routes)


def _fault_endpoint(source: EmulatedSource, exporter: Exporter) -> Any:
    async def faults(request: Request) -> Response:
        if request.method == "GET":
            return JSONResponse({"faults": [f.public() for f in source.faults()]})
        if request.method == "DELETE":
            cleared = source.clear()
            exporter.refresh()
            return JSONResponse({"cleared": cleared})
        try:
            payload = json.loads(await request.body())
        except json.JSONDecodeError as exc:
            return _error(400, f"the body is not valid JSON: {exc}")
        try:
            fault = Fault.model_validate(payload)
            source.inject(fault)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return _error(400, f"{where + ': ' if where else ''}{first['msg']}")
        except ValueError as exc:
            return _error(400, str(exc))
        exporter.refresh()  # the fault shows on the very next scrape
        return JSONResponse({"injected": fault.public()}, status_code=201)

    return faults


class AuthMiddleware:
    """HTTP basic auth or a bearer token on every route, when configured."""

    def __init__(self, app: ASGIApp, config: ExportConfig) -> None:
        self.app = app
        self.expected: str | None = None
        if config.basic_auth is not None:
            raw = f"{config.basic_auth.username}:{config.basic_auth.password}".encode()
            self.expected = "Basic " + base64.b64encode(raw).decode()
        elif config.bearer_token is not None:
            self.expected = "Bearer " + config.bearer_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.expected is not None:
            given = next((v.decode() for k, v in scope["headers"] if k == b"authorization"), "")
            if not hmac.compare_digest(given, self.expected):
                challenge = (
                    [(b"www-authenticate", b'Basic realm="kvscope"')] if self.expected.startswith("Basic") else []
                )
                response = PlainTextResponse(
                    "unauthorized\n",
                    status_code=401,
                    headers=dict((k.decode(), v.decode()) for k, v in challenge),
                )
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def serve(config: ExportConfig, assembly: Assembly) -> int:
    import uvicorn

    exporter = Exporter(assembly.collectors, interval=config.collect_interval)
    exporter.start()
    app = AuthMiddleware(build_app(exporter, assembly), config)
    scheme = "https" if config.tls_cert else "http"
    print(
        f"kvscope export: {assembly.description}; serving {scheme}://{config.listen_address}/metrics",
        file=sys.stderr,
        flush=True,
    )
    uv = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
        ssl_keyfile=str(config.tls_key) if config.tls_key else None,
    )
    try:
        uvicorn.Server(uv).run()
    finally:
        exporter.stop()
        if assembly.xid_watcher is not None:
            assembly.xid_watcher.stop()
    return 0
