"""`kvscope serve`: vLLM's AsyncLLM and OpenAI app, built in code, behind the gateway.

Start-up validates everything it can before loading the engine (profile, flags, gateway
config: one-line errors, exit 64), prints the effective configuration, then serves until
SIGTERM/SIGINT, which drains: /ready turns 503, new requests get 503, in-flight ones finish,
then the engine stops. If the engine dies the process exits 1 so an orchestrator restarts it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from prometheus_client import disable_created_metrics
from rich.console import Console
from rich.table import Table

from kvscope import exitcodes
from serving import genai_metrics, request_handoff, telemetry_env, tracing
from serving.admission import AdmissionPolicy
from serving.demo_model import SERVED_NAME, ensure_demo_model
from serving.gateway import Gateway
from serving.gateway_config import ConfigError, GatewayConfig, load_gateway_config
from serving.hardware import Hardware, detect
from serving.inline_render import inline_short_renders
from serving.metrics import ServingMetrics
from serving.profiles import (
    Effective,
    ProfileError,
    check_combination,
    effective_settings,
    model_max_len,
    platform_settings,
    profile_settings,
    resolve,
)
from serving.prompt_text import fast_prompt_text
from serving.prompts import VllmCounter
from serving.quota import TenantQuotas
from serving.render_memo import RenderMemo, remember_renders
from serving.request_tags import RequestTags
from serving.rpc_dir import private_rpc_dir

log = logging.getLogger("kvscope.serve")
WATCHDOG_SECONDS = 1.0


@dataclass
class ServeOptions:
    model: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    profile: str = "default"
    config: Path | None = None
    draft_model: str | None = None
    drain_timeout: float = 30.0
    engine_flags: Sequence[str] = field(default_factory=tuple)


@dataclass
class Prepared:
    """Everything decided before the engine loads."""

    args: argparse.Namespace
    gateway_config: GatewayConfig
    effective: list[Effective]
    hardware: Hardware
    profile: str


class UsageError(ValueError):
    """Bad options, flags or configuration: reported in one line, exit 64."""


def vllm_argv(options: ServeOptions, model: str, served_name: str, hardware: Hardware) -> tuple[list[str], list, list]:
    profile = profile_settings(options.profile, hardware, model_max_len(model), options.draft_model)
    platform = platform_settings(hardware)
    argv = [
        "--model",
        model,
        "--served-model-name",
        served_name,
        "--host",
        options.host,
        "--port",
        str(options.port),
    ]
    for setting in [*platform, *profile]:
        argv += setting.argv()
    return [*argv, *options.engine_flags], profile, platform


def parse_vllm_args(argv: list[str]) -> argparse.Namespace:
    """vLLM's own parser, so every vLLM engine flag works; a bad flag is a UsageError."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="kvscope serve", exit_on_error=False))
    try:
        args = parser.parse_args(argv)
        validate_parsed_serve_args(args)
    except (argparse.ArgumentError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"engine flags: {exc}") from exc
    except SystemExit as exc:
        raise UsageError("engine flags: see the message above") from exc
    check_observability(args)
    return args


def check_observability(args: argparse.Namespace) -> None:
    """vLLM validates its observability flags (histogram bounds, sample rate) only when it builds
    the engine: run the same validation now, so a bad value is a one-line UsageError."""
    from pydantic import ValidationError
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        AsyncEngineArgs.from_cli_args(args).create_observability_config()
    except ValidationError as exc:
        reasons = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(f"engine flags: {reasons}") from exc


def prepare(options: ServeOptions, hardware: Hardware | None = None) -> Prepared:
    """Resolve model, profile, flags and gateway config; raise UsageError on anything wrong."""
    hardware = hardware or detect()
    model = options.model or str(ensure_demo_model())
    served_name = options.served_model_name or (SERVED_NAME if options.model is None else model)
    try:
        gateway_config = load_gateway_config(options.config)
        argv, profile, platform = vllm_argv(options, model, served_name, hardware)
        args = parse_vllm_args(argv)
        check_combination(args, hardware)
    except (ConfigError, ProfileError) as exc:
        raise UsageError(str(exc)) from exc
    if endpoint := tracing.engine_traces_endpoint():
        args.otlp_traces_endpoint = args.otlp_traces_endpoint or endpoint
        os.environ.setdefault("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", tracing.protocol())
    effective = effective_settings(args, profile, platform, options.engine_flags)
    return Prepared(args, gateway_config, effective, hardware, options.profile)


def config_table(prepared: Prepared) -> Table:
    table = Table(title=f"kvscope serve: profile {prepared.profile!r}, effective engine configuration")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("from")
    table.add_column("why", overflow="fold")
    for row in prepared.effective:
        table.add_row(row.dest, str(row.value), row.source, row.why)
    return table


async def serve(prepared: Prepared, options: ServeOptions) -> int:
    """Build engine + app + gateway and serve until drained or the engine dies."""
    import uvicorn
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.launcher import NoSignalServer, create_server_socket
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from serving.stat_logger import KvscopeStatLogger, kv_capacity_tokens

    args = prepared.args
    disable_created_metrics()  # vLLM's own series carry no _created samples either
    sock = create_server_socket((args.host, args.port), reuse_port=False)  # fail fast if taken
    engine_args = AsyncEngineArgs.from_cli_args(args)
    vllm_config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    prepared.effective = resolve(prepared.effective, vllm_config)
    Console(stderr=True).print(config_table(prepared))
    metrics, tags = ServingMetrics(), RequestTags()
    stat_logger = partial(
        KvscopeStatLogger,
        metrics=metrics,
        tags=tags,
        hit_window_seconds=prepared.gateway_config.prefix_hit_window_seconds,
    )
    engine = AsyncLLM.from_vllm_config(
        vllm_config=vllm_config,
        usage_context=UsageContext.OPENAI_API_SERVER,
        stat_loggers=[stat_logger],
        enable_log_requests=engine_args.enable_log_requests,
        disable_log_stats=engine_args.disable_log_stats,
    )
    exit_code = exitcodes.OK
    try:
        supported_tasks = await engine.get_supported_tasks()
        app = build_app(args, supported_tasks, engine.model_config)
        await init_app_state(engine, app.state, args, supported_tasks)
        online = app.state.online_renderer
        limit = prepared.gateway_config.inline_render_chars
        if swapped := inline_short_renders(online.renderer, limit, online.chat_template):
            log.info("prompts of at most %d characters rendered in place (%s)", limit, ", ".join(swapped))
        held = RenderMemo()
        memo = held if remember_renders(online, held) else None
        if memo is None:
            log.info("vLLM's completion route renders each prompt again (its renderer has no render_completion)")
        completions = getattr(app.state, "openai_serving_completion", None)
        if completions is not None and not fast_prompt_text(completions, vllm_config.model_config):
            log.info("vLLM's completion stream re-parses an id prompt for its text on each streamed output")
        model_name = vllm_config.model_config.served_model_name
        policy = AdmissionPolicy(
            prepared.gateway_config,
            max_model_len=vllm_config.model_config.max_model_len,
            served_names=list(args.served_model_name or [model_name]),
            qos_enabled=vllm_config.scheduler_config.policy == "priority",
            quotas=TenantQuotas(),
        )
        for name in telemetry_env.apply(prepared.gateway_config.otlp):
            log.info("%s from kvscope.yaml (gateway.otlp)", name)
        tracer, provider = tracing.make_tracer()
        genai, meters = genai_metrics.make()
        gateway = Gateway(
            app,
            policy=policy,
            counter=VllmCounter(online),
            metrics=metrics,
            tags=tags,
            abort=engine.abort,
            model_name=model_name,
            tracer=tracer,
            kv_pool_tokens=kv_capacity_tokens(vllm_config),
            root_path=args.root_path or "",
            mounted=frozenset(getattr(r, "path", "") for r in app.routes),
            genai=genai,
            memo=memo,
            handoff=request_handoff.install(),
        )
        _log_gateway(gateway, kv_capacity_tokens(vllm_config))
        for row in prepared.effective:
            metrics.config_info.labels(model_name, prepared.profile, row.dest, str(row.value)).set(1)
        config = uvicorn.Config(
            gateway,
            log_level=args.uvicorn_log_level,
            access_log=False,
            timeout_keep_alive=5,
            lifespan="on",
        )
        server = NoSignalServer(config)
        app.state.server = server
        exit_code = await _run_until_stopped(server, sock, gateway, engine, options.drain_timeout)
        if provider is not None:
            provider.shutdown()
        if meters is not None:
            meters.shutdown()  # the last export
    finally:
        engine.shutdown()
        sock.close()
    return exit_code


async def _run_until_stopped(server, sock, gateway: Gateway, engine, drain_timeout: float) -> int:  # noqa: ANN001
    loop = asyncio.get_running_loop()
    state = {"exit": exitcodes.OK}

    async def drain() -> None:
        if gateway.draining:
            return
        gateway.draining = True
        log.warning("draining: %d request(s) in flight, up to %.0f s", gateway.inflight, drain_timeout)
        deadline = loop.time() + drain_timeout
        while gateway.inflight and loop.time() < deadline:
            await asyncio.sleep(0.05)
        server.should_exit = True

    async def watchdog() -> None:
        while True:
            await asyncio.sleep(WATCHDOG_SECONDS)
            if not gateway.ready and server.started:
                gateway.ready = True
            if engine.errored:
                log.error(
                    "the vLLM engine died (%s); exiting so the process is restarted",
                    engine.dead_error,
                )
                state["exit"] = 1
                server.should_exit = True
                return

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: loop.create_task(drain()))
    watcher = loop.create_task(watchdog())
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return state["exit"]


def _log_gateway(gateway: Gateway, pool_tokens: int) -> None:
    """What the gateway does besides the engine flags: QoS classes and KV lanes."""
    if not gateway.policy.qos_enabled:
        return
    classes = ", ".join(
        f"{c.name} (<= {c.max_prompt_tokens} tokens, +{c.delay_ms / 1000:g} s)"
        if c.max_prompt_tokens is not None
        else f"{c.name} (longer, +{c.delay_ms / 1000:g} s)"
        for c in gateway.policy.config.qos.classes
    )
    log.info("QoS priority by prompt length: %s", classes)
    for lane in gateway.lanes.values():
        log.info(
            "KV lane %r: its requests together hold at most %d of the %d-token KV pool; more wait at the gateway",
            lane.name,
            lane.capacity,
            pool_tokens,
        )


def _configure_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("(kvscope serve) %(levelname)s %(asctime)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def run(options: ServeOptions) -> int:
    """Entry point behind `kvscope serve`."""
    _configure_logging()
    console = Console(stderr=True)
    try:
        prepared = prepare(options)
    except UsageError as exc:
        console.print(f"kvscope serve: {exc}", highlight=False, markup=False, soft_wrap=True)
        return exitcodes.USAGE
    import uvloop

    try:
        with private_rpc_dir():
            return uvloop.run(serve(prepared, options))
    except OSError as exc:
        console.print(f"kvscope serve: cannot listen on {options.host}:{options.port}: {exc.strerror}")
        return exitcodes.USAGE
