"""`kvscope`: the one entry point. Subcommands live with their component; this file wires them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kvscope import exitcodes

app = typer.Typer(
    name="kvscope",
    help="Observability for LLM serving on vLLM and NVIDIA GPUs: see the KV cache, page on it, "
    "name the bottleneck.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dashboards_app = typer.Typer(help="Grafana dashboards generated from the signal catalog.")
alerts_app = typer.Typer(help="Prometheus alert and recording rules generated from the catalog.")
app.add_typer(dashboards_app, name="dashboards")
app.add_typer(alerts_app, name="alerts")

# Typer vendors click; its UsageError (unknown command/option, bad value) is BadParameter's base.
_UsageError: type[Exception] = typer.BadParameter.__mro__[1]
_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _not_built(command: str, issue: int) -> None:
    typer.echo(f"kvscope {command}: not built yet (tracked in issue {issue})", err=True)
    raise typer.Exit(exitcodes.USAGE)


@app.command(context_settings=_PASSTHROUGH)
def serve(
    ctx: typer.Context,
    model: Annotated[
        str | None, typer.Option(help="Model folder or name (default: the generated demo model).")
    ] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients ask for.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    profile: Annotated[
        str,
        typer.Option(help="default: vLLM's defaults; tuned: the seeds' fixes for this hardware."),
    ] = "default",
    config: Annotated[
        Path | None, typer.Option(help="Gateway YAML: API keys, tiers, limits, quotas, QoS.")
    ] = None,
    draft_model: Annotated[
        str | None, typer.Option(help="Draft model for speculative decoding (GPU only).")
    ] = None,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds SIGTERM waits for in-flight requests.")
    ] = 30.0,
) -> None:
    """Run the gateway + vLLM engine with a tuned profile (default | tuned).

    Any other --flag is passed to vLLM as an engine flag and overrides the profile.
    """
    from serving.server import ServeOptions, run

    options = ServeOptions(
        model=model,
        served_model_name=served_model_name,
        host=host,
        port=port,
        profile=profile,
        config=config,
        draft_model=draft_model,
        drain_timeout=drain_timeout,
        engine_flags=tuple(ctx.args),
    )
    raise typer.Exit(run(options))


export_app = typer.Typer(
    help="Run the node exporter: vLLM metrics + GPU telemetry (DCGM, NVML) on one /metrics.",
    invoke_without_command=True,
)
app.add_typer(export_app, name="export")


@export_app.callback()
def export(
    ctx: typer.Context,
    listen_address: Annotated[
        str | None,
        typer.Option("--web.listen-address", help="host:port to serve on [127.0.0.1:9400]."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            help="GPU backend: auto (DCGM, else NVML, else none) | dcgm | nvml | emulated | none."
        ),
    ] = None,
    vllm: Annotated[
        list[str] | None,
        typer.Option("--vllm", help="vLLM or kvscope serve /metrics URL (repeat for more)."),
    ] = None,
    dcgm_exporter: Annotated[
        str | None, typer.Option(help="Ingest a running dcgm-exporter at this URL.")
    ] = None,
    dcgm_bindings: Annotated[
        str | None, typer.Option(help="Folder of DCGM's Python bindings (pydcgm.py, ...).")
    ] = None,
    collect_interval: Annotated[
        float | None,
        typer.Option(help="Seconds between background collections; 0 = on each scrape [5]."),
    ] = None,
    emulated_gpus: Annotated[int | None, typer.Option(help="How many emulated GPUs [4].")] = None,
    emulated_model: Annotated[str | None, typer.Option(help="H100 | H200 [H100].")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS key (PEM).")] = None,
    bearer_token: Annotated[str | None, typer.Option(help="Require this bearer token.")] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML with the same keys as these flags.")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one scrape and exit.")] = False,
) -> None:
    """Run the node exporter: vLLM metrics + GPU telemetry (DCGM, NVML) on one /metrics."""
    if ctx.invoked_subcommand is not None:
        return
    from exporter import config as export_config

    overrides = {
        "listen_address": listen_address,
        "gpu": gpu,
        "vllm": vllm or None,
        "dcgm_exporter": dcgm_exporter,
        "dcgm_bindings": dcgm_bindings,
        "collect_interval": collect_interval,
        "emulated_gpus": emulated_gpus,
        "emulated_model": emulated_model,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "bearer_token": bearer_token,
    }
    try:
        cfg = export_config.load(config, overrides)
        assembly = export_config.assemble(cfg)
    except export_config.ConfigError as exc:
        typer.echo(f"kvscope export: {exc}", err=True)
        raise typer.Exit(exitcodes.USAGE) from None
    except export_config.BackendUnavailable as exc:
        typer.echo(f"kvscope export: {exc}", err=True)
        raise typer.Exit(exitcodes.UNAVAILABLE) from None
    if once:
        from exporter.registry import Exporter

        exporter = Exporter(assembly.collectors, interval=0)
        sys.stdout.write(exporter.refresh().decode())
        exporter.stop()
        raise typer.Exit(exitcodes.OK)
    from exporter.server import serve as serve_exporter

    raise typer.Exit(serve_exporter(cfg, assembly))


@export_app.command("inject")
def export_inject(
    fault: Annotated[
        str,
        typer.Argument(
            help="xid | thermal | power_cap | pcie_degraded | pcie_saturated | memory_leak | "
            "colocated_process | row_remap_failure | clear | list"
        ),
    ],
    gpu: Annotated[int, typer.Option(help="Which emulated GPU.")] = 0,
    url: Annotated[str, typer.Option(help="The exporter's address.")] = "http://127.0.0.1:9400",
    param: Annotated[
        list[str] | None,
        typer.Option("--set", help="A fault parameter, e.g. --set xid=79 (repeat)."),
    ] = None,
) -> None:
    """Inject a fault into an emulated GPU (or `clear` / `list` them)."""
    import json

    import httpx

    endpoint = url.rstrip("/") + "/-/faults"
    try:
        if fault == "list":
            response = httpx.get(endpoint, timeout=10)
        elif fault == "clear":
            response = httpx.delete(endpoint, timeout=10)
        else:
            body: dict[str, object] = {"gpu": gpu, "fault": fault}
            for item in param or []:
                key, sep, value = item.partition("=")
                if not sep:
                    typer.echo(
                        f"kvscope export inject: --set wants key=value, not {item!r}", err=True
                    )
                    raise typer.Exit(exitcodes.USAGE)
                body[key] = (
                    json.loads(value) if value.replace(".", "", 1).lstrip("-").isdigit() else value
                )
            response = httpx.post(endpoint, json=body, timeout=10)
    except httpx.HTTPError as exc:
        typer.echo(f"kvscope export inject: cannot reach {endpoint}: {exc}", err=True)
        raise typer.Exit(exitcodes.UNAVAILABLE) from None
    if response.status_code == 404:
        typer.echo(
            f"kvscope export inject: {url} serves no fault API (run it with --gpu emulated)",
            err=True,
        )
        raise typer.Exit(exitcodes.UNAVAILABLE)
    typer.echo(response.text)
    if response.status_code >= 400:
        raise typer.Exit(exitcodes.USAGE)


@app.command(context_settings=_PASSTHROUGH)
def diagnose(ctx: typer.Context) -> None:
    """Name the bottleneck now, or at a past time, with evidence and the fix."""
    _not_built("diagnose", 5)


@app.command(context_settings=_PASSTHROUGH)
def plan(ctx: typer.Context) -> None:
    """KV-cache capacity plan for a model and GPUs."""
    _not_built("plan", 5)


@dashboards_app.command("build", context_settings=_PASSTHROUGH)
def dashboards_build(ctx: typer.Context) -> None:
    """Generate the Grafana dashboards (JSON)."""
    _not_built("dashboards build", 6)


@alerts_app.command("build", context_settings=_PASSTHROUGH)
def alerts_build(ctx: typer.Context) -> None:
    """Generate the Prometheus rule files (plain and PrometheusRule)."""
    _not_built("alerts build", 6)


@app.command(context_settings=_PASSTHROUGH)
def drill(ctx: typer.Context) -> None:
    """Reproduce an incident on the real stack; show alerts, diagnosis and the fix."""
    _not_built("drill", 7)


@app.command("demo-model")
def demo_model(
    cache_dir: Annotated[
        Path | None,
        typer.Option(help="Cache folder (default: $KVSCOPE_CACHE_DIR or ~/.cache/kvscope)."),
    ] = None,
) -> None:
    """Generate the offline demo model (tiny Llama + BPE tokenizer) and print its folder."""
    from serving.demo_model import ensure_demo_model

    typer.echo(ensure_demo_model(cache_dir))


def main(argv: list[str] | None = None) -> int:
    """Console-script entry: usage errors exit 64 (the contract), not click's 2."""
    try:
        result = app(args=argv, standalone_mode=False)
    except _UsageError as exc:
        exc.show()  # type: ignore[attr-defined]
        return exitcodes.USAGE
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    return result if isinstance(result, int) else exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
