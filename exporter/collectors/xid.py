"""XID errors counted one by one, from NVML's event stream and from the kernel log.

dcgm-exporter's XID gauge holds the last XID number until another arrives, so a
repeat is invisible and increase() over it is meaningless. Here every event increments
a per-GPU, per-XID counter and stamps a last-seen time (catalog: GPU_XID_*), and the XID
catalog's meaning and action ride along as an info series. The watcher thread restarts with
exponential backoff when NVML fails.

Two sources, one count. NVML's event set misses some XIDs (it reports late or not at all for
79, 119, 120 and, through DCGM, 62), but the driver writes every one to the kernel log as
`NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`; the
kmsg source reads those lines (non-blocking, on each collection) and maps the PCI address to the
GPU. An XID that both sources report within `DEDUPE_SECONDS` of each other is one event, matched
one to one, so a burst of the same code is still counted event by event. A kernel log that
cannot be read (no permission, a container without /dev/kmsg) costs only the kmsg source: its
source-up series (catalog GPU_XID_SOURCE_UP, source="kmsg") reads 0 and the reason is logged once.

Repeated XIDs escalate (after NVIDIA NVSentinel's RepeatedXID rules and the XID catalog's
actions: "if repeated on one GPU, run diagnostics", "power-cycle if it persists"): the same
code N times within a window on one GPU sets catalog GPU_XID_ESCALATED{xid, action, window}
to 1, so an alert can page for the escalated action and not for each single event.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import Metric

from exporter.exposition import Series
from exporter.nvml_api import GpuIdentity, Nvml
from kvscope import catalog
from kvscope.xid_catalog import CATALOG

log = logging.getLogger("kvscope.export.xid")

DEDUPE_SECONDS = 30.0  # NVML's event and the kernel log line of one XID arrive within this
KMSG = "/dev/kmsg"
NVML, KERNEL_LOG = "nvml", "kmsg"


@dataclass(frozen=True)
class Escalation:
    """`count` XIDs of one of `codes` on one GPU within `window_seconds` escalate to `action`."""

    codes: tuple[int, ...]
    count: int
    window_seconds: float
    window: str  # the window as the `window` label shows it
    action: str


ESCALATIONS: tuple[Escalation, ...] = (
    # app-level faults that keep coming back on one GPU are the GPU's (XID 31: "if repeated on
    # one GPU, run diagnostics"; NVSentinel RepeatedXID13/31)
    Escalation((13, 31), 3, 3600.0, "1h", "run_diagnostics"),
    # contained ECC errors that repeat: reset now rather than "when convenient"
    Escalation((94,), 2, 86400.0, "24h", "reset_gpu"),
    # a reset that did not hold: take the node out and have the GPU serviced
    Escalation((48, 62, 64, 95, 140), 2, 86400.0, "24h", "drain_node"),
    # GSP timeouts/errors that persist: "power-cycle if it persists"
    Escalation((119, 120), 2, 86400.0, "24h", "power_cycle"),
    # NVLink errors that repeat are hardware (NVSentinel RepeatedXID74Reg0HardwareIssue)
    Escalation((74,), 2, 86400.0, "24h", "contact_support"),
)
_HISTORY = max(e.window_seconds for e in ESCALATIONS)


@dataclass
class XidCounts:
    """Thread-safe tallies: (gpu, UUID, xid) -> count and last time seen, with the recent
    history the escalation rules need and the cross-source dedupe."""

    clock: Callable[[], float] = time.time
    dedupe_seconds: float = DEDUPE_SECONDS
    counts: dict[tuple[str, str, int], int] = field(default_factory=dict)
    last_seen: dict[tuple[str, str, int], float] = field(default_factory=dict)
    history: dict[tuple[str, str, int], deque[float]] = field(default_factory=dict)
    duplicates: int = 0  # events dropped as the other source's report of a counted one
    _unmatched: dict[tuple[str, int], deque[tuple[float, str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, gpu: int, uuid: str, xid: int, source: str = NVML) -> bool:
        """Count one XID; False when it is another source's report of an XID already counted."""
        key = (str(gpu), uuid, int(xid))
        with self._lock:
            now = self.clock()
            recent = self._unmatched.setdefault((key[0], key[2]), deque())
            while recent and now - recent[0][0] > self.dedupe_seconds:
                recent.popleft()
            for i, (_, other) in enumerate(recent):
                if other != source:
                    del recent[i]  # matched one to one: a burst still counts event by event
                    self.duplicates += 1
                    return False
            recent.append((now, source))
            self.counts[key] = self.counts.get(key, 0) + 1
            self.last_seen[key] = now
            seen = self.history.setdefault(key, deque(maxlen=4096))
            seen.append(now)
            while seen and now - seen[0] > _HISTORY:
                seen.popleft()
            return True

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

    def within(self, gpu: str, uuid: str, xid: int, seconds: float) -> int:
        """How many XIDs of this code this GPU had in the last `seconds`."""
        with self._lock:
            now = self.clock()
            return sum(1 for t in self.history.get((gpu, uuid, xid), ()) if now - t <= seconds)

    def recent(self, seconds: float) -> list[tuple[str, str, int]]:
        """(gpu, UUID, xid) of every XID seen in the last `seconds`."""
        with self._lock:
            now = self.clock()
            return [k for k, t in self.last_seen.items() if now - t <= seconds]


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
                self.counts.record(gpu, uuid, int(event.eventData), NVML)
        finally:
            self.nvml.free_event_set(event_set)


# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
_XID_LINE = re.compile(
    rb"NVRM: Xid \(PCI:(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\): (\d+)"
)
_BUS_ID = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?$")


def pci_key(bus_id: str | bytes) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "00000000:3B:00.0" (NVML) or "0000:3b:00" (the kernel log)."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    found = _BUS_ID.search(text.strip())
    if found is None:
        return None
    domain, bus, device = found.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16)


class KmsgXidSource:
    """XIDs from the kernel log: /dev/kmsg, or a file or pipe standing in for it (`path`).

    Reads are non-blocking and bounded per poll, so a collection never waits on the kernel.
    /dev/kmsg is read from its end (records from before the exporter started are history, not
    new events); a regular file or a pipe from its beginning.
    """

    name = KERNEL_LOG

    def __init__(
        self,
        counts: XidCounts,
        gpus: Sequence[GpuIdentity],
        path: str | Path = KMSG,
        *,
        retry_seconds: float = 300.0,
        max_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counts, self.path = counts, str(path)
        self.by_pci = {k: g for g in gpus if not g.is_mig and (k := pci_key(g.pci_bus_id)) is not None}
        self.retry_seconds, self.max_bytes, self.clock = retry_seconds, max_bytes, clock
        self.fd: int | None = None
        self.error = ""  # why the source is down ("" while it is read)
        self._said: set[str] = set()  # reasons already logged: each is said once
        self._next_open = 0.0
        self._partial = b""

    @property
    def up(self) -> bool:
        return self.fd is not None

    def _open(self) -> None:
        if self.fd is not None or self.clock() < self._next_open:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self._down(
                f"cannot read {self.path}: {exc.strerror or exc} (XIDs from the kernel log need read access to it)"
            )
            return
        with contextlib.suppress(OSError):
            if stat.S_ISCHR(os.fstat(fd).st_mode):
                os.lseek(fd, 0, os.SEEK_END)  # /dev/kmsg: only records from now on
        self.fd, self.error, self._partial = fd, "", b""
        if self._said:
            log.info("XIDs from %s: reading again", self.path)

    def _down(self, reason: str) -> None:
        self.close()
        self.error = reason
        self._next_open = self.clock() + self.retry_seconds
        if reason not in self._said:
            self._said.add(reason)
            log.warning("XID kmsg source: %s; NVML events still count", reason)

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def poll(self) -> int:
        """Read what the kernel log has now (never waiting); the XIDs recorded."""
        self._open()
        if self.fd is None:
            return 0
        recorded, budget = 0, self.max_bytes
        while budget > 0:
            try:
                chunk = os.read(self.fd, 8192)  # /dev/kmsg: one record per read
            except BlockingIOError:
                break  # nothing more now
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the ring buffer overwrote records we had not read: read on
                self._down(f"reading {self.path} failed: {exc.strerror or exc}")
                break
            if not chunk:
                break  # end of a file, or a pipe with no writer
            budget -= len(chunk)
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            recorded += sum(self._line(line) for line in lines)
        return recorded

    def _line(self, line: bytes) -> int:
        found = _XID_LINE.search(line)
        if found is None:
            return 0
        domain, bus, device, code = found.groups()
        gpu = self.by_pci.get((int(domain or b"0", 16), int(bus, 16), int(device, 16)))
        if gpu is None:
            reason = f"XID on PCI {found.group(0).decode(errors='replace')} is not one of this exporter's GPUs"
            if reason not in self._said:
                self._said.add(reason)
                log.info("%s: not counted", reason)
            return 0
        return int(self.counts.record(gpu.index, gpu.uuid, int(code), KERNEL_LOG))


class XidCollector:
    """Counts start at 0 for every GPU and catalog XID: increase() cannot see a series'
    first sample rise, so a counter born at 1 would hide the first XID of a code."""

    name = "xid"

    def __init__(
        self,
        counts: XidCounts,
        watcher: XidWatcher | None = None,
        gpus: Sequence[tuple[int, str]] = (),
        kmsg: KmsgXidSource | None = None,
    ) -> None:
        self.counts, self.watcher, self.gpus, self.kmsg = counts, watcher, list(gpus), kmsg

    @property
    def healthy(self) -> bool:
        """False while the NVML watcher is down: counts stay served, success says they may lag.
        (An unreadable kernel log is the kmsg source's own series, not the collector's failure.)"""
        return self.watcher is None or self.watcher.healthy

    def close(self) -> None:
        if self.kmsg is not None:
            self.kmsg.close()

    def collect(self) -> Iterable[Metric]:
        if self.kmsg is not None:
            self.kmsg.poll()
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
        yield from self._escalations()
        yield from self._sources()

    def _escalations(self) -> Iterable[Metric]:
        escalated = Series(catalog.GPU_XID_ESCALATED)
        gpus = dict.fromkeys([*self.gpus, *((int(g), u) for g, u, _ in self.counts.counts)])
        for index, uuid in gpus:
            for rule in ESCALATIONS:
                for code in rule.codes:
                    hits = self.counts.within(str(index), uuid, code, rule.window_seconds)
                    escalated.add((index, uuid, code, rule.action, rule.window), 1.0 if hits >= rule.count else 0.0)
        yield from ([escalated.metric] if escalated else [])

    def _sources(self) -> Iterable[Metric]:
        up = Series(catalog.GPU_XID_SOURCE_UP)
        if self.watcher is not None:
            up.add((NVML,), 1.0 if self.watcher.healthy else 0.0)
        if self.kmsg is not None:
            up.add((KERNEL_LOG,), 1.0 if self.kmsg.up else 0.0)
        yield from ([up.metric] if up else [])
