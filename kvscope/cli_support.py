"""What every component's sub-app shares: the `--config` option, loading it, and one-line
failures with the contract's exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from kvscope import config, exitcodes

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar=config.ENV,
        show_envvar=True,
        help="kvscope.yaml: thresholds, SLOs, selectors, GPU models, gateway and export sections.",
    ),
]


def fail(command: str, message: str, code: int = exitcodes.USAGE) -> NoReturn:
    """Print `kvscope COMMAND: message` on stderr and exit with `code` (64: usage)."""
    typer.echo(f"kvscope {command}: {message}", err=True)
    raise typer.Exit(code)


def load_config(command: str, path: Path | None) -> config.Config:
    """The effective config, or exit 64 with the first thing wrong in it."""
    try:
        return config.load(path)
    except config.ConfigError as exc:
        fail(command, str(exc))


def choice(command: str, option: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`, else exit 64 naming them."""
    if value not in allowed:
        listed = ", ".join(allowed[:-1]) + f" or {allowed[-1]}" if len(allowed) > 1 else allowed[0]
        fail(command, f"{option} must be {listed}, not {value!r}")
    return value
