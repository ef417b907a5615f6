"""Runs the collectors, times each one, and keeps the rendered page.

Like node_exporter: every collector gets a duration and a success gauge (catalog:
EXPORTER_COLLECTOR_DURATION / _SUCCESS); one that raises (or reports itself unhealthy)
costs only its own series, and what it yielded before failing is kept. Collection happens in
the background every `interval` seconds with a cached page (like dcgm-exporter), or on each
scrape (interval 0).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from prometheus_client.core import Metric

from exporter.collectors import Collector
from exporter.exposition import Series, render
from kvscope import catalog

log = logging.getLogger("kvscope.export")


class Exporter:
    def __init__(self, collectors: Sequence[Collector], interval: float = 5.0) -> None:
        self.collectors = list(collectors)  # order matters: vLLM first, the GPUs follow it
        self.interval = interval
        self._page = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_errors: dict[str, str] = {}

    def collect(self) -> list[Metric]:
        """One pass over every collector, with their timings."""
        families: list[Metric] = []
        duration = Series(catalog.EXPORTER_COLLECTOR_DURATION)
        success = Series(catalog.EXPORTER_COLLECTOR_SUCCESS)
        for collector in self.collectors:
            started = time.perf_counter()
            ok = True
            try:
                for family in collector.collect():
                    families.append(family)
                ok = bool(getattr(collector, "healthy", True))
                self.last_errors.pop(collector.name, None)
            except Exception as exc:  # a failing source must not take the others down
                ok = False
                self.last_errors[collector.name] = f"{type(exc).__name__}: {exc}"
                log.warning("collector %s failed: %s", collector.name, exc)
            duration.add((collector.name,), time.perf_counter() - started)
            success.add((collector.name,), 1.0 if ok else 0.0)
        families += [duration.metric, success.metric]
        return families

    def refresh(self) -> bytes:
        page = render(self.collect())
        with self._lock:
            self._page = page
        return page

    def page(self) -> bytes:
        """The page to serve: the cached one in background mode, a fresh one otherwise."""
        if self.interval <= 0:
            return self.refresh()
        with self._lock:
            if self._page:
                return self._page
        return self.refresh()

    def start(self) -> None:
        """Collect once now, then every `interval` seconds in a background thread."""
        self.refresh()
        if self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name="collect", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def stop(self) -> None:
        self._stop.set()
        for collector in self.collectors:
            close = getattr(collector, "close", None)
            if close is not None:
                close()
