"""vLLM (or `kvscope serve`) /metrics pages re-exposed unchanged, plus a `target` label, and
an up gauge per target. Targets are scraped concurrently, each within a total deadline and a
byte cap (exporter/scrape.py), so a slow or dead target costs only its own series."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from prometheus_client.core import Metric

from exporter.exposition import Series
from exporter.scrape import DEFAULT_MAX_BYTES, ScrapeResult, Target, relabel, scrape_all
from kvscope import catalog, promtext


def metrics_url(target: str) -> str:
    """Accept host:port, a base URL, or a full /metrics URL."""
    url = target if "://" in target else f"http://{target}"
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def _ratio(text: str | None) -> float | None:
    """A label's number if it is a share in (0, 1]; None (no sample) for anything else."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if 0 < value <= 1 else None


class VllmCollector:
    name = "vllm"

    def __init__(
        self,
        targets: Sequence[str],
        timeout: float = 3.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        token: bytes | None = None,
    ) -> None:
        self.scraped = [Target.of(metrics_url(t), token) for t in targets]
        self.targets = [t.url for t in self.scraped]  # as labels show them: no credentials
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.parse_errors: dict[str, int] = dict.fromkeys(self.targets, 0)
        self._pages: dict[str, list[Metric]] = {}  # the latest pass: each up target's families
        self._latest: dict[str, list[promtext.Sample]] | None = {}

    @property
    def latest(self) -> dict[str, list[promtext.Sample]]:
        """Each up target's samples from the latest collection (what the emulated GPUs follow),
        made when first asked: with real GPUs nothing asks, and a page's samples cost as much
        again as parsing it."""
        latest = self._latest
        if latest is None:
            pages = self._pages
            latest = {
                target: [promtext.Sample(s.name, s.labels, s.value) for f in families for s in f.samples]
                for target, families in pages.items()
            }
            if pages is self._pages:  # not replaced meanwhile by a newer pass
                self._latest = latest
        return latest

    def collect(self) -> Iterable[Metric]:
        results: list[ScrapeResult] = scrape_all(self.scraped, self.timeout, self.max_bytes)
        up, seconds = Series(catalog.TARGET_UP), Series(catalog.TARGET_SCRAPE_SECONDS)
        errors = Series(catalog.EXPORTER_PARSE_ERRORS)
        budgets = Series(catalog.ENGINE_MEMORY_BUDGET)
        pages: dict[str, list[Metric]] = {}
        for result in results:
            up.add((result.target,), 1.0 if result.up else 0.0)
            seconds.add((result.target,), result.seconds)
            if result.parse_error:
                with self._lock:
                    self.parse_errors[result.target] += 1
            if result.up:
                pages[result.target] = result.families
                for family in result.families:
                    yield relabel(family, {"target": result.target})
                    if family.name != catalog.VLLM_CACHE_CONFIG_INFO.name:
                        continue
                    for sample in family.samples:
                        if sample.name == catalog.VLLM_CACHE_CONFIG_INFO.name:
                            budgets.add(
                                (result.target, sample.labels.get("model_name", ""), sample.labels.get("engine", "")),
                                _ratio(sample.labels.get("gpu_memory_utilization")),
                            )
        with self._lock:
            for target, count in self.parse_errors.items():
                errors.add((target,), count)
        self._pages, self._latest = pages, None
        yield from (up.metric, seconds.metric, errors.metric, budgets.metric)

    def close(self) -> None:
        return None
