"""kvscope.yaml's `gateway.otlp` keys as the OTEL_EXPORTER_OTLP_* variables the OpenTelemetry
SDK reads: a variable already set wins (a Pod's env overrides the file, as for any OTel program)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from urllib.parse import quote

from serving.gateway_config import Otlp

VARIABLES = {
    "endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT",
    "traces_endpoint": "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "metrics_endpoint": "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "protocol": "OTEL_EXPORTER_OTLP_PROTOCOL",
    "headers": "OTEL_EXPORTER_OTLP_HEADERS",
    "metric_export_interval_ms": "OTEL_METRIC_EXPORT_INTERVAL",
}


def as_variables(otlp: Otlp) -> dict[str, str]:
    """The variables the keys stand for (keys not given: none)."""
    found: dict[str, str] = {}
    for key, name in VARIABLES.items():
        value = getattr(otlp, key)
        if value is None or value == {}:
            continue
        if key == "headers":
            value = ",".join(f"{k}={quote(v, safe='')}" for k, v in value.items())  # the spec's W3C baggage form
        found[name] = str(value)
    return found


def apply(otlp: Otlp, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each variable the file gives and the environment does not; what was set."""
    env = os.environ if environ is None else environ
    applied = {name: value for name, value in as_variables(otlp).items() if not env.get(name)}
    env.update(applied)
    return applied
