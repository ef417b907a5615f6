"""exporter's sub-app: `kvscope export` and `kvscope export inject`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from exporter.config import DEFAULT_PORT, ExportConfig
from kvscope import exitcodes
from kvscope.cli_support import ConfigOption, fail, load_config

CONFIG_SECTION = ("export", ExportConfig)  # its part of kvscope.yaml, for `kvscope config show`
app = typer.Typer(
    help="Run the node exporter: vLLM metrics + GPU telemetry (DCGM, NVML) on one /metrics.",
    invoke_without_command=True,
)


@app.callback()
def export(
    ctx: typer.Context,
    listen_address: Annotated[
        str | None,
        typer.Option(
            "--web.listen-address",
            help=f"host:port to serve on (default: 127.0.0.1:{DEFAULT_PORT}; dcgm-exporter keeps 9400).",
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU backend: auto (DCGM, else NVML, else none) | dcgm | nvml | emulated | none."),
    ] = None,
    vllm: Annotated[
        list[str] | None,
        typer.Option("--vllm", help="vLLM or kvscope serve /metrics URL (repeat for more)."),
    ] = None,
    discover: Annotated[
        list[str] | None,
        typer.Option(
            "--discover",
            help="Find vLLM engines on this node: procfs | kubernetes | kubelet | none (repeat or comma list; "
            "default: procfs when no --vllm is given).",
        ),
    ] = None,
    discover_interval: Annotated[
        float | None, typer.Option(help="Seconds between discoveries (default: the collection interval).")
    ] = None,
    kubelet_insecure_skip_verify: Annotated[
        bool | None,
        typer.Option(
            "--kubelet-insecure-skip-verify",
            help="--discover kubelet: do not verify the kubelet's certificate (self-signed kubelets; as "
            "metrics-server's --kubelet-insecure-tls).",
        ),
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
    emulated_model: Annotated[str | None, typer.Option(help="A model of the GPU table, e.g. H100, H200.")] = None,
    emulated_mig: Annotated[
        str | None, typer.Option(help='MIG layout of every emulated GPU, e.g. "3g.40gb,2g.20gb,1g.10gb".')
    ] = None,
    hostname_label: Annotated[
        str | None,
        typer.Option(
            help="Host label spelling: hostname (dcgm-exporter >= 4.6.0-4.8.3, the default) | Hostname (older) | none."
        ),
    ] = None,
    dcgm_names: Annotated[
        str | None,
        typer.Option(
            help="DCGM field names the local backends write: 4.8 (dcgm-exporter 4.6-4.8, the default) | 4.9 | 4.10 "
            "(base units: Hz, bytes, J, 0-1 ratios)."
        ),
    ] = None,
    xid_kmsg: Annotated[
        str | None,
        typer.Option(help="Kernel log read for XIDs: auto (/dev/kmsg with nvml/dcgm) | none | a file or pipe."),
    ] = None,
    web_config_file: Annotated[
        Path | None,
        typer.Option(
            "--web.config.file", help="exporter-toolkit web config (TLS, mTLS, bcrypt basic auth), as node_exporter."
        ),
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS key (PEM).")] = None,
    bearer_token_file: Annotated[
        Path | None, typer.Option(help="Require the bearer token in this file (or $KVSCOPE_EXPORT_TOKEN).")
    ] = None,
    config: ConfigOption = None,
    once: Annotated[bool, typer.Option("--once", help="Print one scrape and exit.")] = False,
) -> None:
    """Run the node exporter: vLLM metrics + GPU telemetry (DCGM, NVML) on one /metrics.

    The `export:` section of --config takes the same keys as these flags; flags win.
    """
    if ctx.invoked_subcommand is not None:
        return
    from exporter import config as export_config

    settings = load_config("export", config)
    overrides = {
        "listen_address": listen_address,
        "gpu": gpu,
        "vllm": vllm or None,
        "discover": discover or None,
        "discover_interval": discover_interval,
        "kubelet_insecure_skip_verify": kubelet_insecure_skip_verify,
        "dcgm_exporter": dcgm_exporter,
        "dcgm_bindings": dcgm_bindings,
        "collect_interval": collect_interval,
        "emulated_gpus": emulated_gpus,
        "emulated_model": emulated_model,
        "emulated_mig": emulated_mig,
        "hostname_label": hostname_label,
        "dcgm_names": dcgm_names,
        "xid_kmsg": xid_kmsg,
        "web_config_file": web_config_file,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "bearer_token_file": bearer_token_file,
    }
    for target in vllm or []:
        if "@" in target.partition("://")[2].partition("/")[0]:
            fail(
                "export",
                f"--vllm {target.split('@')[-1]}: no credentials on the command line (every user can read them); "
                "put the URL in kvscope.yaml's export.vllm or use vllm_bearer_token_file",
            )
    try:
        cfg = export_config.from_config(settings, overrides)
        web = cfg.web()
        cfg.token()
        assembly = export_config.assemble(cfg, settings.gpu_models)
    except export_config.ConfigError as exc:
        fail("export", str(exc))
    except export_config.BackendUnavailable as exc:
        fail("export", str(exc), exitcodes.UNAVAILABLE)
    if once:
        from exporter.registry import Exporter

        exporter = Exporter(assembly.collectors, interval=0)
        sys.stdout.write(exporter.refresh().decode())
        exporter.stop()
        raise typer.Exit(exitcodes.OK)
    from exporter.server import serve as serve_exporter

    raise typer.Exit(serve_exporter(cfg, assembly, web))


@app.command("inject")
def inject(
    fault: Annotated[
        str,
        typer.Argument(
            help="xid | thermal | power_cap | pcie_degraded | pcie_saturated | memory_leak | "
            "colocated_process | row_remap_failure | clear | list"
        ),
    ],
    gpu: Annotated[int, typer.Option(help="Which emulated GPU.")] = 0,
    url: Annotated[str, typer.Option(help="The exporter's address.")] = f"http://127.0.0.1:{DEFAULT_PORT}",
    param: Annotated[
        list[str] | None,
        typer.Option("--set", help="A fault parameter, e.g. --set xid=79 (repeat)."),
    ] = None,
) -> None:
    """Inject a fault into an emulated GPU (or `clear` / `list` them)."""
    import httpx

    endpoint = url.rstrip("/") + "/-/faults"
    body: dict[str, object] = {"gpu": gpu, "fault": fault}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail("export inject", f"--set wants key=value, not {item!r}")
        body[key] = json.loads(value) if value.replace(".", "", 1).lstrip("-").isdigit() else value
    try:
        if fault == "list":
            response = httpx.get(endpoint, timeout=10)
        elif fault == "clear":
            response = httpx.delete(endpoint, timeout=10)
        else:
            response = httpx.post(endpoint, json=body, timeout=10)
    except httpx.HTTPError as exc:
        fail("export inject", f"cannot reach {endpoint}: {exc}", exitcodes.UNAVAILABLE)
    if response.status_code == 404:
        fail("export inject", f"{url} serves no fault API (run it with --gpu emulated)", exitcodes.UNAVAILABLE)
    typer.echo(response.text)
    if response.status_code >= 400:
        raise typer.Exit(exitcodes.USAGE)
