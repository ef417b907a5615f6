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


@app.command(context_settings=_PASSTHROUGH)
def export(ctx: typer.Context) -> None:
    """Run the node exporter: vLLM metrics + GPU telemetry (DCGM, NVML) on one /metrics."""
    _not_built("export", 4)


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
