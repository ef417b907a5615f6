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
            "the current directory; in a kvscope checkout alerts/, docs/ and all of deploy/)."
        ),
    ] = None,
    runbook_base: Annotated[
        str | None, typer.Option(help="URL of docs/runbooks.md for runbook_url (default: deploy.runbook_base).")
    ] = None,
    ttft_objective: Annotated[float | None, typer.Option(help="Share of requests within --ttft-seconds.")] = None,
    ttft_seconds: Annotated[
        float | None, typer.Option(help="TTFT objective in seconds: a bucket bound of vLLM's TTFT histogram.")
    ] = None,
    error_objective: Annotated[float | None, typer.Option(help="Share of requests without abort or error.")] = None,
    config: ConfigOption = None,
) -> None:
    """Generate the Prometheus rule files (plain and PrometheusRule), their promtool tests and runbooks
    (in a kvscope checkout also the Kubernetes manifests of deploy/)."""
    from alerts import build as builder
    from alerts import deploy, runbook
    from kvscope import paths
    from kvscope.config import ConfigError, with_slo

    settings = load_config("alerts build", config)
    try:
        settings = with_slo(
            settings, ttft_objective=ttft_objective, ttft_seconds=ttft_seconds, error_objective=error_objective
        )
    except ConfigError as exc:
        fail("alerts build", str(exc))
    base = deploy.runbook_base(settings, runbook_base)
    root = paths.checkout() if out is None else None
    try:
        if root is not None:
            written = builder.write(root / "alerts", settings, base, operator_dir=root / "deploy")
            written.append(runbook.write(root / "docs" / runbook.RUNBOOKS_FILE, settings, base))
            written += [p for p in deploy.write(root / "deploy", settings, base) if p not in written]
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


def _labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            fail("alerts deploy", f"--label wants key=value, not {item!r}")
        labels[key] = value
    return labels


@app.command("deploy")
def deploy_manifests(
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for the manifests (default: the current directory; in a kvscope checkout deploy/)."),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="Namespace of the exporter (default: deploy.namespace).")
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="key=value on every resource, e.g. release=kube-prometheus-stack (repeat; adds to deploy.labels).",
        ),
    ] = None,
    image: Annotated[str | None, typer.Option(help="The exporter image (default: deploy.image).")] = None,
    runbook_base: Annotated[
        str | None, typer.Option(help="URL of docs/runbooks.md for runbook_url (default: deploy.runbook_base).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Generate the Kubernetes manifests: the exporter DaemonSet, RBAC, Service, ServiceMonitor, PrometheusRule."""
    from alerts import deploy
    from kvscope import paths
    from kvscope.config import ConfigError, with_deploy

    settings = load_config("alerts deploy", config)
    try:
        settings = with_deploy(
            settings,
            namespace=namespace,
            labels=_labels(label or []) or None,
            image=image,
            runbook_base=runbook_base,
        )
    except ConfigError as exc:
        fail("alerts deploy", str(exc))
    try:
        written = deploy.write(paths.output(out, "deploy"), settings)
    except ValueError as exc:  # a selector the generated rule tests cannot satisfy
        fail("alerts deploy", str(exc))
    except OSError as exc:
        fail("alerts deploy", f"cannot write: {exc}")
    for path in written:
        typer.echo(f"wrote {path}")
