"""The exporter's HTTP side: /metrics, health, and (emulated GPUs only) the fault API."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from exporter.collectors.emulated import EmulatedSource
from exporter.config import Assembly, ExportConfig
from exporter.exposition import CONTENT_TYPE
from exporter.faults import Fault
from exporter.registry import Exporter
from exporter.web_config import BasicAuthUsers, WebConfig
from kvscope.http_auth import authorized

log = logging.getLogger("kvscope.export")
MAX_FAULT_BYTES = 64 << 10


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def build_app(exporter: Exporter, assembly: Assembly) -> Starlette:
    async def metrics(_: Request) -> Response:
        # off the event loop: a collection on scrape (interval 0) must not stall the probes
        return Response(await asyncio.to_thread(exporter.page), media_type=CONTENT_TYPE)

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
            await asyncio.to_thread(exporter.refresh)
            return JSONResponse({"cleared": cleared})
        # JSON only: a browser's cross-origin "simple" POST (text/plain, forms) is refused
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _error(415, "the fault API takes application/json")
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_FAULT_BYTES:
                return _error(413, f"a fault is at most {MAX_FAULT_BYTES} bytes")
        try:
            payload = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
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
        await asyncio.to_thread(exporter.refresh)  # the fault shows on the very next scrape
        return JSONResponse({"injected": fault.public()}, status_code=201)

    return faults


OPEN_PATHS = ("/-/healthy", "/-/ready")  # the kubelet's probes carry no credentials


class AuthMiddleware:
    """Basic auth (bcrypt users of the web config) or a bearer token, on every route but the
    probes (when `open_probes`). Credentials are compared as bytes: any header is a 401 at worst.
    Also adds the web config's response headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        users: BasicAuthUsers | None = None,
        token: bytes | None = None,
        open_probes: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.app = app
        self.users = users
        self.token = token
        self.open_paths = OPEN_PATHS if open_probes else ()
        self.headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]

    @property
    def required(self) -> bool:
        return self.users is not None or self.token is not None

    def allowed(self, header: bytes | None) -> bool:
        return authorized(header, token=self.token, basic=self.users.check if self.users is not None else None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        extra = self.headers

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        header = next((bytes(v) for k, v in scope["headers"] if k == b"authorization"), None)
        if scope.get("path") not in self.open_paths and not self.allowed(header):
            challenge = {"www-authenticate": 'Basic realm="kvscope"'} if self.users is not None else {}
            response = PlainTextResponse("Unauthorized\n", status_code=401, headers=challenge)
            return await response(scope, receive, with_headers)
        await self.app(scope, receive, with_headers)


def guarded(app: ASGIApp, config: ExportConfig, web: WebConfig) -> AuthMiddleware:
    """The app behind the configured auth (ConfigError when a secret cannot be read)."""
    return AuthMiddleware(
        app,
        users=BasicAuthUsers(web.basic_auth_users) if web.basic_auth_users else None,
        token=config.token(),
        open_probes=config.open_probes,
        headers=web.http_server_config.headers,
    )


def serve(config: ExportConfig, assembly: Assembly, web: WebConfig) -> int:
    import uvicorn

    exporter = Exporter(assembly.collectors, interval=config.collect_interval)
    app = guarded(build_app(exporter, assembly), config, web)
    exporter.start()
    # What start-up made (modules, the app, the collectors) lives as long as the process: out
    # of the cyclic collector's sight, its full passes walk only what collections make, which
    # shortens the tail of a collection on scrape (docs/benchmarks.md).
    gc.freeze()
    context = web.ssl_context()
    scheme = "https" if context is not None else "http"
    auth = "basic auth" if app.users else "bearer token" if app.token else "no auth"
    print(
        f"kvscope export: {assembly.description}; serving {scheme}://{config.listen_address}/metrics ({auth})",
        file=sys.stderr,
        flush=True,
    )
    uv = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        # the web config's own context: min/max version and client verification as it says
        ssl_context_factory=(lambda _config, _default: context) if context is not None else None,
    )
    try:
        uvicorn.Server(uv).run()
    finally:
        exporter.stop()
        if assembly.xid_watcher is not None:
            assembly.xid_watcher.stop()
    return 0
