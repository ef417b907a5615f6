"""alerts' sub-app: `kvscope alerts build`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvscope.cli_support import ConfigOption, fail, load_config

app = typer.Typer(help="Prometheus alert and recording rules generated from the catalog and kvscope.yaml.")


@app.command("build")
def build(
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the rule files, their tests, the PrometheusRule and runbooks.md (default: "
            "the current directory; in a kvscope checkout alerts/, deploy/ and docs/)."
        ),
    ] = None,
    runbook_base: Annotated[str | None, typer.Option(help="URL of docs/runbooks.md for runbook_url.")] = None,
    ttft_objective: Annotated[float | None, typer.Option(help="Share of requests within --ttft-seconds.")] = None,
    ttft_seconds: Annotated[
        float | None, typer.Option(help="TTFT objective in seconds: a bucket bound of vLLM's TTFT histogram.")
    ] = None,
    error_objective: Annotated[float | None, typer.Option(help="Share of requests without abort or error.")] = None,
    config: ConfigOption = None,
) -> None:
    """Generate the Prometheus rule files (plain and PrometheusRule), their promtool tests and runbooks."""
    from alerts import build as builder
    from alerts import definitions, runbook
    from kvscope import paths
    from kvscope.config import ConfigError, with_slo

    settings = load_config("alerts build", config)
    try:
        settings = with_slo(
            settings, ttft_objective=ttft_objective, ttft_seconds=ttft_seconds, error_objective=error_objective
        )
    except ConfigError as exc:
        fail("alerts build", str(exc))
    base = runbook_base or definitions.RUNBOOK_BASE
    root = paths.checkout() if out is None else None
    try:
        if root is not None:
            written = builder.write(root / "alerts", settings, base, operator_dir=root / "deploy")
            written.append(runbook.write(root / "docs" / runbook.RUNBOOKS_FILE, settings, base))
        else:
            folder = paths.output(out, "alerts")
            written = builder.write(folder, settings, base)
            written.append(runbook.write(folder / runbook.RUNBOOKS_FILE, settings, base))
    except ValueError as exc:  # a selector the generated tests cannot satisfy
        fail("alerts build", str(exc))
    except OSError as exc:
        fail("alerts build", f"cannot write: {exc}")
    for path in written:
        typer.echo(f"wrote {path}")
