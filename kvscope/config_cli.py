"""The ground's sub-app: `kvscope config show` prints every effective value and where it came from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated

import typer
from pydantic import BaseModel

from kvscope.cli_support import ConfigOption, choice, fail, load_config
from kvscope.config import ConfigError, effective_rows


def build(sections: Sequence[tuple[str, type[BaseModel]]] = ()) -> typer.Typer:
    """The `config` sub-app; `sections` are the components' models for their kvscope.yaml sections."""
    app = typer.Typer(help="The effective kvscope.yaml: thresholds, SLOs, selectors, GPU models, sections.")

    @app.command("show")
    def show(
        output_format: Annotated[str, typer.Option("--format", help="text | json")] = "text",
        config: ConfigOption = None,
    ) -> None:
        """Print every effective value with where it came from (default or the file)."""
        choice("config show", "--format", output_format, ("text", "json"))
        settings = load_config("config show", config)
        try:
            rows = effective_rows(settings, sections)
        except ConfigError as exc:
            fail("config show", str(exc))
        if output_format == "json":
            typer.echo(
                json.dumps(
                    {
                        "config": settings.origin,
                        "values": [{"key": r.key, "value": r.value, "source": r.source} for r in rows],
                    },
                    indent=2,
                    default=str,
                )
            )
            return
        # one line per value, like `git config --list --show-origin`: greppable, never wrapped
        typer.echo(f"# kvscope config: {settings.origin}")
        width = max(len(r.key) for r in rows)
        for r in rows:
            typer.echo(f"{r.key:<{width}}  {json.dumps(r.value, default=str)}  # {r.source}")

    return app
