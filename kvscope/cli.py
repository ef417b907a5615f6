"""`kvscope`: the one entry point. Subcommands live with their component; this file wires them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kvscope import exitcodes

app = typer.Typer(
    name="kvscope",
    help="Observability for LLM serving on vLLM and NVIDIA GPUs: see the KV cache, page on it, name the bottleneck.",
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


@app.command(context_settings=_PASSTHROUGH)
def serve(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Model folder or name (default: the generated demo model).")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients ask for.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    profile: Annotated[
        str,
        typer.Option(help="default: vLLM's defaults; tuned: the seeds' fixes for this hardware."),
    ] = "default",
    config: Annotated[Path | None, typer.Option(help="Gateway YAML: API keys, tiers, limits, quotas, QoS.")] = None,
    draft_model: Annotated[str | None, typer.Option(help="Draft model for speculative decoding (GPU only).")] = None,
    drain_timeout: Annotated[float, typer.Option(help="Seconds SIGTERM waits for in-flight requests.")] = 30.0,
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
        typer.Option("--web.listen-address", help="host:port to serve on (default: 127.0.0.1:9400)."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU backend: auto (DCGM, else NVML, else none) | dcgm | nvml | emulated | none."),
    ] = None,
    vllm: Annotated[
        list[str] | None,
        typer.Option("--vllm", help="vLLM or kvscope serve /metrics URL (repeat for more)."),
    ] = None,
    dcgm_exporter: Annotated[str | None, typer.Option(help="Ingest a running dcgm-exporter at this URL.")] = None,
    dcgm_bindings: Annotated[
        str | None, typer.Option(help="Folder of DCGM's Python bindings (pydcgm.py, ...).")
    ] = None,
    collect_interval: Annotated[
        float | None,
        typer.Option(help="Seconds between background collections; 0 = on each scrape (default: 5)."),
    ] = None,
    emulated_gpus: Annotated[int | None, typer.Option(help="How many emulated GPUs (default: 4).")] = None,
    emulated_model: Annotated[str | None, typer.Option(help="H100 | H200 (default: H100).")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS key (PEM).")] = None,
    bearer_token: Annotated[str | None, typer.Option(help="Require this bearer token.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML with the same keys as these flags.")] = None,
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
                    typer.echo(f"kvscope export inject: --set wants key=value, not {item!r}", err=True)
                    raise typer.Exit(exitcodes.USAGE)
                body[key] = json.loads(value) if value.replace(".", "", 1).lstrip("-").isdigit() else value
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


@app.command()
def diagnose(
    prometheus: Annotated[
        str | None, typer.Option(help="Prometheus (or Thanos / Mimir / VictoriaMetrics) base URL.")
    ] = None,
    scrape: Annotated[
        list[str] | None,
        typer.Option(help="Live /metrics URL (vLLM, kvscope export, dcgm-exporter); repeat."),
    ] = None,
    bundle: Annotated[Path | None, typer.Option(help="Diagnose a saved bundle (offline).")] = None,
    listen: Annotated[str | None, typer.Option(help="Serve an Alertmanager webhook on host:port instead.")] = None,
    at: Annotated[str | None, typer.Option(help="RFC 3339 or unix seconds (default: now).")] = None,
    window: Annotated[str, typer.Option(help="How far back to look, e.g. 15m, 1h.")] = "30m",
    recent: Annotated[
        str, typer.Option(help="--prometheus: the end of the window compared with what came before it.")
    ] = "5m",
    selector: Annotated[str, typer.Option(help='Label matchers for every query, e.g. {namespace="prod"}.')] = "",
    path_prefix: Annotated[str, typer.Option(help="API path prefix (Mimir: /prometheus).")] = "",
    header: Annotated[
        list[str] | None,
        typer.Option(help='Extra HTTP header "Name: value" (e.g. X-Scope-OrgID); repeat.'),
    ] = None,
    bearer_token: Annotated[str | None, typer.Option(help="Bearer token for the API.")] = None,
    interval: Annotated[
        str, typer.Option(help="--scrape: how long to watch (counters rated over it, gauges sampled every second).")
    ] = "10s",
    output_format: Annotated[str, typer.Option("--format", help="text | json | markdown")] = "text",
    save_bundle: Annotated[Path | None, typer.Option(help="Also save the evidence to this file.")] = None,
    forward: Annotated[str | None, typer.Option(help="--listen: POST each report (JSON) to this URL.")] = None,
    reports_dir: Annotated[Path | None, typer.Option(help="--listen: keep reports here.")] = None,
) -> None:
    """Name the bottleneck now, or at a past time, with evidence and the fix."""
    from diagnosis.sources import SourceError, parse_duration, parse_time

    chosen = [name for name, v in (("--prometheus", prometheus), ("--scrape", scrape), ("--bundle", bundle)) if v]
    if len(chosen) != 1:
        what = "none" if not chosen else " and ".join(chosen)
        typer.echo(
            f"kvscope diagnose: give exactly one of --prometheus, --scrape, --bundle (got {what})",
            err=True,
        )
        raise typer.Exit(exitcodes.USAGE)
    if listen and bundle:
        typer.echo(
            "kvscope diagnose: --listen diagnoses live alerts: use it with --prometheus or --scrape",
            err=True,
        )
        raise typer.Exit(exitcodes.USAGE)
    if output_format not in ("text", "json", "markdown"):
        typer.echo(
            f"kvscope diagnose: --format must be text, json or markdown, not {output_format!r}",
            err=True,
        )
        raise typer.Exit(exitcodes.USAGE)
    try:
        headers = dict(_header(h) for h in header or [])
        request_fields = {
            "at": parse_time(at),
            "window": parse_duration(window),
            "recent": parse_duration(recent),
            "interval": parse_duration(interval),
        }
    except ValueError as exc:
        typer.echo(f"kvscope diagnose: {exc}", err=True)
        raise typer.Exit(exitcodes.USAGE) from None
    from diagnosis.run import Request, run

    request = Request(
        prometheus=prometheus,
        scrape=list(scrape or []),
        bundle=bundle,
        selector=selector,
        path_prefix=path_prefix,
        headers=headers,
        bearer_token=bearer_token,
        save_bundle=save_bundle,
        **request_fields,
    )
    if listen:
        from diagnosis.webhook import serve_webhook

        raise typer.Exit(serve_webhook(listen, request, forward=forward, reports_dir=reports_dir))
    try:
        result = run(request)
    except SourceError as exc:
        typer.echo(f"kvscope diagnose: {exc}", err=True)
        if output_format == "json":
            from diagnosis.findings import INSUFFICIENT_DATA, Severity
            from diagnosis.report import to_json
            from diagnosis.verdict import Diagnosis

            typer.echo(
                to_json(
                    Diagnosis(
                        request.at,
                        request.window,
                        prometheus or (bundle and str(bundle)) or "",
                        INSUFFICIENT_DATA,
                        Severity.OK,
                        0.0,
                        str(exc),
                    )
                )
            )
        raise typer.Exit(exitcodes.UNDIAGNOSABLE) from None
    from diagnosis import report

    if output_format == "json":
        typer.echo(report.to_json(result))
    elif output_format == "markdown":
        typer.echo(report.render_markdown(result), nl=False)
    else:
        from rich.console import Console

        report.render_text(result, Console())
    raise typer.Exit(result.exit_code)


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ValueError(f'--header wants "Name: value", not {text!r}')
    return name.strip(), value.strip()


@app.command()
def plan(
    model: Annotated[str, typer.Option(help="A Hugging Face config.json, or a model folder with one.")],
    gpus: Annotated[int, typer.Option(help="GPUs per engine (tensor parallel).")],
    gpu_memory: Annotated[float, typer.Option(help="Memory per GPU in GB (e.g. 80, 141).")],
    context: Annotated[int, typer.Option(help="Longest request (prompt + output) in tokens.")],
    kv_dtype: Annotated[str, typer.Option(help="fp16 | bf16 | fp8")] = "fp16",
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's share of each GPU.")] = 0.9,
    typical_tokens: Annotated[
        int | None, typer.Option(help="A typical request's tokens (default: context / 4).")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="text | json")] = "text",
) -> None:
    """KV-cache capacity plan for a model and GPUs."""
    import json

    from diagnosis.planner import PlanError, load_shape
    from diagnosis.planner import plan as make_plan

    try:
        shape = load_shape(model)
        result = make_plan(
            shape,
            gpus=gpus,
            gpu_memory_gib=gpu_memory,
            context=context,
            kv_dtype=kv_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            typical_tokens=typical_tokens,
        )
    except PlanError as exc:
        typer.echo(f"kvscope plan: {exc}", err=True)
        raise typer.Exit(exitcodes.USAGE) from None
    if output_format == "json":
        typer.echo(
            json.dumps(
                {
                    "model": model,
                    "gpus": gpus,
                    "gpu_memory_gb": gpu_memory,
                    "context": context,
                    **result.as_dict(),
                },
                indent=2,
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"KV-cache plan: {model} on {gpus} x {gpu_memory:g} GB, context {context:,}")
    table.add_column("")
    table.add_column("value", justify="right")
    rows = [
        ("KV bytes per token", f"{result.kv_bytes_per_token:,} ({kv_dtype})"),
        (
            "  if GQA were ignored (seed 000's formula)",
            f"{result.kv_bytes_per_token_ignoring_gqa:,}",
        ),
        ("weights", f"{result.weights_gib:,.1f} GiB"),
        (
            "KV pool",
            f"{result.kv_pool_gib:,.1f} GiB = {result.blocks:,} blocks of {result.block_size} tokens",
        ),
        ("tokens in the pool", f"{result.pool_tokens:,}"),
        (f"sequences at full context ({context:,})", f"{result.sequences_at_full_context:,}"),
        ("sequences at a typical length", f"{result.sequences_at_typical_length:,}"),
        ("--block-size", str(result.block_size)),
        ("--max-num-seqs", str(result.max_num_seqs)),
        ("--max-num-batched-tokens", str(result.max_num_batched_tokens)),
        ("--long-prefill-token-threshold", str(result.long_prefill_token_threshold)),
    ]
    for name, v in rows:
        table.add_row(name, v)
    console = Console()
    console.print(table)
    for note in result.notes:
        console.print(f"note: {note}")


@dashboards_app.command("build")
def dashboards_build(
    out: Annotated[Path | None, typer.Option(help="Folder for the dashboards' JSON (default: dashboards/).")] = None,
) -> None:
    """Generate the Grafana dashboards (JSON)."""
    from dashboards import build

    for path in build.write(out or build.DASHBOARDS_DIR):
        typer.echo(f"wrote {path}")


@alerts_app.command("build")
def alerts_build(
    out: Annotated[Path | None, typer.Option(help="Folder for the rule files (default: alerts/).")] = None,
    runbook_base: Annotated[str | None, typer.Option(help="URL of docs/runbooks.md for runbook_url.")] = None,
    ttft_objective: Annotated[float, typer.Option(help="Share of requests within --ttft-seconds.")] = 0.99,
    ttft_seconds: Annotated[float, typer.Option(help="TTFT objective, a vLLM TTFT bucket bound.")] = 2.5,
    error_objective: Annotated[float, typer.Option(help="Share of requests without abort or error.")] = 0.995,
) -> None:
    """Generate the Prometheus rule files (plain and PrometheusRule) and their promtool tests."""
    from alerts import build, definitions, runbook

    if ttft_seconds not in definitions.TTFT_BUCKETS:
        typer.echo(
            f"kvscope alerts build: --ttft-seconds must be a bucket bound of vLLM's TTFT histogram "
            f"({', '.join(f'{b:g}' for b in definitions.TTFT_BUCKETS)}), not {ttft_seconds:g}",
            err=True,
        )
        raise typer.Exit(exitcodes.USAGE)
    for name, value in (("--ttft-objective", ttft_objective), ("--error-objective", error_objective)):
        if not 0 < value < 1:
            typer.echo(f"kvscope alerts build: {name} must be between 0 and 1 (e.g. 0.99), not {value:g}", err=True)
            raise typer.Exit(exitcodes.USAGE)
    written = build.write(
        out or build.ALERTS_DIR,
        runbook_base=runbook_base or definitions.RUNBOOK_BASE,
        ttft_objective=ttft_objective,
        ttft_seconds=ttft_seconds,
        error_objective=error_objective,
    )
    if out is None:
        written.append(runbook.write())
    for path in written:
        typer.echo(f"wrote {path}")


@app.command()
def drill(
    scenario: Annotated[
        str,
        typer.Argument(
            help="kv-avalanche | prefill-hol | prefix-miss | gpu-xid | thermal | pcie-degraded | memory-leak"
        ),
    ],
    profile: Annotated[
        str,
        typer.Option(help="default | tuned | both (the same traffic replayed on tuned, with a before/after table)."),
    ] = "default",
    duration: Annotated[
        str | None, typer.Option(help="Traffic per profile, e.g. 90s, 3m (default: the scenario's own, 75-120 s).")
    ] = None,
    ports: Annotated[str, typer.Option(help="SERVE,EXPORT,PROMETHEUS ports, or auto (free ones).")] = "auto",
    report: Annotated[Path | None, typer.Option(help="Report folder (default: reports/drill-SCENARIO-TIME).")] = None,
    model: Annotated[str | None, typer.Option(help="Model to serve (default: the generated demo model).")] = None,
    gpu: Annotated[
        str, typer.Option(help="auto (real GPUs when present and no fault is injected) | emulated | real.")
    ] = "auto",
    alert_speedup: Annotated[
        float, typer.Option(help="Divide every alert-rule duration by this, so alerts fire within a drill.")
    ] = 20.0,
) -> None:
    """Reproduce an incident on the real stack; show alerts, diagnosis and the fix."""
    from diagnosis.sources import parse_duration
    from kvscope.drill import scenarios
    from kvscope.drill.run import DrillOptions, default_report_dir, main_command, run
    from kvscope.drill.stack import Ports

    try:
        chosen = scenarios.get(scenario)
        if profile not in ("default", "tuned", "both"):
            raise ValueError(f"--profile must be default, tuned or both, not {profile!r}")
        seconds = parse_duration(duration) if duration else None
        if seconds is not None and seconds < 20:
            raise ValueError(f"--duration {duration} is too short: a drill needs at least 20s of traffic")
        if alert_speedup < 1:
            raise ValueError(f"--alert-speedup must be at least 1, not {alert_speedup:g}")
        port_choice = Ports.parse(ports)
    except ValueError as exc:
        typer.echo(f"kvscope drill: {exc}", err=True)
        raise typer.Exit(exitcodes.USAGE) from None
    options = DrillOptions(
        scenario=chosen,
        profiles=["default", "tuned"] if profile == "both" else [profile],
        report=(report or default_report_dir(scenario)).resolve(),
        duration=seconds,
        ports=port_choice,
        speedup=alert_speedup,
        model=model,
        gpu=gpu,
        command=main_command(sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "drill" else [scenario]),
    )
    raise typer.Exit(run(options))


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
