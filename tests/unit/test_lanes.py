"""KV lanes: a QoS class's requests share at most its slice of the KV pool, in priority order;
through the gateway, held requests wait for room, leave on deadline or disconnect, and the
room is always handed back."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry

from serving.admission import AdmissionPolicy
from serving.gateway import Gateway
from serving.gateway_config import GatewayConfig
from serving.lanes import KvLane
from serving.metrics import ServingMetrics
from serving.prompts import TokenizerCounter
from serving.quota import TenantQuotas
from serving.request_tags import RequestTags


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_requests_that_fit_enter_at_once_and_the_next_waits_for_room():
    async def scenario() -> None:
        lane = KvLane("bulk", 100)
        assert lane.try_acquire(60)
        assert not lane.try_acquire(60)  # 120 > 100
        second = asyncio.ensure_future(lane.acquire(60, priority=5))
        await _settle()
        assert not second.done() and lane.waiting == 1
        lane.release(60)
        assert await second is True and lane.in_use == 60 and lane.waiting == 0

    asyncio.run(scenario())


def test_a_request_larger_than_the_share_runs_alone():
    async def scenario() -> None:
        lane = KvLane("bulk", 100)
        assert await lane.acquire(500, priority=0) is False  # nothing else runs: it may
        assert not lane.try_acquire(1)
        lane.release(500)
        assert lane.try_acquire(1)

    asyncio.run(scenario())


def test_waiting_requests_enter_by_priority_without_overtaking():
    async def scenario() -> None:
        lane = KvLane("bulk", 100)
        lane.try_acquire(100)
        order: list[str] = []

        async def request(name: str, tokens: int, priority: int) -> None:
            async with lane.hold(tokens, priority):
                order.append(name)
                await asyncio.sleep(0.01)

        tasks = [
            asyncio.ensure_future(request("late", 10, priority=900)),
            asyncio.ensure_future(request("big-early", 90, priority=100)),
            asyncio.ensure_future(request("small-early", 10, priority=200)),
        ]
        await _settle()
        lane.release(100)
        await asyncio.gather(*tasks)
        # big-early first; small-early fits beside it (90 + 10), late waits for room
        assert order == ["big-early", "small-early", "late"]
        assert lane.in_use == 0 and lane.running == 0

    asyncio.run(scenario())


def test_a_cancelled_wait_leaves_the_queue_and_frees_nothing_it_did_not_hold():
    async def scenario() -> None:
        lane = KvLane("bulk", 100)
        lane.try_acquire(100)
        gone = asyncio.ensure_future(lane.acquire(50, priority=1))
        kept = asyncio.ensure_future(lane.acquire(50, priority=2))
        await _settle()
        gone.cancel()
        await _settle()
        assert lane.waiting == 1
        lane.release(100)
        assert await kept is True and lane.in_use == 50 and lane.running == 1

    asyncio.run(scenario())


def test_a_grant_that_races_the_cancellation_is_handed_on():
    async def scenario() -> None:
        lane = KvLane("bulk", 100)
        lane.try_acquire(100)
        first = asyncio.ensure_future(lane.acquire(100, priority=1))
        second = asyncio.ensure_future(lane.acquire(100, priority=2))
        await _settle()
        lane.release(100)  # grants `first` ...
        first.cancel()  # ... which is cancelled before it runs again
        await _settle()
        assert first.cancelled() and await second is True
        assert lane.in_use == 100 and lane.running == 1

    asyncio.run(scenario())


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="at least 1 token"):
        KvLane("bulk", 0)


# --- through the gateway --------------------------------------------------------------------


class _Words:
    def encode(self, text: str, /) -> list[int]:
        return [1] * len(text.split())

    def apply_chat_template(self, messages, /, **kwargs):
        raise NotImplementedError


class _Engine:
    """vLLM's app stand-in: each request stays 'in the engine' until released by the test."""

    def __init__(self) -> None:
        self.entered: list[int] = []
        self.release = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        body = json.loads((await receive())["body"])
        self.entered.append(len(body["prompt"]))
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def _gateway(engine: _Engine, config: GatewayConfig, pool: int) -> tuple[Gateway, ServingMetrics]:
    metrics = ServingMetrics(CollectorRegistry())
    policy = AdmissionPolicy(config, max_model_len=100_000, served_names=["m"], qos_enabled=True, quotas=TenantQuotas())

    async def abort(ids: list[str]) -> None:
        return None

    gateway = Gateway(
        engine,
        policy=policy,
        counter=TokenizerCounter(_Words()),
        metrics=metrics,
        tags=RequestTags(),
        abort=abort,
        model_name="m",
        kv_pool_tokens=pool,
    )
    return gateway, metrics


class _Client:
    def __init__(self, words: int) -> None:
        body = json.dumps({"model": "m", "prompt": " ".join(["w"] * words), "max_tokens": 10}).encode()
        self.messages = [{"type": "http.request", "body": body, "more_body": False}]
        self.leave = asyncio.Event()
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        if self.messages:
            return self.messages.pop(0)
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)

    @property
    def error(self) -> str:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return json.loads(body)["error"]["message"] if body else ""


def _call(gateway: Gateway, client: _Client, key: str | None = None) -> asyncio.Future[None]:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}
    return asyncio.ensure_future(gateway(scope, client.receive, client.send))


def _value(metrics: ServingMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_the_gateway_holds_a_second_long_prompt_until_the_first_leaves_the_engine():
    async def scenario() -> None:
        engine = _Engine()
        gateway, metrics = _gateway(engine, GatewayConfig(), pool=20_000)  # bulk share: 10,000 tokens
        first, second, short = _Client(6000), _Client(6000), _Client(100)
        calls = [_call(gateway, c) for c in (first, second, short)]
        await _settle()
        assert engine.entered == [6000, 100]  # the second 6K prompt would take bulk past its share
        assert _value(metrics, "kvscope_gateway_lane_waiting_requests", priority_class="bulk") == 1
        assert _value(metrics, "kvscope_gateway_lane_tokens", priority_class="bulk", kind="capacity") == 10_000
        engine.release.set()
        await asyncio.gather(*calls)
        assert engine.entered == [6000, 100, 6000]
        assert [c.status for c in (first, second, short)] == [200, 200, 200]
        assert _value(metrics, "kvscope_gateway_lane_wait_seconds_count", priority_class="bulk") == 1
        assert gateway.lanes["bulk"].in_use == 0

    asyncio.run(scenario())


def test_a_held_request_that_passes_its_deadline_gets_504_and_frees_its_place():
    async def scenario() -> None:
        engine = _Engine()
        config = GatewayConfig.model_validate(
            {
                "tiers": {"patient": {}, "hurried": {"deadline_seconds": 1.0}},
                "tenants": {
                    "a": {"tier": "patient", "api_keys": ["sk-a"]},
                    "b": {"tier": "hurried", "api_keys": ["sk-b"]},
                },
            }
        )
        gateway, _ = _gateway(engine, config, pool=20_000)
        first, second = _Client(6000), _Client(6000)
        calls = [_call(gateway, first, "sk-a"), _call(gateway, second, "sk-b")]
        # the first (no deadline) holds the lane until released, so the second can only leave by its deadline
        await asyncio.wait_for(calls[1], timeout=60)
        assert second.status == 504 and "waiting at the gateway for the 'bulk' class's KV share" in second.error
        assert engine.entered == [6000] and gateway.lanes["bulk"].waiting == 0
        engine.release.set()
        await asyncio.gather(*calls)
        assert gateway.lanes["bulk"].in_use == 0 and gateway.lanes["bulk"].running == 0

    asyncio.run(scenario())


def test_a_held_request_whose_client_leaves_never_reaches_the_engine():
    async def scenario() -> None:
        engine = _Engine()
        gateway, metrics = _gateway(engine, GatewayConfig(), pool=20_000)
        first, second = _Client(6000), _Client(6000)
        calls = [_call(gateway, c) for c in (first, second)]
        await _settle()
        second.leave.set()
        await _settle()
        assert calls[1].done() and second.sent == []
        assert (
            _value(metrics, "kvscope_gateway_rejections_total", reason="client_disconnected", tenant="anonymous") == 1
        )
        engine.release.set()
        await asyncio.gather(*calls)
        assert engine.entered == [6000] and gateway.lanes["bulk"].in_use == 0

    asyncio.run(scenario())


def test_without_priority_scheduling_there_are_no_lanes():
    gateway, _ = _gateway(_Engine(), GatewayConfig(), pool=20_000)
    assert set(gateway.lanes) == {"bulk"}
    gateway.policy.qos_enabled = False
    assert gateway._lanes(20_000) == {}
