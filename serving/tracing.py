"""OpenTelemetry for the gateway: one span per request, W3C traceparent passed to the engine.

Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or the traces-specific
variable) is set, with the protocol from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL /
OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf by default, or grpc). Otherwise the tracer is a
no-op and costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SERVICE_NAME = "kvscope-gateway"
_PROPAGATOR = TraceContextTextMapPropagator()


def otlp_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def protocol() -> str:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )


def engine_traces_endpoint() -> str | None:
    """The endpoint to hand vLLM (`otlp_traces_endpoint`): it wants the full traces URL."""
    if traces := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    if base := os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return base.rstrip("/") + "/v1/traces" if protocol() == "http/protobuf" else base
    return None


def _exporter() -> SpanExporter:
    if protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def make_tracer(exporter: SpanExporter | None = None) -> tuple[trace.Tracer, TracerProvider | None]:
    """The gateway's tracer: OTLP when configured (or `exporter` given), else a no-op."""
    if exporter is None and otlp_endpoint() is None:
        return trace.NoOpTracer(), None
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(exporter or _exporter()))
    return provider.get_tracer("kvscope.gateway"), provider


def extract(headers: Mapping[str, str]) -> Context:
    """The parent context from an incoming `traceparent`, if any."""
    return _PROPAGATOR.extract(carrier=dict(headers))


def inject(span: trace.Span) -> dict[str, str]:
    """`traceparent` (and `tracestate`) headers that make `span` the engine's parent."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier
