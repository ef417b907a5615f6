"""vLLM (or `kvscope serve`) /metrics pages re-exposed unchanged, plus a `target` label, and
an up gauge per target. Targets are scraped concurrently, each within a total deadline and a
byte cap (exporter/scrape.py), so a slow or dead target costs only its own series.

Targets are the static list plus, when discovery is on (exporter/discovery.py), what it found
at its last pass: those carry a `discovered` label naming the method, and their series stop
when they are no longer found. A URL in both is the static target."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from prometheus_client.core import Metric

from exporter.exposition import Series
from exporter.scrape import DEFAULT_MAX_BYTES, ScrapeResult, Target, relabel, scrape_all
from kvscope import catalog, promtext


def metrics_url(target: str) -> str:
    """Accept host:port, a base URL, or a full /metrics URL."""
    url = target if "://" in target else f"http://{target}"
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def _same_target(url: str) -> tuple[str, str, int | None, str]:
    """What makes two URLs one target: localhost and 127.0.0.1 are the same listener."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    host = "127.0.0.1" if host == "localhost" else host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, host, port, parts.path.rstrip("/")


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
        discovered: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.static = [Target.of(metrics_url(t), token) for t in targets]
        self.scraped = list(self.static)
        self.targets = [t.url for t in self.scraped]  # as labels show them: no credentials
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.token = token
        self.discovered = discovered  # url -> method, from the discovery collector
        self._found: dict[str, str] = {}  # the discovered targets being scraped: url -> method
        self._extra: dict[str, dict[str, str]] = {t: {"target": t} for t in self.targets}
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

    def _follow_discovery(self) -> None:
        """Scrape what discovery found now: new targets join, those no longer found leave."""
        assert self.discovered is not None
        static = {_same_target(t.url) for t in self.static}
        found = {url: method for url, method in self.discovered().items() if _same_target(url) not in static}
        if found == self._found:
            return
        self.scraped = [*self.static, *(Target.of(url, self.token) for url in found)]
        self.targets = [t.url for t in self.scraped]
        self._extra = {t: {"target": t, "discovered": found[t]} if t in found else {"target": t} for t in self.targets}
        with self._lock:
            self.parse_errors = {t: self.parse_errors.get(t, 0) for t in self.targets}
        self._found = found

    def collect(self) -> Iterable[Metric]:
        if self.discovered is not None:
            self._follow_discovery()
        extra = self._extra
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
                    self.parse_errors[result.target] = self.parse_errors.get(result.target, 0) + 1
            if result.up:
                pages[result.target] = result.families
                labels = extra.get(result.target) or {"target": result.target}
                for family in result.families:
                    yield relabel(family, labels)
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
