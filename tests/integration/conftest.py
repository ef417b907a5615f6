"""Integration fixtures: a real `kvscope serve` (vLLM on the demo model) and an OTLP receiver."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from drill.launcher import ServerProcess, free_port, kvscope_server, running

GATEWAY_CONFIG = {
    "tiers": {
        "gold": {"max_tokens": 256, "tokens_per_minute": 10_000_000},
        "open": {"tokens_per_minute": 10_000_000},
        "tight": {"max_request_tokens": 600, "max_tokens": 64, "tokens_per_minute": 1500},
        # long enough for a 3000-token prefill on a loaded machine, far short of 12000 tokens' decode
        "slow": {"deadline_seconds": 4.0},
        # the hostile corpus (test_gateway_security.py): short answers, tight field bounds
        "hostile": {"max_tokens": 24, "tokens_per_minute": 10_000_000, "max_n": 2, "max_logprobs": 3},
    },
    "tenants": {
        "acme": {"tier": "gold", "api_keys": ["sk-acme"]},
        "wide": {"tier": "open", "api_keys": ["sk-wide"]},
        "tiny": {"tier": "tight", "api_keys": ["sk-tiny"]},
        "late": {"tier": "slow", "api_key_sha256": [hashlib.sha256(b"sk-late").hexdigest()]},
        "mallory": {"tier": "hostile", "api_keys": ["sk-mallory"]},
    },
    "max_body_bytes": 1 << 20,
    "prefix_hit_window_seconds": 30,
}
# 520 blocks x 32 tokens: max_model_len (16384) fits with the block vLLM keeps spare, and one
# long generation shows up clearly in the KV usage gauge.
KV_BLOCKS = 520


@dataclass
class OtlpReceiver:
    """An OTLP/HTTP endpoint that keeps every span and every histogram point it is sent, decoded
    from the protobuf (opentelemetry-proto), as a collector would read them."""

    url: str
    spans: list[dict] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)  # one per histogram data point, per export
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.spans)

    def histograms(self) -> list[dict]:
        with self.lock:
            return list(self.points)


def _attribute_value(value) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_attribute_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="session")
def otlp_receiver() -> Iterator[OtlpReceiver]:
    port = free_port()
    receiver = OtlpReceiver(url=f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            payload = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path.endswith("/v1/metrics"):
                self._metrics(payload)
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(payload)
            for resource_spans in request.resource_spans:
                service = next(
                    (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"),
                    "",
                )
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        with receiver.lock:
                            receiver.spans.append(
                                {
                                    "service": service,
                                    "name": span.name,
                                    "trace_id": span.trace_id.hex(),
                                    "span_id": span.span_id.hex(),
                                    "parent_span_id": span.parent_span_id.hex(),
                                    "attributes": {a.key: _attribute_value(a.value) for a in span.attributes},
                                }
                            )
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.end_headers()

        def _metrics(self, payload: bytes) -> None:
            request = ExportMetricsServiceRequest()
            request.ParseFromString(payload)
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        if metric.WhichOneof("data") != "histogram":
                            continue
                        for point in metric.histogram.data_points:
                            with receiver.lock:
                                receiver.points.append(
                                    {
                                        "name": metric.name,
                                        "unit": metric.unit,
                                        "bounds": tuple(point.explicit_bounds),
                                        "count": point.count,
                                        "sum": point.sum,
                                        "attributes": {a.key: _attribute_value(a.value) for a in point.attributes},
                                        "at": point.time_unix_nano,
                                    }
                                )
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    server.shutdown()


@pytest.fixture(scope="session")
def gateway_config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kvscope.yaml with the test gateway as its `gateway:` section."""
    path = tmp_path_factory.mktemp("gateway") / "kvscope.yaml"
    path.write_text(yaml.safe_dump({"gateway": GATEWAY_CONFIG}))
    return path


@pytest.fixture(scope="session")
def kvscope(
    demo_model_path: Path,
    gateway_config_file: Path,
    otlp_receiver: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """`kvscope serve --profile tuned` with the test gateway config, traced to the receiver."""
    server = kvscope_server(
        tmp_path_factory.mktemp("kvscope") / "serve.log",
        profile="tuned",
        config=gateway_config_file,
        extra_args=["--enforce-eager", "--num-gpu-blocks-override", str(KV_BLOCKS)],
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.url,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
        },
    )
    with running(server, ready_path="/ready", timeout=240) as ready:
        yield ready
