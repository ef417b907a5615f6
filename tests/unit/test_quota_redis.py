"""Shared quotas (`quota_backend: redis://...`) against a real redis-server: one budget for every
replica, atomic under concurrency, refilled on Redis' clock, and a configured, counted, logged
behaviour when Redis is down or hung."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from kvscope import catalog
from serving.admission import AdmissionPolicy
from serving.errors import Rejection
from serving.gateway import Gateway
from serving.gateway_config import ConfigError, GatewayConfig
from serving.metrics import ServingMetrics
from serving.prompts import TokenizerCounter
from serving.quota import TenantQuotas
from serving.quota_redis import KEY_TTL_SECONDS, SharedQuotas
from serving.request_tags import RequestTags
from tests.redis_server import RedisServer, redis_server, silent_server
from tests.waiting import eventually

redis = pytest.importorskip("redis")
KEY = "sk-acme"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as started:
        yield started


def _config(url: str, **extra: Any) -> GatewayConfig:
    tier = {"tokens_per_minute": extra.pop("tokens_per_minute", 6000), **extra.pop("tier", {})}
    return GatewayConfig.model_validate(
        {
            "tiers": {"gold": tier},
            "tenants": {"acme": {"tier": "gold", "api_keys": [KEY]}},
            "quota_backend": url,
            # generous: a loaded 2-core machine; the hung-Redis test sets the production 50 ms
            "quota_timeout_ms": 2000,
            **extra,
        }
    )


class Errors:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


def _take(quotas: SharedQuotas, tokens: int, per_minute: int = 6000, op: str = "take") -> Any:
    return asyncio.run(quotas.call("acme", "tokens", per_minute, tokens, op))  # type: ignore[arg-type]


def test_a_full_shared_bucket_gives_its_minute_and_no_more(server):
    quotas = SharedQuotas(_config(server.url))
    assert _take(quotas, 5000).taken
    refused = _take(quotas, 1500)
    assert not refused.taken and 1000 <= refused.level < 1500  # refilled 100 per second meanwhile
    assert refused.headers("tokens")["x-ratelimit-limit-tokens"] == "6000"


def test_concurrent_takes_from_two_replicas_never_exceed_one_budget(server):
    replicas = [SharedQuotas(_config(server.url, quota_timeout_ms=5000)) for _ in range(2)]

    async def burst() -> tuple[int, float]:
        started = time.monotonic()
        answers = await asyncio.gather(*(replicas[i % 2].call("acme", "tokens", 6000, 70, "take") for i in range(300)))
        assert all(a is not None for a in answers)
        return sum(a.taken for a in answers if a is not None), time.monotonic() - started

    taken, elapsed = asyncio.run(burst())
    refilled = (elapsed + 0.1) * 6000 / 60
    assert 6000 // 70 <= taken <= (6000 + refilled) // 70, (taken, elapsed)


def test_the_bucket_refills_on_redis_clock_up_to_its_cap(server):
    quotas = SharedQuotas(_config(server.url))
    assert _take(quotas, 6000).taken
    eventually(lambda: _take(quotas, 0, op="peek").level >= 50, 10, 0.1, "refilled by half a second's worth")
    assert _take(quotas, 10**6, op="refund").level == 6000


def test_a_refund_returns_tokens_up_to_the_cap(server):
    quotas = SharedQuotas(_config(server.url, tokens_per_minute=60))  # one token a second
    assert _take(quotas, 50, per_minute=60).taken
    back = _take(quotas, 30, per_minute=60, op="refund")
    assert 40 <= back.level < 43


def test_charge_takes_only_what_is_left(server):
    quotas = SharedQuotas(_config(server.url))
    _take(quotas, 5990)
    charged = _take(quotas, 500, op="charge")
    assert charged.taken and 0 <= charged.level < 5


def test_keys_are_namespaced_by_tenant_and_kind_and_expire_when_idle(server):
    quotas = SharedQuotas(_config(server.url, quota_key_prefix="team-a:quota"))
    _take(quotas, 1)
    client = redis.Redis(port=server.port)
    assert client.keys("*") == [b"team-a:quota:acme:tokens"]
    assert 0 < client.ttl("team-a:quota:acme:tokens") <= KEY_TTL_SECONDS


def test_a_flushed_script_cache_is_reloaded(server):
    quotas = SharedQuotas(_config(server.url))
    _take(quotas, 1)
    redis.Redis(port=server.port).script_flush()
    assert _take(quotas, 1).taken  # NOSCRIPT: EVAL runs it and caches it again


def test_reserve_refuses_a_burst_with_openai_headers(server):
    quotas = SharedQuotas(_config(server.url, tokens_per_minute=600, tier={"requests_per_minute": 100}))
    asyncio.run(quotas.reserve("acme", "gold", 500))
    with pytest.raises(Rejection) as refused:
        asyncio.run(quotas.reserve("acme", "gold", 500))
    assert refused.value.status == 429 and refused.value.reason == "quota_exhausted"
    headers = refused.value.headers or {}
    assert headers["x-ratelimit-limit-tokens"] == "600"
    assert int(headers["x-ratelimit-remaining-tokens"]) < 110
    assert int(headers["retry-after"]) >= 39
    # the refused request's request-token was given back
    left = redis.Redis(port=server.port).hget("kvscope:quota:acme:requests", "level")
    assert float(left or 0) > 98


def test_redis_down_fails_open_by_default_counted_and_logged_once(server, caplog):
    errors = Errors()
    quotas = SharedQuotas(_config(server.url), on_error=errors)
    assert asyncio.run(quotas.reserve("acme", "gold", 10)).held
    server.stop()
    with caplog.at_level(logging.WARNING, "kvscope.serve"):
        for _ in range(3):
            assert not asyncio.run(quotas.reserve("acme", "gold", 10)).held  # admitted, unmetered
    assert errors.reasons == ["connection"] * 3
    outage = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(outage) == 1 and "quota_fail: open" in outage[0].getMessage()


def test_redis_down_fails_closed_with_a_503(server):
    errors = Errors()
    quotas = SharedQuotas(_config(server.url, quota_fail="closed"), on_error=errors)
    server.stop()
    with pytest.raises(Rejection) as refused:
        asyncio.run(quotas.reserve("acme", "gold", 10))
    assert refused.value.status == 503 and refused.value.reason == "quota_backend_unavailable"
    assert refused.value.headers == {"retry-after": "1"}
    assert json.loads(refused.value.body())["error"]["type"] == "service_unavailable_error"
    assert errors.reasons == ["connection"]


def test_a_hung_redis_costs_at_most_the_timeout():
    with silent_server() as port:
        errors = Errors()
        quotas = SharedQuotas(_config(f"redis://127.0.0.1:{port}/0", quota_timeout_ms=50), on_error=errors)
        started = time.monotonic()
        assert not asyncio.run(quotas.reserve("acme", "gold", 10)).held
        assert time.monotonic() - started < 1.0  # 50 ms, plus a loaded machine's scheduling
        assert errors.reasons == ["timeout"]
        closed = SharedQuotas(_config(f"redis://127.0.0.1:{port}/0", quota_fail="closed"))
        with pytest.raises(Rejection):
            asyncio.run(closed.reserve("acme", "gold", 10))


def test_quotas_recover_by_themselves_when_redis_is_back(server, caplog):
    quotas = SharedQuotas(_config(server.url, quota_fail="closed"))
    assert asyncio.run(quotas.reserve("acme", "gold", 10)).held
    server.stop()
    with pytest.raises(Rejection):
        asyncio.run(quotas.reserve("acme", "gold", 10))
    server.start()  # same port, empty: the bucket starts full
    with caplog.at_level(logging.WARNING, "kvscope.serve"):
        eventually(lambda: asyncio.run(quotas.reserve("acme", "gold", 10)).held, 10, 0.1, "quotas back")
    assert not quotas.down
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_the_password_comes_from_a_file_and_a_wrong_one_is_counted_as_auth(tmp_path):
    with redis_server(tmp_path, password="s3cret") as secured:
        secret = tmp_path / "redis-password"
        secret.write_text("s3cret\n")
        good = SharedQuotas(_config(secured.url, quota_password_file=str(secret)))
        assert asyncio.run(good.reserve("acme", "gold", 10)).held
        errors = Errors()
        secret.write_text("wrong")
        bad = SharedQuotas(_config(secured.url, quota_password_file=str(secret)), on_error=errors)
        assert not asyncio.run(bad.reserve("acme", "gold", 10)).held
        assert errors.reasons == ["auth"]


@pytest.mark.parametrize(
    "url",
    ["redis://:pw@127.0.0.1:6379/0", "redis://user:pw@host/0", "http://127.0.0.1:6379", "redis:///0"],
)
def test_a_password_in_the_url_or_a_foreign_scheme_is_refused(url):
    with pytest.raises(ValueError, match="quota_backend"):
        _config(url)


def test_a_missing_password_file_is_refused_at_load(tmp_path):
    with pytest.raises(ValueError, match="quota_password_file"):
        _config("redis://127.0.0.1:6379/0", quota_password_file=str(tmp_path / "absent"))


def test_config_errors_name_the_quota_fields(tmp_path):
    path = tmp_path / "kvscope.yaml"
    path.write_text("gateway:\n  quota_backend: redis://127.0.0.1:1/0\n  quota_fail: maybe\n")
    from serving.gateway_config import load_gateway_config

    with pytest.raises(ConfigError, match="quota_fail"):
        load_gateway_config(path)


def test_the_in_process_default_does_not_import_redis():
    code = "import sys, serving.gateway, serving.server; assert 'redis' not in sys.modules, 'redis imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


# --- through the gateway: two replicas, one budget -----------------------------------------


class _Engine:
    def __init__(self, status: int = 200) -> None:
        self.status = status

    async def __call__(self, scope, receive, send) -> None:
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def _gateway(config: GatewayConfig, metrics: ServingMetrics, status: int = 200) -> Gateway:
    policy = AdmissionPolicy(config, max_model_len=1000, served_names=["m"], qos_enabled=False, quotas=TenantQuotas())

    async def abort(ids: list[str]) -> None:
        return None

    class Words:
        def encode(self, text: str, /) -> list[int]:
            return [1] * max(1, len(text.split()))

        def apply_chat_template(self, messages: Any, /, **kwargs: Any) -> Any:
            raise NotImplementedError

    gateway = Gateway(
        _Engine(status),
        policy=policy,
        counter=TokenizerCounter(Words()),
        metrics=metrics,
        tags=RequestTags(),
        abort=abort,
        model_name="m",
    )
    gateway.ready = True
    return gateway


def _sample(metrics: ServingMetrics, labels: dict[str, str]) -> float:
    name = catalog.GATEWAY_QUOTA_BACKEND_ERRORS.name
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_two_gateways_share_one_budget(server):
    config = _config(server.url, tokens_per_minute=300)
    metrics = [ServingMetrics(CollectorRegistry()) for _ in range(2)]
    gateways = [_gateway(config, m) for m in metrics]
    body = {"model": "m", "prompt": "zaba kelo", "max_tokens": 48}  # reserves 2 + 48 = 50 tokens

    async def burst() -> list[httpx.Response]:
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=g), base_url="http://gw") for g in gateways]
        try:
            return [
                await clients[i % 2].post("/v1/completions", json=body, headers={"authorization": f"Bearer {KEY}"})
                for i in range(10)
            ]
        finally:
            for client in clients:
                await client.aclose()

    responses = asyncio.run(burst())
    codes = [r.status_code for r in responses]
    assert codes.count(200) == 6 and codes.count(429) == 4, codes  # 300 / 50, not twice that
    ok = next(r for r in responses if r.status_code == 200)
    assert ok.headers["x-ratelimit-limit-tokens"] == "300"
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"]["code"] == "quota_exhausted"
    assert refused.json()["error"]["type"] == "rate_limit_error" and "retry-after" in refused.headers


def test_a_gateway_with_redis_down_counts_and_answers_as_configured(server):
    metrics = ServingMetrics(CollectorRegistry())
    gateway = _gateway(_config(server.url, quota_fail="closed"), metrics)
    server.stop()

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as client:
            body = {"model": "m", "prompt": "zaba", "max_tokens": 4}
            return await client.post("/v1/completions", json=body, headers={"authorization": f"Bearer {KEY}"})

    response = asyncio.run(go())
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "quota_backend_unavailable"
    assert _sample(metrics, {"reason": "connection"}) == 1
    rejected = metrics.registry.get_sample_value(
        catalog.GATEWAY_REJECTIONS.name, {"reason": "quota_backend_unavailable", "tenant": "acme"}
    )
    assert rejected == 1


def test_a_request_the_engine_refuses_is_refunded_in_the_shared_bucket(server):
    gateway = _gateway(_config(server.url, tokens_per_minute=300), ServingMetrics(CollectorRegistry()), status=400)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as client:
            body = {"model": "m", "prompt": "zaba", "max_tokens": 200}
            response = await client.post("/v1/completions", json=body, headers={"authorization": f"Bearer {KEY}"})
        assert gateway.shared is not None
        await gateway.shared.drain()
        return response

    assert asyncio.run(go()).status_code == 400
    level = float(redis.Redis(port=server.port).hget("kvscope:quota:acme:tokens", "level") or 0)
    assert level == 300


@pytest.mark.parametrize("store", ["in-process", "redis"])
def test_both_stores_take_a_request_and_its_tokens_all_or_nothing(server, store):
    """One interface, two stores: the same takes give the same answers, refusals and headers."""
    url = server.url if store == "redis" else None
    config = _config(url or "redis://unused", tokens_per_minute=100, tier={"requests_per_minute": 3})
    if url is None:
        config = config.model_copy(update={"quota_backend": None})
    gateway = _gateway(config, ServingMetrics(CollectorRegistry()))

    async def post(max_tokens: int) -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"model": "m", "prompt": "zaba kelo", "max_tokens": max_tokens}
            return await client.post("/v1/completions", json=body, headers={"authorization": f"Bearer {KEY}"})

    assert asyncio.run(post(58)).status_code == 200  # 60 of 100 tokens, 1 of 3 requests
    short = asyncio.run(post(58))  # 60 more tokens: refused, and the request is not counted
    assert short.status_code == 429 and short.json()["error"]["code"] == "quota_exhausted"
    assert "needs 60 tokens" in short.json()["error"]["message"]
    assert short.headers["x-ratelimit-remaining-requests"] == "2"
    assert int(short.headers["retry-after"]) >= 1
    codes = [asyncio.run(post(8)).status_code for _ in range(3)]  # 10 tokens each; 2 requests left
    assert codes == [200, 200, 429], codes
    over = asyncio.run(post(8))
    assert over.json()["error"]["code"] == "request_quota_exhausted"
    assert "request budget of 3 per minute" in over.json()["error"]["message"]
    too_big = asyncio.run(post(200))
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "request_exceeds_quota"
