"""OpenTelemetry's GenAI server metrics from the gateway, over OTLP (kvscope/catalog.py: the names,
units and buckets of semantic-conventions v1.41.0's gen-ai-metrics, status Development).

Configured as every OpenTelemetry program is: off unless `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
or `OTEL_EXPORTER_OTLP_ENDPOINT` is set; `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL` /
`OTEL_EXPORTER_OTLP_PROTOCOL` choose http/protobuf (the default) or grpc, and
`OTEL_METRIC_EXPORT_INTERVAL` (ms) the export period, read by the SDK itself; headers and
timeouts likewise (`OTEL_EXPORTER_OTLP_HEADERS`). A request only adds to in-process histograms
(a lock and a bucket search); the SDK's reader exports them on its own thread, so nothing on
the request path waits for the collector.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from kvscope import catalog as c
from serving.tracing import SERVICE_NAME


def endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def protocol() -> str:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )


def _exporter() -> MetricExporter:
    if protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

    return HttpExporter()


@dataclass(frozen=True)
class Outcome:
    """What one request through the gateway came to, for its GenAI metrics."""

    operation: str  # gen_ai.operation.name: chat, text_completion, embeddings
    model: str
    port: int | None
    seconds: float  # arrival to the last byte
    error: str | None  # error.type (an HTTP status or the gateway's reason); None: it succeeded
    input_tokens: int | None  # what vLLM ran (its usage), None when it never ran
    output_tokens: int | None
    ttft: float | None  # the first token, seconds (successful responses only)
    per_token: float | None  # seconds per output token after the first


class GenAiMetrics:
    """The four instruments, recorded once per request as it ends."""

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter("kvscope.gateway")
        self.instruments: dict[str, Histogram] = {
            h.name: meter.create_histogram(h.name, unit=h.unit, description=h.help) for h in c.GENAI_METRICS
        }

    def record(self, outcome: Outcome) -> None:
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": outcome.operation,
            "gen_ai.provider.name": c.GENAI_PROVIDER,
            "gen_ai.request.model": outcome.model,
        }
        if outcome.port is not None:
            attributes["server.port"] = outcome.port
        failed = {**attributes, "error.type": outcome.error} if outcome.error else attributes
        self.instruments[c.GENAI_REQUEST_DURATION.name].record(outcome.seconds, failed)
        for kind, tokens in (("input", outcome.input_tokens), ("output", outcome.output_tokens)):
            if tokens is not None:
                self.instruments[c.GENAI_TOKEN_USAGE.name].record(tokens, {**attributes, "gen_ai.token.type": kind})
        if outcome.error:
            return  # the latency of a first token and per token: successful responses only
        if outcome.ttft is not None:
            self.instruments[c.GENAI_TIME_TO_FIRST_TOKEN.name].record(outcome.ttft, attributes)
        if outcome.per_token is not None:
            self.instruments[c.GENAI_TIME_PER_OUTPUT_TOKEN.name].record(outcome.per_token, attributes)


def make(reader: MetricReader | None = None) -> tuple[GenAiMetrics | None, MeterProvider | None]:
    """The GenAI metrics over OTLP when an endpoint is configured (or `reader` given), else none."""
    if reader is None:
        if endpoint() is None:
            return None, None
        reader = PeriodicExportingMetricReader(_exporter())
    views = [
        View(instrument_name=h.name, aggregation=ExplicitBucketHistogramAggregation(list(h.buckets)))
        for h in c.GENAI_METRICS
    ]
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": SERVICE_NAME}), views=views
    )
    return GenAiMetrics(provider), provider
