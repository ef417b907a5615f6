"""`kvscope`: the one entry point, the composition root. It mounts each component's sub-app
and maps usage errors to the contract's exit code; every command lives with its component."""

from __future__ import annotations

import sys

import typer

from alerts import cli as alerts_cli
from dashboards import cli as dashboards_cli
from diagnosis import cli as diagnosis_cli
from drill import cli as drill_cli
from exporter import cli as exporter_cli
from kvscope import config_cli, exitcodes
from serving import cli as serving_cli

app = typer.Typer(
    name="kvscope",
    help="Observability for LLM serving on vLLM and NVIDIA GPUs: see the KV cache, page on it, name the bottleneck.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(serving_cli.app)  # serve, plan, demo-model
app.add_typer(exporter_cli.app, name="export")
app.add_typer(diagnosis_cli.app)  # diagnose
app.add_typer(dashboards_cli.app, name="dashboards")
app.add_typer(alerts_cli.app, name="alerts")
app.add_typer(drill_cli.app)  # drill
app.add_typer(
    config_cli.build(sections=(serving_cli.CONFIG_SECTION, exporter_cli.CONFIG_SECTION, diagnosis_cli.CONFIG_SECTION)),
    name="config",
)

# Typer vendors click; its UsageError (unknown command/option, bad value) is BadParameter's base.
_UsageError: type[Exception] = typer.BadParameter.__mro__[1]


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
