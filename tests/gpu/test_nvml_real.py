"""The real NVML backend on a real NVIDIA GPU (skipped without one; see tests/gpu/conftest.py).

Run on the device machine with `make test-gpu` (or pytest tests/gpu). What a GPU does not
support (PCIe throughput under virtualisation, say) must be absent, never invented; these
tests check what is there is plausible and what is absent is absent for a reason NVML gave.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from exporter.collectors.gpu import GpuCollector
from exporter.collectors.nvml import NvmlSource
from exporter.collectors.process import ProcessCollector
from exporter.collectors.topology import TopologyCollector
from exporter.collectors.xid import XidCollector, XidCounts, XidWatcher
from exporter.exposition import render
from exporter.nvml_api import Nvml
from kvscope import catalog, promtext
from serving.hardware import detect
from tests.waiting import eventually


@pytest.fixture(scope="module")
def nvml():
    session = Nvml()
    session.init()
    yield session
    session.shutdown()


def scrape(*collectors) -> list[promtext.Sample]:
    return promtext.parse(render(f for c in collectors for f in c.collect()).decode())


def test_hardware_detection_sees_the_gpu_and_its_capabilities():
    hardware = detect()
    assert hardware.has_gpu and hardware.driver_version
    gpu = hardware.gpus[0]
    print(f"\nGPU 0: {gpu.name}, {gpu.memory_bytes / 2**30:.1f} GiB, compute capability {gpu.compute_capability}")
    assert gpu.memory_bytes > 8 << 30
    if gpu.compute_capability >= (8, 9):
        assert hardware.supports_fp8_kv


def test_tuned_profile_on_this_gpu(nvml):
    from serving.profiles import profile_settings

    hardware = detect()
    settings = {s.dest: s.value for s in profile_settings("tuned", hardware, 32768, None)}
    print(f"\ntuned profile here: {settings}")
    assert settings["gpu_memory_utilization"] == 0.88
    if hardware.gpus[0].compute_capability >= (9, 0):
        assert settings["max_num_batched_tokens"] == 8192 and settings["kv_cache_dtype"] == "fp8"


def test_gpu_series_under_dcgm_names_with_plausible_values(nvml):
    samples = scrape(GpuCollector(NvmlSource(nvml)))
    names = sorted({s.name for s in samples})
    print(f"\nseries served: {names}")
    used = promtext.select(samples, catalog.DCGM_FB_USED.name, gpu="0")[0]
    free = promtext.total(samples, catalog.DCGM_FB_FREE.name, gpu="0")
    total_mib = detect().gpus[0].memory_bytes / 2**20
    reserved = promtext.total(samples, catalog.DCGM_FB_RESERVED.name, gpu="0")
    assert abs(used.value + free + reserved - total_mib) / total_mib < 0.02
    assert used.labels["modelName"] == detect().gpus[0].name and used.labels["UUID"].startswith("GPU-")
    assert used.labels["device"] == "nvidia0" and used.labels["pci_bus_id"]
    temp = promtext.select(samples, catalog.DCGM_GPU_TEMP.name)
    assert not temp or 5 < temp[0].value < 110
    power = promtext.select(samples, catalog.DCGM_POWER_USAGE.name)
    assert not power or 10 < power[0].value < 1500
    clocks = promtext.select(samples, catalog.DCGM_SM_CLOCK.name)
    assert clocks and 100 < clocks[0].value < 4000
    gen = promtext.select(samples, catalog.DCGM_PCIE_LINK_GEN.name)
    assert not gen or 1 <= gen[0].value <= 6
    width = promtext.select(samples, catalog.DCGM_PCIE_LINK_WIDTH.name)
    assert not width or width[0].value in (1, 2, 4, 8, 16, 32)
    assert promtext.total(samples, catalog.GPU_BACKEND_INFO.name, backend="nvml") == 1


def test_readings_an_environment_does_not_support_are_absent_not_zero(nvml):
    reading = nvml.reading(0)
    missing = [k for k, v in vars(reading).items() if v is None]
    print(f"\nnot available here: {missing}")
    samples = scrape(GpuCollector(NvmlSource(nvml)))
    if reading.pcie_tx_bytes is None:
        assert not promtext.select(samples, catalog.DCGM_PCIE_TX_BYTES.name)
    if reading.energy_mj is None:
        assert not promtext.select(samples, catalog.DCGM_TOTAL_ENERGY.name)


def test_xid_watcher_runs_on_real_nvml_and_counts_nothing_on_a_healthy_gpu(nvml):
    counts = XidCounts()
    source = NvmlSource(nvml, counts)
    watcher = XidWatcher(nvml, counts, [i.uuid for i in source.identities], timeout_ms=200, backoff=(0.2, 1.0))
    watcher.start()
    eventually(lambda: watcher.healthy or watcher.last_error, timeout=30, what="the watcher running or failing")
    watcher.stop()
    watcher.join(5)
    print(f"\nXID watcher: healthy={watcher.healthy} restarts={watcher.restarts} last_error={watcher.last_error!r}")
    assert not watcher.is_alive()
    assert watcher.healthy or watcher.last_error  # either watching, or says why it cannot
    assert counts.counts == {}
    samples = scrape(XidCollector(counts, watcher, [(i.index, i.uuid) for i in source.identities]))
    assert promtext.total(samples, catalog.GPU_XID_ERRORS.name, xid="79") == 0


def test_a_process_using_the_gpu_is_reported_with_its_memory(nvml):
    code = (
        "import torch, time; x = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); "
        "print('ready', flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        source = NvmlSource(nvml)
        deadline = time.monotonic() + 30
        pids: dict[int, int | None] = {}
        while time.monotonic() < deadline and child.pid not in pids:
            source.read()
            pids = {pid: used for _, reading in source.last() for pid, used in reading.processes}
            time.sleep(0.5)
        print(f"\nNVML compute processes: {pids} (child {child.pid}, own {os.getpid()})")
        if not pids:
            pytest.skip("NVML lists no compute processes in this environment (containerised PID namespace)")
        samples = scrape(ProcessCollector(source))
        info = promtext.select(samples, catalog.GPU_PROCESS_INFO.name)
        assert info and all(s.labels["gpu"] == "0" for s in info)
        if child.pid in pids and pids[child.pid] is not None:
            assert pids[child.pid] >= 1 << 30
    finally:
        child.kill()
        child.wait(10)


def test_topology_and_numa_on_this_node(nvml):
    source = NvmlSource(nvml)
    source.read()
    samples = scrape(TopologyCollector(source), GpuCollector(source))
    pairs = promtext.select(samples, catalog.GPU_TOPOLOGY_LEVEL.name)
    print(
        f"\n{nvml.count} GPU(s); pairs: {[(s.labels['gpu'], s.labels['peer_gpu'], s.labels['level']) for s in pairs]}; "
        f"NUMA: {[s.value for s in promtext.select(samples, catalog.GPU_NUMA_NODE.name)]}"
    )
    assert len(pairs) == nvml.count * (nvml.count - 1)


def test_export_once_with_the_nvml_backend():
    result = subprocess.run(
        [sys.executable, "-m", "kvscope.cli", "export", "--gpu", "nvml", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    samples = promtext.parse(result.stdout)
    assert promtext.select(samples, catalog.DCGM_GPU_UTIL.name, gpu="0")
    assert promtext.total(samples, catalog.EXPORTER_COLLECTOR_SUCCESS.name, collector="nvml") == 1
    print("\n" + "\n".join(line for line in result.stdout.splitlines() if line.startswith("kvscope_exporter")))
