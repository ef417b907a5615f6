"""kvscope.yaml's gateway.otlp keys: the OTEL_* variables they stand for, the environment's
own values winning, bad values refused at load in one line."""

from __future__ import annotations

import pytest

from serving import genai_metrics, telemetry_env, tracing
from serving.gateway_config import ConfigError, load_gateway_config


def _load(tmp_path, text: str):
    path = tmp_path / "kvscope.yaml"
    path.write_text(text)
    return load_gateway_config(path)


def test_the_file_sets_the_variables_the_sdk_reads(tmp_path, monkeypatch):
    for name in telemetry_env.VARIABLES.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", raising=False)
    config = _load(
        tmp_path,
        "gateway:\n  otlp:\n    endpoint: http://collector:4318\n    protocol: grpc\n"
        "    headers: {x-tenant: a b, authorization: Bearer t=1}\n    metric_export_interval_ms: 2000\n",
    )
    applied = telemetry_env.apply(config.otlp)
    assert applied == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=a%20b,authorization=Bearer%20t%3D1",
        "OTEL_METRIC_EXPORT_INTERVAL": "2000",
    }
    assert tracing.otlp_endpoint() == "http://collector:4318"  # what the gateway's exporters then use
    assert genai_metrics.endpoint() == "http://collector:4318"


def test_a_variable_already_set_wins_over_the_file(tmp_path):
    config = _load(tmp_path, "gateway:\n  otlp: {endpoint: 'http://file:4318', metric_export_interval_ms: 500}\n")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"}
    assert telemetry_env.apply(config.otlp, env) == {"OTEL_METRIC_EXPORT_INTERVAL": "500"}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://env:4318"


def test_no_otlp_keys_set_nothing(tmp_path):
    env: dict[str, str] = {}
    assert telemetry_env.apply(_load(tmp_path, "gateway: {}\n").otlp, env) == {}
    assert env == {}


@pytest.mark.parametrize(
    ("otlp", "why"),
    [
        ("{endpoint: 'collector:4318'}", "http:// or https://"),
        ("{protocol: http/json}", "protocol"),
        ("{headers: {'bad name': x}}", "plain token"),
        ("{headers: {x-a: 'one,two'}}", "comma"),
        ("{metric_export_interval_ms: 10}", "metric_export_interval_ms"),
        ("{endpont: 'http://x:4318'}", "endpont"),
    ],
)
def test_bad_keys_are_refused_in_one_line(tmp_path, otlp, why):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f"gateway:\n  otlp: {otlp}\n")
    assert why in str(caught.value) and "\n" not in str(caught.value)
