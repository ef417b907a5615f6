"""The real stack a drill runs on: `kvscope serve` -> `kvscope export` -> Prometheus with the
(time-compressed) generated alert rules -> Alertmanager -> `kvscope diagnose --listen` -> a
stand-in for the on-call person's receiver (drill/alertmanager.py; left out, and said so, where
Alertmanager is not installed). Every process is stopped on the way out, whatever the way out
is (end, failure, Ctrl-C)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from diagnosis.webhook_config import WebhookConfig
from drill import alertmanager, prometheus_server
from drill.launcher import ServerProcess, free_port, kvscope_exporter, kvscope_server, running
from kvscope.durations import parse_duration, scaled
from kvscope.prometheus import PrometheusClient

EMULATED_GPUS = 2  # the fewest a drill's exporter emulates (a combined drill: one per fault)

# Called with the serve's base URL once it is ready, before the exporter and Prometheus start:
# load it puts on the engine (the drill's calibration probe) stays out of the rules' windows.
ServeReady = Callable[[str], None]
SERVE_READY_TIMEOUT = 600.0  # a first start may generate the demo model and compile kernels


@dataclass(frozen=True)
class Ports:
    serve: int | None = None
    export: int | None = None
    prometheus: int | None = None

    @classmethod
    def parse(cls, text: str) -> Ports:
        """ "auto" or "SERVE,EXPORT,PROMETHEUS" (0 or empty: pick a free one)."""
        if text.strip() in ("", "auto"):
            return cls()
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 3:
            raise ValueError(f"--ports takes SERVE,EXPORT,PROMETHEUS (e.g. 8000,9400,9090) or auto, not {text!r}")
        try:
            numbers = [int(p) if p else 0 for p in parts]
        except ValueError:
            raise ValueError(f"--ports: {text!r} is not three port numbers") from None
        if any(not 0 <= n <= 65535 for n in numbers):
            raise ValueError(f"--ports: {text!r} has a number outside 0-65535")
        taken = [n for n in numbers if n]
        if len(set(taken)) != len(taken):
            raise ValueError(f"--ports: {text!r} uses a port twice")
        return cls(*(n or None for n in numbers))


@dataclass
class Stack:
    serve: ServerProcess
    export: ServerProcess
    prometheus: ServerProcess
    api: PrometheusClient
    emulated: bool
    oncall: alertmanager.OnCall | None = None  # None: Alertmanager is not installed

    def inject(self, fault: dict[str, object]) -> None:
        response = httpx.post(self.export.base_url + "/-/faults", json=fault, timeout=10)
        if response.status_code != 201:
            raise RuntimeError(f"the exporter refused fault {fault}: HTTP {response.status_code} {response.text}")


@contextlib.contextmanager
def started(
    workdir: Path,
    *,
    profile: str,
    rules: Path,
    ports: Ports,
    engine_args: Sequence[str],
    model: str | None,
    emulated: bool,
    scrape_interval: str,
    gpus: int = EMULATED_GPUS,
    config: Path | None = None,
    speedup: float = 1.0,
    min_range: Callable[[], float] | None = None,
    on_serve_ready: ServeReady | None = None,
) -> Iterator[Stack]:
    """Start the processes (serve first: the exporter follows it; the on-call path before the
    Prometheus that alerts it) and stop them all on exit. `speedup`: the rules' compression,
    which the webhook's diagnosis windows follow; `min_range`: their shortest window in seconds,
    asked once the serve is ready (a drill's calibration sets it; None: five scrapes)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        serve = kvscope_server(
            workdir / "serve.log",
            port=ports.serve,
            profile=profile,
            model=model,
            config=config,
            extra_args=list(engine_args),
        )
        stack.enter_context(running(serve, ready_path="/ready", timeout=SERVE_READY_TIMEOUT))
        if on_serve_ready is not None:
            on_serve_ready(serve.base_url)
        export_port = ports.export or free_port()
        export_args = [
            "--vllm",
            serve.base_url + "/metrics",
            "--collect-interval",
            "1",
            *(["--config", str(config)] if config is not None else []),
        ]
        export_args += ["--gpu", "emulated", "--emulated-gpus", str(gpus)] if emulated else ["--gpu", "auto"]
        export = kvscope_exporter(workdir / "export.log", *export_args, port=export_port)
        stack.enter_context(running(export, ready_path="/-/healthy", timeout=60))
        prom_port = ports.prometheus or free_port()
        oncall = None
        if on_call_available():
            # the diagnosis `kvscope diagnose --listen` runs by default (30m window, 5m recent,
            # 2m after the start), on the rules' clock
            floor = min_range() if min_range is not None else 5 * parse_duration(scrape_interval)
            oncall = stack.enter_context(
                alertmanager.on_call(
                    workdir / "oncall",
                    f"http://127.0.0.1:{prom_port}",
                    window=scaled("30m", speedup, floor),
                    recent=scaled("5m", speedup, floor),
                    after_start=scaled(WebhookConfig().after_start, speedup),
                    config=config,
                )
            )
        prom = prometheus_server.start(
            workdir / "prometheus",
            {"kvscope": [f"127.0.0.1:{export_port}"]},
            interval=scrape_interval,
            rule_files=[rules],
            port=prom_port,
            alertmanagers=[oncall.alertmanager_target] if oncall else (),
        )
        stack.enter_context(running(prom, ready_path="/-/ready", timeout=60))
        api = PrometheusClient(prom.base_url)
        stack.callback(api.close)
        if not any(g.get("rules") for g in api.rule_groups()):
            raise RuntimeError(f"Prometheus loaded no rules from {rules}: see {prom.log_path}")
        api.wait_for_scrapes("kvscope")
        yield Stack(serve, export, prom, api, emulated, oncall)


def on_call_available() -> bool:
    """Alertmanager is installed (the drill's on-call path runs)."""
    try:
        alertmanager.binary()
    except alertmanager.AlertmanagerMissing:
        return False
    return True
