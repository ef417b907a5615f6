"""The serving layer's own metrics (names from the catalog), in one registry object."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from kvscope import catalog
from kvscope.metrics import counter, gauge, histogram


class ServingMetrics:
    """Instruments written by the gateway and the stat logger.

    Single API-server process: vLLM's PROMETHEUS_MULTIPROC_DIR mode is not used by
    `kvscope serve`, so plain in-process metrics are exact.
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.queue = histogram(catalog.REQUEST_QUEUE_SECONDS, registry)
        self.ttft = histogram(catalog.REQUEST_TTFT_SECONDS, registry)
        self.gateway_seconds = histogram(catalog.REQUEST_GATEWAY_SECONDS, registry)
        self.admitted_prompt_tokens = histogram(catalog.GATEWAY_ADMITTED_PROMPT_TOKENS, registry)
        self.prefix_hit_ratio = gauge(catalog.CACHE_PREFIX_HIT_RATIO, registry)
        self.capacity_tokens = gauge(catalog.CACHE_CAPACITY_TOKENS, registry)
        self.bytes_per_token = gauge(catalog.CACHE_BYTES_PER_TOKEN, registry)
        self.config_info = gauge(catalog.ENGINE_CONFIG_INFO, registry)
        self.requests = counter(catalog.GATEWAY_REQUESTS, registry)
        self.rejections = counter(catalog.GATEWAY_REJECTIONS, registry)
        self.tokens = counter(catalog.GATEWAY_TOKENS, registry)
        self.quota_remaining = gauge(catalog.GATEWAY_QUOTA_REMAINING, registry)
        self.quota_limit = gauge(catalog.GATEWAY_QUOTA_LIMIT, registry)
        self.quota_backend_errors = counter(catalog.GATEWAY_QUOTA_BACKEND_ERRORS, registry)
        self.inflight = gauge(catalog.GATEWAY_INFLIGHT, registry)
        self.lane_waiting = gauge(catalog.GATEWAY_LANE_WAITING, registry)
        self.lane_tokens = gauge(catalog.GATEWAY_LANE_TOKENS, registry)
        self.lane_wait = histogram(catalog.GATEWAY_LANE_WAIT_SECONDS, registry)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: MetricWrapperBase, *values: str) -> Any:
        """`metric.labels(*values)`, kept for the next request: prometheus_client checks the
        values and takes a lock on every call (1-2 us; a request makes about ten). The label
        values are bounded as the metric's own children are (tenants, tiers, classes, models);
        no child of these metrics is ever removed."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found
