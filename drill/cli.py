"""drill's sub-app: `kvscope drill SCENARIO`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kvscope.cli_support import ConfigOption, fail, load_config

app = typer.Typer()


@app.command()
def drill(
    scenario: Annotated[
        str,
        typer.Argument(
            help="kv-avalanche | prefill-hol | prefix-miss | gpu-xid | thermal | pcie-degraded | memory-leak; "
            "hardware faults joined by + run at once, the n-th on GPU n (gpu-xid+thermal)"
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
    report: Annotated[
        Path | None,
        typer.Option(help="Report folder, new or one a drill wrote (default: reports/drill-SCENARIO-TIME)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model to serve (default: the generated demo model).")] = None,
    gpu: Annotated[
        str, typer.Option(help="auto (real GPUs when present and no fault is injected) | emulated | real.")
    ] = "auto",
    alert_speedup: Annotated[
        float, typer.Option(help="Divide every alert-rule duration by this, so alerts fire within a drill.")
    ] = 20.0,
    rate: Annotated[
        float | None,
        typer.Option(help="Requests per second before and after the change (default: calibrated to this engine)."),
    ] = None,
    kv_pool_tokens: Annotated[
        int | None,
        typer.Option(help="KV pool in tokens (default: the scenario's, enlarged by the calibration if needed)."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Reproduce an incident on the real stack; show alerts, diagnosis and the fix."""
    from drill import scenarios
    from drill.run import DrillOptions, default_report_dir, main_command, run
    from drill.stack import Ports
    from kvscope.durations import parse_duration

    settings = load_config("drill", config)
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
        if rate is not None and not 0 < rate <= 10_000:
            raise ValueError(f"--rate must be above 0 and at most 10000 requests/s, not {rate:g}")
        if kv_pool_tokens is not None and not 1024 <= kv_pool_tokens <= 100_000_000:
            raise ValueError(f"--kv-pool-tokens must be 1024 to 100000000, not {kv_pool_tokens}")
    except ValueError as exc:
        fail("drill", str(exc))
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
        config=settings,
        rate=rate,
        kv_pool_tokens=kv_pool_tokens,
    )
    raise typer.Exit(run(options))
