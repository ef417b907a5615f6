"""A vLLM stat-logger plugin adding what vLLM's own metrics lack.

- TTFT and queue time by tenant and QoS class, in millisecond buckets (the gateway's tags, matched
  by request id); prefill and decode times are vLLM's own histograms, which the tuned profile
  gives millisecond edges (--custom-histogram-buckets);
- prefix-cache hit rate over a sliding time window, as a gauge;
- KV capacity in tokens and KV bytes per token, from the engine's configuration.

`record()` runs on the API server's event loop for every batch of outputs: it only does
dictionary lookups and histogram observations. vLLM's stats classes are not a stable API,
so fields are read defensively.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import StatLoggerBase

from serving.metrics import ServingMetrics
from serving.request_tags import FinishedPart, RequestTags

UNTAGGED = "none"  # tenant / class label of requests that did not come through the gateway


class HitRateWindow:
    """Prefix-cache hits / queries (tokens) over the last `seconds`."""

    def __init__(self, seconds: float, clock: Any = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._steps: deque[tuple[float, int, int]] = deque()
        self._queries = 0
        self._hits = 0
        self._lock = threading.Lock()

    def add(self, queries: int, hits: int) -> None:
        if queries <= 0:
            return
        with self._lock:
            self._steps.append((self._clock(), queries, hits))
            self._queries += queries
            self._hits += hits
            self._evict()

    def reset(self) -> None:
        with self._lock:
            self._steps.clear()
            self._queries = self._hits = 0

    def ratio(self) -> float:
        """Hit rate in the window; NaN when nothing was looked up (no traffic)."""
        with self._lock:
            self._evict()
            return self._hits / self._queries if self._queries else math.nan

    def _evict(self) -> None:
        horizon = self._clock() - self.seconds
        while self._steps and self._steps[0][0] < horizon:
            _, queries, hits = self._steps.popleft()
            self._queries -= queries
            self._hits -= hits


def kv_bytes_per_token(vllm_config: VllmConfig) -> int:
    """2 (K and V) x layers x KV heads x head size x bytes per element of the cache dtype."""
    model = vllm_config.model_config
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype.startswith("fp8"):
        element = 1
    elif cache_dtype == "auto":
        element = int(getattr(model.dtype, "itemsize", 2))
    else:
        element = 4 if "32" in cache_dtype else 2
    layers = model.get_num_layers(vllm_config.parallel_config) * vllm_config.parallel_config.pipeline_parallel_size
    return 2 * layers * model.get_total_num_kv_heads() * model.get_head_size() * element


class KvscopeStatLogger(StatLoggerBase):
    """Per-engine stat logger; build it with functools.partial(..., metrics=, tags=)."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        engine_index: int = 0,
        *,
        metrics: ServingMetrics,
        tags: RequestTags,
        hit_window_seconds: float = 60.0,
    ) -> None:
        self.vllm_config = vllm_config
        self.metrics = metrics
        self.tags = tags
        self.model_name = str(vllm_config.model_config.served_model_name)
        self.window = HitRateWindow(hit_window_seconds)
        metrics.prefix_hit_ratio.labels(self.model_name).set_function(self.window.ratio)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
        **_: Any,
    ) -> None:
        if scheduler_stats is not None:
            prefix = getattr(scheduler_stats, "prefix_cache_stats", None)
            if prefix is not None:
                if getattr(prefix, "reset", False):
                    self.window.reset()
                self.window.add(int(getattr(prefix, "queries", 0)), int(getattr(prefix, "hits", 0)))
        if iteration_stats is not None:
            for finished in getattr(iteration_stats, "finished_requests", ()):
                self._record_finished(finished)

    def _record_finished(self, fr: Any) -> None:
        part = finished_part(fr)
        tag = self.tags.claim(getattr(fr, "request_id", None))
        tenant, qos_class = (tag.tenant, tag.qos_class) if tag else (UNTAGGED, UNTAGGED)
        model = self.model_name
        if part.queue_seconds >= 0:
            self.metrics.child(self.metrics.queue, model, tenant, qos_class).observe(part.queue_seconds)
        if part.ttft_seconds is not None:
            self.metrics.child(self.metrics.ttft, model, tenant, qos_class).observe(part.ttft_seconds)
        if tag is not None:
            self.metrics.child(self.metrics.tokens, tenant, "completion").inc(part.generation_tokens)
            tag.finished.append(part)
            if tag.on_finished is not None:
                tag.on_finished(part)

    def log_engine_initialized(self) -> None:
        self.metrics.capacity_tokens.labels(self.model_name).set(kv_capacity_tokens(self.vllm_config))
        self.metrics.bytes_per_token.labels(self.model_name).set(kv_bytes_per_token(self.vllm_config))


def kv_capacity_tokens(vllm_config: Any) -> int:
    """Tokens the engine's KV pool holds (0 before the engine has sized it)."""
    cache = vllm_config.cache_config
    return int(getattr(cache, "kv_cache_size_tokens", None) or ((cache.num_gpu_blocks or 0) * cache.block_size))


def finished_part(fr: Any) -> FinishedPart:
    """Phase times of a finished request; phases it never reached are None.

    vLLM reports TTFT only in aggregate; per request it is e2e latency minus decode time.
    """
    generated = int(getattr(fr, "num_generation_tokens", 0))
    e2e = float(getattr(fr, "e2e_latency", 0.0))
    queued = float(getattr(fr, "queued_time", -1.0))
    prefill = float(getattr(fr, "prefill_time", -1.0))
    decode = float(getattr(fr, "decode_time", -1.0))
    reached_first_token = generated > 0 and prefill >= 0
    return FinishedPart(
        finish_reason=str(getattr(fr, "finish_reason", "")),
        prompt_tokens=int(getattr(fr, "num_prompt_tokens", 0)),
        generation_tokens=generated,
        max_tokens=getattr(fr, "max_tokens_param", None),
        queue_seconds=queued,
        prefill_seconds=prefill if reached_first_token else None,
        decode_seconds=max(decode, 0.0) if reached_first_token else None,  # 0 s: one token
        ttft_seconds=max(0.0, e2e - max(decode, 0.0)) if reached_first_token else None,
    )
