"""`kvscope serve` with the real vLLM engine on the demo model: API, limits, metrics, traces."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import time

import httpx
import pytest
from openai import OpenAI

from kvscope import catalog, promtext
from serving.demo_model import SERVED_NAME, synthetic_text
from serving.hardware import detect
from serving.profiles import element_bytes
from tests.integration.conftest import KV_BLOCKS
from tests.waiting import eventually

pytestmark = pytest.mark.integration

ACME, WIDE, TINY, LATE = "sk-acme", "sk-wide", "sk-tiny", "sk-late"


def _client(server, key: str = ACME) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key=key, timeout=60, max_retries=0)


def _metrics(server) -> list[promtext.Sample]:
    return promtext.parse(httpx.get(server.base_url + "/metrics", timeout=10).text)


def _post(server, body, key: str | None = ACME, path: str = "/v1/completions", raw: bytes | None = None):
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(server.base_url + path, content=content, headers=headers, timeout=60)


def _valid(server) -> None:
    response = _post(server, {"model": SERVED_NAME, "prompt": "zaba kelo", "max_tokens": 4})
    assert response.status_code == 200, response.text


def test_openai_client_completion_chat_and_stream(kvscope):
    client = _client(kvscope)
    completion = client.completions.create(model=SERVED_NAME, prompt="zaba kelo", max_tokens=8)
    assert completion.usage.completion_tokens == 8
    chat = client.chat.completions.create(
        model=SERVED_NAME, messages=[{"role": "user", "content": "kelo"}], max_tokens=8
    )
    assert chat.choices[0].message.content and chat.usage.completion_tokens == 8
    stream = client.chat.completions.create(
        model=SERVED_NAME, messages=[{"role": "user", "content": "mu"}], max_tokens=8, stream=True
    )
    assert sum(1 for c in stream if c.choices and c.choices[0].delta.content) >= 2


def test_priority_field_is_accepted_through_the_openai_client(kvscope):
    completion = _client(kvscope).completions.create(
        model=SERVED_NAME, prompt="zaba", max_tokens=4, extra_body={"priority": 2}
    )
    assert completion.usage.completion_tokens == 4


def test_max_tokens_is_clamped_to_the_tier(kvscope):
    response = _post(kvscope, {"model": SERVED_NAME, "prompt": "zaba", "max_tokens": 5000, "ignore_eos": True})
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 256  # tier gold: max_tokens 256
    assert response.headers["x-kvscope-max-tokens-clamped"] == "5000->256"


BAD_INPUTS = [
    ("malformed JSON", None, b'{"model": "kvscope-demo", "prompt": ', ACME, 400),
    ("empty body", None, b"", ACME, 400),
    ("body is an array", [1, 2], None, ACME, 400),
    ("prompt is a number", {"prompt": 5}, None, ACME, 400),
    ("prompt mixes types", {"prompt": ["a", 3]}, None, ACME, 400),
    ("prompt missing", {"max_tokens": 3}, None, ACME, 400),
    ("max_tokens is a string", {"prompt": "x", "max_tokens": "ten"}, None, ACME, 400),
    ("max_tokens is negative", {"prompt": "x", "max_tokens": -5}, None, ACME, 400),
    ("max_tokens is zero", {"prompt": "x", "max_tokens": 0}, None, ACME, 400),
    ("max_tokens is huge (no clamp)", {"prompt": "x", "max_tokens": 10**9}, None, WIDE, 400),
    ("n is zero", {"prompt": "x", "n": 0}, None, ACME, 400),
    ("stream is a string", {"prompt": "x", "stream": "yes"}, None, ACME, 400),
    ("priority is a string", {"prompt": "x", "priority": "high"}, None, ACME, 400),
    ("temperature is negative", {"prompt": "x", "temperature": -1}, None, ACME, 400),
    ("prompt over max_model_len", {"prompt": [7] * 17000}, None, ACME, 400),
    ("unknown model", {"model": "gpt-17", "prompt": "x"}, None, ACME, 404),
    ("missing API key", {"prompt": "x"}, None, None, 401),
    ("wrong API key", {"prompt": "x"}, None, "sk-nope", 401),
    ("request over the tier cap", {"prompt": [7] * 700}, None, TINY, 413),
    ("body over max_body_bytes", None, b'{"prompt": "' + b"a" * (2 << 20) + b'"}', ACME, 413),
]


@pytest.mark.parametrize(("case", "body", "raw", "key", "status"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_gets_a_json_4xx_and_the_server_keeps_serving(kvscope, case, body, raw, key, status):
    if isinstance(body, dict):
        body = {"model": SERVED_NAME, **body}
    response = _post(kvscope, body, key=key, raw=raw)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"]
    _valid(kvscope)


def test_chat_bad_messages_get_400(kvscope):
    for messages in ("hi", [], [{"content": "no role"}], [{"role": "user", "content": 5}]):
        response = _post(kvscope, {"model": SERVED_NAME, "messages": messages}, path="/v1/chat/completions")
        assert response.status_code == 400, (messages, response.text)
        assert response.json()["error"]["param"] == "messages"
    _valid(kvscope)


def test_over_limit_messages_say_which_limit_and_by_how_much(kvscope):
    over_cap = _post(kvscope, {"model": SERVED_NAME, "prompt": [7] * 700}, key=TINY).json()["error"]
    assert "tier 'tight' allows 600 per request" in over_cap["message"] and "over by" in over_cap["message"]
    too_long = _post(kvscope, {"model": SERVED_NAME, "prompt": [7] * 17000}).json()["error"]
    assert too_long["code"] == "context_length_exceeded" and "max_model_len is 16384" in too_long["message"]


def test_over_quota_burst_gets_429_with_retry_after(kvscope):
    prompt = [7] * 430  # + max_tokens 64 = 494 tokens each; the tier allows 1500 per minute

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *[
                    client.post(
                        kvscope.base_url + "/v1/completions",
                        json={"model": SERVED_NAME, "prompt": prompt, "max_tokens": 64},
                        headers={"authorization": f"Bearer {TINY}"},
                    )
                    for _ in range(6)
                ]
            )

    responses = asyncio.run(burst())
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(200) == 3 and statuses.count(429) == 3, statuses
    refused = next(r for r in responses if r.status_code == 429)
    assert int(refused.headers["retry-after"]) >= 1
    message = refused.json()["error"]["message"]
    assert "tenant 'tiny' is over its token budget" in message and "494 tokens" in message
    _valid(kvscope)


def _kv_usage(server) -> float:
    return promtext.total(_metrics(server), catalog.VLLM_KV_CACHE_USAGE.name)


def test_deadline_aborts_the_request_in_the_engine_and_frees_its_kv_blocks(kvscope):
    before = _metrics(kvscope)
    deadline_before = promtext.total(before, catalog.GATEWAY_REJECTIONS.name, reason="deadline")
    peak = 0.0

    async def watch_kv(stop: asyncio.Event) -> None:
        nonlocal peak
        async with httpx.AsyncClient(timeout=10) as client:
            while not stop.is_set():
                page = promtext.parse((await client.get(kvscope.base_url + "/metrics")).text)
                peak = max(peak, promtext.total(page, catalog.VLLM_KV_CACHE_USAGE.name))
                await asyncio.sleep(0.1)

    async def long_request() -> httpx.Response:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_kv(stop))
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.post(
                kvscope.base_url + "/v1/completions",
                json={
                    "model": SERVED_NAME,
                    "prompt": [7] * 3000,
                    "max_tokens": 12000,
                    "ignore_eos": True,
                },
                headers={"authorization": f"Bearer {LATE}"},
            )
        stop.set()
        await watcher
        return response

    started = time.monotonic()
    response = asyncio.run(long_request())
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "deadline_exceeded"
    # aborted at its 4 s deadline: 12,000 tokens would take minutes (no tighter bound: a busy machine)
    assert time.monotonic() - started < 40
    assert peak > 0.15, f"the request never filled the KV cache (peak {peak})"
    deadline = time.monotonic() + 15
    while _kv_usage(kvscope) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _metrics(kvscope)
    assert promtext.total(after, catalog.VLLM_KV_CACHE_USAGE.name) == 0
    assert promtext.total(after, catalog.VLLM_REQUESTS_RUNNING.name) == 0
    # vLLM keeps no count of requests aborted from outside; the gateway does.
    assert promtext.total(after, catalog.GATEWAY_REJECTIONS.name, reason="deadline") == deadline_before + 1
    _valid(kvscope)


def test_streamed_request_past_its_deadline_ends_with_an_error_event(kvscope):
    with httpx.stream(
        "POST",
        kvscope.base_url + "/v1/completions",
        json={
            "model": SERVED_NAME,
            "prompt": "zaba",
            "max_tokens": 12000,
            "ignore_eos": True,
            "stream": True,
        },
        headers={"authorization": f"Bearer {LATE}"},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    error_events = [json.loads(e[6:]) for e in events if e.startswith('data: {"error"')]
    assert error_events and error_events[0]["error"]["code"] == "deadline_exceeded"
    assert events[-1] == "data: [DONE]"


def _delta(before, after, name: str, **labels: str) -> float:
    return promtext.total(after, name, **labels) - promtext.total(before, name, **labels)


def test_kvscope_metrics_agree_with_vllms_own_counters(kvscope):
    before = _metrics(kvscope)
    rng = random.Random(11)
    system = synthetic_text(rng, 300)  # a shared prefix: the prefix cache should hit
    client = _client(kvscope)

    async def load() -> None:
        async def one(i: int) -> None:
            await asyncio.to_thread(
                client.completions.create,
                model=SERVED_NAME,
                prompt=system + " " + synthetic_text(random.Random(i), 30),
                max_tokens=12,
                extra_body={"ignore_eos": True},  # random weights sample EOS now and then
            )

        await asyncio.gather(*(one(i) for i in range(16)))

    asyncio.run(load())
    n = 16

    def settled() -> list:  # the stat logger records a request after its last token is sent
        page = _metrics(kvscope)
        done = _delta(before, page, catalog.REQUEST_QUEUE_SECONDS.name + "_count") == n
        return page if done and _delta(before, page, catalog.VLLM_TTFT.name + "_count") == n else []

    after = eventually(settled, timeout=60, what="every request counted")
    assert _delta(before, after, catalog.REQUEST_TTFT_SECONDS.name + "_count", tenant="acme") == n
    assert _delta(before, after, catalog.VLLM_TTFT.name + "_count") == n
    for ours, theirs in ((catalog.REQUEST_QUEUE_SECONDS, catalog.VLLM_QUEUE_TIME),):
        assert _delta(before, after, ours.name + "_count") == _delta(before, after, theirs.name + "_count") == n
        assert _delta(before, after, ours.name + "_sum") == pytest.approx(
            _delta(before, after, theirs.name + "_sum"), rel=1e-6, abs=1e-6
        )
    prompt = _delta(before, after, catalog.GATEWAY_TOKENS.name, tenant="acme", kind="prompt")
    assert prompt > 0 and prompt == _delta(before, after, catalog.VLLM_PROMPT_TOKENS.name)
    completion = _delta(before, after, catalog.GATEWAY_TOKENS.name, tenant="acme", kind="completion")
    assert completion == 12 * n == _delta(before, after, catalog.VLLM_GENERATION_TOKENS.name)
    assert _delta(before, after, catalog.GATEWAY_REQUESTS.name, tenant="acme", tier="gold") == n
    assert _delta(before, after, catalog.VLLM_PREFIX_CACHE_HITS.name) > 0
    # The gauge is windowed over the session's whole traffic, and how many of the 16 share a
    # first step (all missing) depends on the machine's speed: a bound above 0 would be timing.
    hit_ratio = promtext.total(after, catalog.CACHE_PREFIX_HIT_RATIO.name)
    assert 0.0 < hit_ratio <= 1.0
    assert promtext.total(after, catalog.CACHE_CAPACITY_TOKENS.name) == KV_BLOCKS * 32
    # 2 (K and V) x 4 layers x 2 KV heads x 32 x the element: 2 B, or 4 where the CPU runs float32
    element = element_bytes(detect())
    assert promtext.total(after, catalog.CACHE_BYTES_PER_TOKEN.name) == 2 * 4 * 2 * 32 * element


def test_long_prompts_get_a_kv_lane_of_half_the_pool(kvscope):
    page = _metrics(kvscope)
    lane = {s.labels["kind"]: s.value for s in promtext.select(page, catalog.GATEWAY_LANE_TOKENS.name)}
    assert lane == {"capacity": KV_BLOCKS * 32 // 2, "used": 0}
    assert promtext.total(page, catalog.GATEWAY_LANE_WAITING.name, priority_class="bulk") == 0
    started = kvscope.log_path.read_text(errors="replace")
    assert f"KV lane 'bulk': its requests together hold at most {KV_BLOCKS * 32 // 2} of the" in started
    assert "QoS priority by prompt length: interactive (<= 512 tokens, +0 s)" in started


@pytest.mark.cpu_only
def test_engine_config_info_exposes_the_tuned_profile(kvscope):
    page = _metrics(kvscope)
    info = {
        s.labels["setting"]: s.labels["value"]
        for s in promtext.select(page, catalog.ENGINE_CONFIG_INFO.name, profile="tuned")
    }
    assert info["block_size"] == "32"
    assert info["scheduling_policy"] == "priority"
    assert info["max_num_batched_tokens"] == "1024"
    assert info["long_prefill_token_threshold"] == "128"
    assert info["max_model_len"] == "16384"


def test_health_and_ready(kvscope):
    auth = {"authorization": f"Bearer {ACME}"}
    assert httpx.get(kvscope.base_url + "/health", headers=auth, timeout=10).status_code == 200
    assert httpx.get(kvscope.base_url + "/health", timeout=10).status_code == 401  # keys are configured
    ready = httpx.get(kvscope.base_url + "/ready", timeout=10)
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def test_one_span_per_request_with_traceparent_propagated_to_the_engine(kvscope, otlp_receiver):
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    response = httpx.post(
        kvscope.base_url + "/v1/completions",
        json={"model": SERVED_NAME, "prompt": "zaba kelo", "max_tokens": 6},
        headers={"authorization": f"Bearer {ACME}", "traceparent": f"00-{trace_id}-{parent_id}-01"},
        timeout=60,
    )
    assert response.status_code == 200
    deadline = time.monotonic() + 20
    spans: list[dict] = []
    while time.monotonic() < deadline:
        spans = [s for s in otlp_receiver.snapshot() if s["trace_id"] == trace_id]
        if any(s["service"] == "kvscope-gateway" for s in spans) and len(spans) >= 2:
            break
        time.sleep(0.2)
    gateway = next(s for s in spans if s["service"] == "kvscope-gateway")
    assert gateway["parent_span_id"] == parent_id
    attrs = gateway["attributes"]
    assert attrs["kvscope.tenant"] == "acme" and attrs["kvscope.qos_class"] == "interactive"
    assert attrs["gen_ai.usage.completion_tokens"] == 6
    assert attrs["gen_ai.response.finish_reasons"] == ["length"]
    assert attrs["gen_ai.latency.time_in_model_prefill"] >= 0
    assert attrs["gen_ai.latency.time_in_queue"] >= 0
    engine = [s for s in spans if s["service"] != "kvscope-gateway"]
    assert engine and engine[0]["parent_span_id"] == gateway["span_id"], spans
