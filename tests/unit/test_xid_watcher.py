"""XID events are counted one by one; timeouts are quiet; NVML errors restart with backoff."""

import time

from exporter.collectors.xid import XidCollector, XidCounts, XidWatcher
from exporter.exposition import render
from exporter.nvml_api import Nvml
from kvscope import catalog, promtext
from tests.fakes.nvml import fake_node


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
