"""XID events are counted one by one; timeouts are quiet; NVML errors restart with backoff;
the kernel log adds the XIDs NVML misses, deduped, without ever blocking; repeats escalate."""

import os
import threading
import time

from exporter.collectors.xid import KERNEL_LOG, KmsgXidSource, XidCollector, XidCounts, XidWatcher, pci_key
from exporter.exposition import render
from exporter.nvml_api import GpuIdentity, Nvml
from kvscope import catalog, promtext
from tests.fakes.nvml import fake_node
from tests.waiting import eventually


def watch(fake, until, timeout=30.0):
    nvml = Nvml(fake)
    nvml.init()
    counts = XidCounts(clock=lambda: 1000.0)
    sleeps = []
    watcher = XidWatcher(nvml, counts, ["GPU-fake-0", "GPU-fake-1"], timeout_ms=1, sleep=sleeps.append)
    watcher.start()
    deadline = time.monotonic() + timeout
    while not until(counts, watcher) and time.monotonic() < deadline:
        time.sleep(0.01)
    watcher.stop()
    watcher.join(2)
    return counts, watcher, sleeps


def test_each_xid_is_counted_even_when_the_same_code_repeats():
    fake = fake_node(2)
    fake.events.extend([(1, 79), (1, 79), (0, 13)])
    counts, watcher, _ = watch(fake, lambda c, w: sum(c.counts.values()) == 3)
    assert counts.counts == {("1", "GPU-fake-1", 79): 2, ("0", "GPU-fake-0", 13): 1}
    samples = promtext.parse(render(XidCollector(counts, watcher).collect()).decode())
    assert promtext.total(samples, catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 2
    assert promtext.total(samples, catalog.GPU_XID_LAST_SECONDS.name, gpu="1", xid="79") == 1000.0
    info = promtext.select(samples, catalog.GPU_XID_INFO.name, xid="79")[0].labels
    assert info["bucket"] == "drain_node" and "fallen off the bus" in info["meaning"]


def test_nvml_errors_restart_the_watcher_with_growing_backoff():
    fake = fake_node(2)
    fake.events.extend([fake.error("NVMLError_Unknown"), fake.error("NVMLError_Unknown"), (0, 31)])
    counts, watcher, sleeps = watch(fake, lambda c, w: sum(c.counts.values()) == 1)
    assert watcher.restarts == 2 and sleeps == [1.0, 2.0]
    assert fake.event_sets_created == 3 and fake.event_sets_freed >= 2
    assert counts.counts == {("0", "GPU-fake-0", 31): 1}


def test_a_watcher_that_cannot_register_reports_unhealthy_but_keeps_serving_counts():
    fake = fake_node(2)
    for gpu in fake.gpus:
        gpu.unsupported.add("events")
    counts, watcher, _ = watch(fake, lambda c, w: fake.event_sets_created >= 1, timeout=1.0)
    collector = XidCollector(counts, watcher)
    assert not collector.healthy
    assert list(collector.collect())  # the catalog info series is still there


def test_the_last_xid_per_gpu_feeds_the_dcgm_style_sticky_gauge():
    counts = XidCounts(clock=iter([1.0, 2.0, 3.0]).__next__)
    counts.record(0, "u0", 79)
    counts.record(0, "u0", 13)
    counts.record(1, "u1", 48)
    assert counts.last_per_gpu() == {"0": 13, "1": 48}


def test_counts_start_at_zero_so_the_first_xid_is_an_increase():
    counts = XidCounts()
    samples = promtext.parse(render(XidCollector(counts, None, [(0, "u0"), (1, "u1")]).collect()).decode())
    zeros = promtext.select(samples, catalog.GPU_XID_ERRORS.name, xid="79")
    assert sorted(s.labels["gpu"] for s in zeros) == ["0", "1"] and all(s.value == 0 for s in zeros)
    counts.record(1, "u1", 79)
    samples = promtext.parse(render(XidCollector(counts, None, [(0, "u0"), (1, "u1")]).collect()).decode())
    assert promtext.total(samples, catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 1
    assert len(promtext.select(samples, catalog.GPU_XID_ERRORS.name, gpu="1", xid="79")) == 1


# -- the kernel log: XIDs NVML misses, deduped with NVML's, never blocking ----------------------

GPUS = [
    GpuIdentity(0, "GPU-a", "00000000:18:00.0", "NVIDIA H100 80GB HBM3", "n"),
    GpuIdentity(1, "GPU-b", "00000000:3B:00.0", "NVIDIA H100 80GB HBM3", "n"),
]
LINE_79 = "6,1234,5678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
LINE_119 = "[  912.3] NVRM: Xid (PCI:0000:18:00): 119, pid=77, name=vllm, Timeout waiting for RPC from GSP!\n"


def page(collector):
    return promtext.parse(render(collector.collect()).decode())


def test_kernel_log_xids_are_counted_on_the_gpu_at_that_pci_address(tmp_path):
    log_file = tmp_path / "kmsg"
    log_file.write_text("6,1,2,-;eth0: link up\n" + LINE_79 + LINE_119)
    counts = XidCounts(clock=lambda: 50.0)
    collector = XidCollector(counts, None, [(0, "GPU-a"), (1, "GPU-b")], KmsgXidSource(counts, GPUS, log_file))
    samples = page(collector)
    assert promtext.total(samples, catalog.GPU_XID_ERRORS.name, gpu="1", UUID="GPU-b", xid="79") == 1
    assert promtext.total(samples, catalog.GPU_XID_ERRORS.name, gpu="0", xid="119") == 1
    assert promtext.total(samples, catalog.GPU_XID_SOURCE_UP.name, source=KERNEL_LOG) == 1
    with log_file.open("a") as f:  # the log grows: only the new line counts
        f.write(LINE_79)
    assert promtext.total(page(collector), catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 2


def test_a_pipe_standing_in_for_kmsg_never_blocks_a_collection(tmp_path):
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    writer_ready = threading.Event()
    holder = {}

    def open_writer():
        holder["fd"] = os.open(fifo, os.O_WRONLY)  # blocks until the reader opens
        writer_ready.set()

    threading.Thread(target=open_writer, daemon=True).start()
    counts = XidCounts()
    collector = XidCollector(counts, None, [(1, "GPU-b")], KmsgXidSource(counts, GPUS, fifo))
    page(collector)  # opens the pipe; nothing written yet: returns at once
    eventually(writer_ready.is_set, timeout=10, what="the writer attached")
    os.write(holder["fd"], LINE_79.encode()[:30])  # half a line: not a record yet
    assert promtext.total(page(collector), catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 0
    os.write(holder["fd"], LINE_79.encode()[30:])
    assert promtext.total(page(collector), catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 1
    os.close(holder["fd"])


def test_an_unreadable_kernel_log_costs_only_its_own_series_and_says_why_once(tmp_path, caplog):
    locked = tmp_path / "kmsg"
    locked.write_text(LINE_79)
    locked.chmod(0)
    if os.access(locked, os.R_OK):  # root reads anything: use a path that does not exist
        locked = tmp_path / "no-such-kmsg"
    counts = XidCounts()
    counts.record(0, "GPU-a", 13)  # an NVML event
    kmsg = KmsgXidSource(counts, GPUS, locked, retry_seconds=0)
    collector = XidCollector(counts, None, [(0, "GPU-a")], kmsg)
    with caplog.at_level("WARNING", logger="kvscope.export.xid"):
        samples = page(collector)
        page(collector)
        page(collector)
    assert promtext.total(samples, catalog.GPU_XID_SOURCE_UP.name, source=KERNEL_LOG) == 0
    assert promtext.total(samples, catalog.GPU_XID_ERRORS.name, gpu="0", xid="13") == 1  # the rest flows
    assert collector.healthy
    warnings = [r for r in caplog.records if str(locked) in r.getMessage()]
    assert len(warnings) == 1 and "cannot read" in warnings[0].getMessage()


def test_an_xid_seen_by_nvml_and_in_the_kernel_log_counts_once_and_a_burst_counts_each(tmp_path):
    now = [100.0]
    counts = XidCounts(clock=lambda: now[0])
    log_file = tmp_path / "kmsg"
    log_file.write_text("")
    collector = XidCollector(counts, None, [(1, "GPU-b")], KmsgXidSource(counts, GPUS, log_file))
    counts.record(1, "GPU-b", 79, "nvml")
    counts.record(1, "GPU-b", 79, "nvml")  # a burst: two events
    log_file.write_text(LINE_79 * 3)  # the kernel saw the two and one NVML missed
    assert promtext.total(page(collector), catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 3
    now[0] += 3600  # much later, the same code again from the kernel log alone: a new event
    with log_file.open("a") as f:
        f.write(LINE_79)
    assert promtext.total(page(collector), catalog.GPU_XID_ERRORS.name, gpu="1", xid="79") == 4
    assert counts.duplicates == 2


def test_pci_addresses_match_in_both_spellings():
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == (0, 0x3B, 0)
    assert pci_key("garbage") is None


def test_the_same_xid_repeated_within_its_window_escalates_the_action():
    now = [0.0]
    counts = XidCounts(clock=lambda: now[0])
    collector = XidCollector(counts, None, [(0, "GPU-a"), (1, "GPU-b")])

    def escalated(gpu, xid):
        return promtext.total(page(collector), catalog.GPU_XID_ESCALATED.name, gpu=gpu, xid=xid)

    assert escalated("0", "31") == 0  # served from the start, at 0, for alerts to see the rise
    for _ in range(2):
        counts.record(0, "GPU-a", 31)
        now[0] += 60
    assert escalated("0", "31") == 0  # twice in an hour: still the application's
    counts.record(0, "GPU-a", 31)
    assert escalated("0", "31") == 1 and escalated("1", "31") == 0
    labels = promtext.select(page(collector), catalog.GPU_XID_ESCALATED.name, gpu="0", xid="31")[0].labels
    assert labels["action"] == "run_diagnostics" and labels["window"] == "1h"
    now[0] += 2 * 3600  # the window passed
    assert escalated("0", "31") == 0
