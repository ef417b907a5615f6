"""The stat-logger plugin, fed vLLM's own stats classes."""

import math
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from vllm.v1.metrics.stats import (
    FinishedRequestStats,
    IterationStats,
    PrefixCacheStats,
    SchedulerStats,
)

from kvscope import catalog
from serving.metrics import ServingMetrics
from serving.request_tags import RequestTag, RequestTags, new_request_id
from serving.stat_logger import HitRateWindow, KvscopeStatLogger, finished_part

CONFIG = SimpleNamespace(model_config=SimpleNamespace(served_model_name="m"))


def _stats(request_id: str, generated: int = 5, prefill: float = 0.012, decode: float = 0.04):
    return FinishedRequestStats(
        finish_reason="length",
        request_id=request_id,
        e2e_latency=0.06,
        num_prompt_tokens=30,
        num_generation_tokens=generated,
        queued_time=0.002,
        prefill_time=prefill,
        decode_time=decode,
    )


def test_ttft_is_e2e_minus_decode_and_phases_not_reached_are_none():
    part = finished_part(_stats("x"))
    assert math.isclose(part.ttft_seconds, 0.02) and part.prefill_seconds == 0.012
    never_started = finished_part(_stats("x", generated=0, prefill=-5.0, decode=0.0))
    assert never_started.ttft_seconds is None and never_started.prefill_seconds is None
    assert never_started.decode_seconds is None
    assert finished_part(_stats("x", generated=1, decode=0.0)).decode_seconds == 0.0


def test_hit_rate_window_forgets_old_steps():
    now = [0.0]
    window = HitRateWindow(60, clock=lambda: now[0])
    assert math.isnan(window.ratio())
    window.add(100, 90)
    now[0] = 30
    window.add(100, 10)
    assert window.ratio() == 0.5
    now[0] = 61
    assert window.ratio() == 0.1


def test_finished_requests_are_attributed_to_their_tenant_and_class():
    registry = CollectorRegistry()
    metrics, tags = ServingMetrics(registry), RequestTags()
    logger = KvscopeStatLogger(CONFIG, metrics=metrics, tags=tags)
    request_id = new_request_id()
    seen = []
    tags.add(request_id, RequestTag("acme", "gold", "interactive", 7, on_finished=seen.append))
    iteration = IterationStats()
    iteration.finished_requests = [_stats(f"cmpl-{request_id}-0-1a2b3c4d"), _stats("cmpl-plain-0")]
    scheduler = SchedulerStats(prefix_cache_stats=PrefixCacheStats(queries=200, hits=150))
    logger.record(scheduler, iteration)

    def value(signal, suffix="", **labels):
        return registry.get_sample_value(signal.family + suffix, labels)

    assert (
        value(
            catalog.REQUEST_TTFT_SECONDS,
            "_count",
            model_name="m",
            tenant="acme",
            priority_class="interactive",
        )
        == 1
    )
    assert (
        value(
            catalog.REQUEST_TTFT_SECONDS,
            "_count",
            model_name="m",
            tenant="none",
            priority_class="none",
        )
        == 1
    )
    assert value(catalog.REQUEST_QUEUE_SECONDS, "_count", model_name="m", tenant="none", priority_class="none") == 1
    assert value(catalog.GATEWAY_TOKENS, "_total", tenant="acme", kind="completion") == 5
    assert value(catalog.CACHE_PREFIX_HIT_RATIO, model_name="m") == 0.75
    assert len(seen) == 1 and seen[0].generation_tokens == 5


def test_millisecond_buckets_resolve_what_vllms_default_buckets_cannot():
    registry = CollectorRegistry()
    logger = KvscopeStatLogger(CONFIG, metrics=ServingMetrics(registry), tags=RequestTags())
    iteration = IterationStats()
    iteration.finished_requests = [_stats("r", prefill=0.004)]  # queued 2 ms, first token after 20 ms
    logger.record(None, iteration)

    def at_most(signal, bound: str) -> float | None:
        labels = {"model_name": "m", "tenant": "none", "priority_class": "none", "le": bound}
        return registry.get_sample_value(signal.family + "_bucket", labels)

    assert at_most(catalog.REQUEST_QUEUE_SECONDS, "0.0025") == 1  # vLLM's default lowest bucket: 0.3 s
    assert at_most(catalog.REQUEST_TTFT_SECONDS, "0.02") == 1 and at_most(catalog.REQUEST_TTFT_SECONDS, "0.01") == 0


def test_prefill_and_decode_are_left_to_vllms_own_histograms():
    names = {m.name for m in ServingMetrics(CollectorRegistry()).registry.collect()}
    assert not any("prefill" in n or "decode" in n for n in names)
