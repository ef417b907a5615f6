"""dashboards' sub-app: `kvscope dashboards build`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvscope.cli_support import ConfigOption, fail, load_config

app = typer.Typer(help="Grafana dashboards generated from the signal catalog and kvscope.yaml.")


@app.command("build")
def build(
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the dashboards' JSON (default: the current directory; in a kvscope checkout dashboards/)."
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Generate the Grafana dashboards (JSON)."""
    from dashboards import build as builder
    from kvscope import paths

    settings = load_config("dashboards build", config)
    try:
        written = builder.write(paths.output(out, "dashboards"), settings)
    except OSError as exc:
        fail("dashboards build", f"cannot write: {exc}")
    for path in written:
        typer.echo(f"wrote {path}")
