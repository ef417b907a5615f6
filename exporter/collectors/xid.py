"""XID errors counted one by one from NVML's event stream.

dcgm-exporter's XID gauge holds the last XID number until another arrives, so a
repeat is invisible and increase() over it is meaningless. Here every event increments
a per-GPU, per-XID counter and stamps a last-seen time (catalog: GPU_XID_*), and the XID
catalog's meaning and action ride along as an info series. The watcher thread restarts with
exponential backoff when NVML fails.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from exporter.exposition import Series
from exporter.nvml_api import Nvml
from kvscope import catalog
from kvscope.xid_catalog import CATALOG

log = logging.getLogger("kvscope.export.xid")


@dataclass
class XidCounts:
    """Thread-safe tallies: (gpu, UUID, xid) -> count and last time seen."""

    clock: Callable[[], float] = time.time
    counts: dict[tuple[str, str, int], int] = field(default_factory=dict)
    last_seen: dict[tuple[str, str, int], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, gpu: int, uuid: str, xid: int) -> None:
        key = (str(gpu), uuid, int(xid))
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.last_seen[key] = self.clock()

    def last_per_gpu(self) -> dict[str, int]:
        """The most recent XID of each GPU (what dcgm-exporter's sticky gauge shows)."""
        with self._lock:
            latest: dict[str, tuple[float, int]] = {}
            for (gpu, _uuid, xid), seen in self.last_seen.items():
                if gpu not in latest or seen >= latest[gpu][0]:
                    latest[gpu] = (seen, xid)
            return {gpu: xid for gpu, (_, xid) in latest.items()}

    def snapshot(self) -> list[tuple[tuple[str, str, int], int, float]]:
        with self._lock:
            return [(k, v, self.last_seen[k]) for k, v in self.counts.items()]


class XidWatcher(threading.Thread):
    """Waits on an NVML event set for critical XIDs on every GPU."""

    def __init__(
        self,
        nvml: Nvml,
        counts: XidCounts,
        uuids: list[str],
        *,
        timeout_ms: int = 1000,
        backoff: tuple[float, float] = (1.0, 60.0),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(name="xid-watcher", daemon=True)
        self.nvml, self.counts, self.uuids = nvml, counts, uuids
        self.timeout_ms, self.backoff, self.sleep = timeout_ms, backoff, sleep
        self.stopped = threading.Event()
        self.healthy = False
        self.restarts = 0
        self.last_error = ""

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        delay = self.backoff[0]
        while not self.stopped.is_set():
            try:
                self._watch()
                return
            except self.nvml.nv.NVMLError as exc:
                self.healthy, self.last_error = False, str(exc)
                self.restarts += 1
                log.warning("XID watcher: %s; restarting in %.0f s", exc, delay)
                self.sleep(delay)
                delay = min(delay * 2, self.backoff[1])

    def _watch(self) -> None:
        event_set, registered = self.nvml.xid_event_set()
        try:
            self.healthy = bool(registered)
            while not self.stopped.is_set():
                try:
                    event = self.nvml.wait_event(event_set, self.timeout_ms)
                except self.nvml.nv.NVMLError_Timeout:
                    continue  # quiet: nothing happened
                index = self.nvml.index_of(event.device)
                gpu = index if index is not None else -1
                uuid = self.uuids[gpu] if 0 <= gpu < len(self.uuids) else ""
                self.counts.record(gpu, uuid, int(event.eventData))
        finally:
            self.nvml.free_event_set(event_set)


class XidCollector:
    """Counts start at 0 for every GPU and catalog XID: increase() cannot see a series'
    first sample rise, so a counter born at 1 would hide the first XID of a code."""

    name = "xid"

    def __init__(
        self,
        counts: XidCounts,
        watcher: XidWatcher | None = None,
        gpus: Sequence[tuple[int, str]] = (),
    ) -> None:
        self.counts, self.watcher, self.gpus = counts, watcher, list(gpus)

    @property
    def healthy(self) -> bool:
        """False while the watcher is down: counts stay served, success says they may lag."""
        return self.watcher is None or self.watcher.healthy

    def collect(self) -> Iterable[Metric]:
        errors, last = Series(catalog.GPU_XID_ERRORS), Series(catalog.GPU_XID_LAST_SECONDS)
        seen_keys = {key for key, _, _ in self.counts.snapshot()}
        for index, uuid in self.gpus:
            for code in CATALOG:
                if (str(index), uuid, code) not in seen_keys:
                    errors.add((index, uuid, code), 0.0)
        for (gpu, uuid, xid), count, seen in self.counts.snapshot():
            errors.add((gpu, uuid, xid), count)
            last.add((gpu, uuid, xid), seen)
        info = Series(catalog.GPU_XID_INFO)
        for code, entry in sorted(CATALOG.items()):
            info.add((code, entry.meaning, entry.action, entry.bucket.value), 1.0)
        yield from (s.metric for s in (errors, last, info) if s)
