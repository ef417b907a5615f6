"""OpenTelemetry's GenAI server metrics from the gateway: the conventions' exact names, units,
bucket bounds and attributes (semantic-conventions v1.41.0, gen-ai-metrics), token counts as
vLLM ran them. The OTLP wire itself is tested against a real receiver
(tests/integration/test_per_request_metrics.py)."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from kvscope import catalog as c
from serving import genai_metrics
from serving.request_tags import FinishedPart
from tests.unit.test_gateway import COMPLETION, _gateway, _request


def _points(reader: InMemoryMetricReader) -> dict[str, list]:
    data = reader.get_metrics_data()
    out: dict[str, list] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = [(metric.unit, p) for p in metric.data.data_points]
    return out


def _served() -> tuple[InMemoryMetricReader, str]:
    reader = InMemoryMetricReader()
    genai, _ = genai_metrics.make(reader)
    gateway, _ = _gateway(genai=genai)
    response = _request(gateway, "POST", "/v1/completions", COMPLETION)
    assert response.status_code == 200
    (request_id,) = gateway.tags._tags
    tag = gateway.tags.claim(f"cmpl-{request_id}-0")
    assert tag is not None and tag.on_finished is not None
    part = FinishedPart("length", 7, 5, 5, 0.01, 0.05, 0.2, 0.06)  # as vLLM reports it: 7 in, 5 out
    tag.finished.append(part)
    tag.on_finished(part)
    return reader, request_id


def test_each_request_records_the_four_instruments_with_the_conventions_names_and_buckets():
    reader, _ = _served()
    points = _points(reader)
    assert set(points) == {h.name for h in c.GENAI_METRICS}
    for h in c.GENAI_METRICS:
        (unit, point), *_ = points[h.name]
        assert unit == h.unit and tuple(point.explicit_bounds) == h.buckets, h.name
        assert point.attributes["gen_ai.operation.name"] == "text_completion"
        assert point.attributes["gen_ai.provider.name"] == "vllm"
        assert point.attributes["gen_ai.request.model"] == "m"
        assert "error.type" not in point.attributes


def test_token_usage_is_what_vllm_ran_by_type():
    reader, _ = _served()
    usage = {p.attributes["gen_ai.token.type"]: p.sum for _, p in _points(reader)[c.GENAI_TOKEN_USAGE.name]}
    assert usage == {"input": 7, "output": 5}
    (_, tpot), *_ = _points(reader)[c.GENAI_TIME_PER_OUTPUT_TOKEN.name]
    assert abs(tpot.sum - 0.2 / 4) < 1e-9  # decode time over the tokens after the first
    (_, ttft), *_ = _points(reader)[c.GENAI_TIME_TO_FIRST_TOKEN.name]
    assert abs(ttft.sum - 0.06) < 1e-9


def test_a_failed_request_is_a_duration_with_its_error_type_and_no_token_latency():
    reader = InMemoryMetricReader()
    genai, _ = genai_metrics.make(reader)
    genai.record(genai_metrics.Outcome("chat", "m", 8000, 0.5, "429", None, None, 0.1, 0.01))
    points = _points(reader)
    assert set(points) == {c.GENAI_REQUEST_DURATION.name}
    (_, duration), *_ = points[c.GENAI_REQUEST_DURATION.name]
    assert duration.attributes["error.type"] == "429" and duration.attributes["server.port"] == 8000


def test_without_an_endpoint_nothing_is_exported(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert genai_metrics.make() == (None, None)
