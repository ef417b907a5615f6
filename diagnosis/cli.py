"""diagnosis's sub-app: `kvscope diagnose` (the contract in docs/diagnosis.md)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from diagnosis.webhook_config import WebhookConfig
from kvscope import exitcodes
from kvscope.cli_support import ConfigOption, choice, fail, load_config

if TYPE_CHECKING:
    from diagnosis.verdict import Diagnosis

CONFIG_SECTION = ("webhook", WebhookConfig)  # its part of kvscope.yaml, for `kvscope config show`
app = typer.Typer()
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)


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
        str,
        typer.Option(
            help="--prometheus: the end of the window, compared with what came before it; an incident whose "
            "condition did not hold in it is listed as recovered (severity info, exit code unaffected)."
        ),
    ] = "5m",
    baseline: Annotated[
        str | None,
        typer.Option(
            help="--prometheus: the window before this one that changes are measured against "
            "(default: the window's length)."
        ),
    ] = None,
    selector: Annotated[
        str,
        typer.Option(help='Label matchers for every query, e.g. namespace="prod",pod=~"vllm-.*" (braces optional).'),
    ] = "",
    path_prefix: Annotated[str, typer.Option(help="API path prefix (Mimir: /prometheus).")] = "",
    header: Annotated[
        list[str] | None,
        typer.Option(help='Extra HTTP header "Name: value" (e.g. X-Scope-OrgID); repeat.'),
    ] = None,
    bearer_token: Annotated[
        str | None, typer.Option(help="Bearer token for the API (visible to `ps`: prefer --bearer-token-file).")
    ] = None,
    bearer_token_file: Annotated[Path | None, typer.Option(help="Read the API's bearer token from this file.")] = None,
    interval: Annotated[
        str, typer.Option(help="--scrape: how long to watch (counters rated over it, gauges sampled every second).")
    ] = "10s",
    phases: Annotated[
        str,
        typer.Option(
            help="--prometheus: auto | one | two. Two: the latency quantiles read only for the engines a screen "
            "over kvscope's rollups does not clear (auto: where the rollups are loaded, from 64 engines)."
        ),
    ] = "auto",
    output_format: Annotated[
        str, typer.Option("--format", help="text | json | markdown | html (one self-contained page)")
    ] = "text",
    out: Annotated[Path | None, typer.Option(help="Write the report to this file instead of stdout.")] = None,
    save_bundle: Annotated[Path | None, typer.Option(help="Also save the evidence to this file.")] = None,
    forward: Annotated[str | None, typer.Option(help="--listen: POST each report (JSON) to this URL.")] = None,
    reports_dir: Annotated[Path | None, typer.Option(help="--listen: keep reports here.")] = None,
    config: ConfigOption = None,
) -> None:
    """Name the bottleneck now, or at a past time, with evidence and the fix."""
    from kvscope.durations import parse_duration, parse_time
    from kvscope.promql import Selector

    settings = load_config("diagnose", config)
    chosen = [name for name, v in (("--prometheus", prometheus), ("--scrape", scrape), ("--bundle", bundle)) if v]
    if len(chosen) != 1:
        fail("diagnose", f"give exactly one of --prometheus, --scrape, --bundle (got {' and '.join(chosen) or 'none'})")
    if listen and bundle:
        fail("diagnose", "--listen diagnoses live alerts: use it with --prometheus or --scrape")
    choice("diagnose", "--format", output_format, ("text", "json", "markdown", "html"))
    from diagnosis.screen import PHASES

    choice("diagnose", "--phases", phases, PHASES)
    if listen and out:
        fail("diagnose", "--out writes one report: the webhook (--listen) keeps its reports (--reports-dir)")
    try:
        headers = dict(_header(h) for h in header or [])
        fields = {
            "at": parse_time(at),
            "window": parse_duration(window),
            "recent": parse_duration(recent),
            "baseline": parse_duration(baseline) if baseline else None,
            "interval": parse_duration(interval),
            "selector": Selector.parse(selector),
        }
    except ValueError as exc:
        fail("diagnose", str(exc))
    if bearer_token and bearer_token_file:
        fail("diagnose", "give --bearer-token or --bearer-token-file, not both")
    if bearer_token_file is not None:
        bearer_token = _read_token(bearer_token_file)
    from diagnosis.run import Request, run, undiagnosable

    request = Request(
        prometheus=prometheus,
        scrape=list(scrape or []),
        bundle=bundle,
        path_prefix=path_prefix,
        headers=headers,
        bearer_token=bearer_token,
        save_bundle=save_bundle,
        phases=phases,
        config=settings,
        **fields,  # type: ignore[arg-type]
    )
    if listen:
        from diagnosis.webhook import serve_webhook
        from diagnosis.webhook_config import ConfigError, credentials, load_webhook_config

        try:
            webhook = load_webhook_config(settings)
            secrets = credentials(webhook)
        except ConfigError as exc:
            fail("diagnose", str(exc))
        code = serve_webhook(
            listen, request, forward=forward, reports_dir=reports_dir, settings=webhook, credentials=secrets
        )
        raise typer.Exit(code)
    from diagnosis import report
    from diagnosis.sources import SourceError

    try:
        result = run(request)
    except SourceError as exc:
        typer.echo(f"kvscope diagnose: {exc}", err=True)
        if output_format in ("json", "html"):
            _emit(_render(output_format, undiagnosable(request, str(exc)), None), out)
        raise typer.Exit(exitcodes.UNDIAGNOSABLE) from None
    history = None
    if output_format == "html":
        from diagnosis import history as histories

        history = histories.fetch(request, result)
    if output_format == "text" and out is None:
        from rich.console import Console

        report.render_text(result, Console())  # the terminal's own width and colours
    else:
        _emit(_render(output_format, result, history), out)
    raise typer.Exit(result.exit_code)


def _render(output_format: str, result: Diagnosis, history: dict[str, Any] | None) -> str:
    from diagnosis import report

    if output_format == "json":
        return report.to_json(result) + "\n"
    if output_format == "markdown":
        return report.render_markdown(result)
    if output_format == "html":
        return report.render_html(result, history)
    from rich.console import Console

    buffer = io.StringIO()
    report.render_text(result, Console(file=buffer, width=120, color_system=None))
    return buffer.getvalue()


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.write_text(text)
    except OSError as exc:
        fail("diagnose", f"cannot write --out {out}: {exc.strerror}")


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(errors="replace").strip()
    except OSError as exc:
        fail("diagnose", f"cannot read --bearer-token-file {path}: {exc.strerror}")
    if not token or not token.isascii() or not token.isprintable():
        fail("diagnose", f"--bearer-token-file {path} must hold one line of printable ASCII")
    return token


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _HEADER_NAME.fullmatch(name):
        raise ValueError(f'--header wants "Name: value", not {text!r}')
    if any(ch in value for ch in "\r\n\0") or not value.isprintable():
        raise ValueError(f"--header {name}: the value must be printable text on one line")
    return name, value
