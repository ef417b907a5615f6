"""The NVML backend through a fake pynvml: dcgm-exporter names and units, absent when not
supported, nothing for a GPU that fell off the bus, one clear error without a driver."""

import pytest

from exporter.collectors.gpu import GpuCollector
from exporter.collectors.nvml import NvmlSource
from exporter.collectors.process import ProcessCollector
from exporter.collectors.topology import TopologyCollector
from exporter.exposition import render
from exporter.nvml_api import Nvml, NvmlUnavailable
from kvscope import catalog, promtext
from tests.fakes.nvml import fake_node


def scrape(fake) -> list[promtext.Sample]:
    nvml = Nvml(fake)
    nvml.init()
    return promtext.parse(render(GpuCollector(NvmlSource(nvml)).collect()).decode())


def value(samples, signal, **labels):
    found = promtext.select(samples, signal.name, **labels)
    assert len(found) == 1, (signal.name, labels, found)
    return found[0].value


def test_readings_are_served_under_dcgm_exporter_names_and_units():
    samples = scrape(fake_node(1))
    assert value(samples, catalog.DCGM_GPU_UTIL, gpu="0") == 87
    assert value(samples, catalog.DCGM_FB_USED, gpu="0") == 72 * 1024  # MiB
    assert value(samples, catalog.DCGM_FB_FREE, gpu="0") == 7 * 1024
    assert value(samples, catalog.DCGM_POWER_USAGE, gpu="0") == 612.5  # W from mW
    assert value(samples, catalog.DCGM_PCIE_TX_BYTES, gpu="0") == 1_000_000 * 1024  # B/s from KB/s
    assert value(samples, catalog.DCGM_SM_CLOCK, gpu="0") == 1980
    assert value(samples, catalog.DCGM_PCIE_LINK_GEN, gpu="0") == 5


def test_series_carry_dcgm_exporter_labels():
    sample = promtext.select(scrape(fake_node(1)), catalog.DCGM_GPU_TEMP.name)[0]
    assert sample.labels["gpu"] == "0" and sample.labels["UUID"] == "GPU-fake-0"
    assert sample.labels["device"] == "nvidia0" and sample.labels["modelName"].startswith("NVIDIA H100")
    assert sample.labels["pci_bus_id"] == "00000000:18:00.0" and sample.labels["Hostname"]
    assert "emulated" not in sample.labels


def test_clock_event_bits_are_decoded_and_pcie_capacity_is_derived():
    samples = scrape(fake_node(1))
    active = {s.labels["reason"] for s in promtext.select(samples, catalog.GPU_CLOCK_EVENT_ACTIVE.name) if s.value == 1}
    assert active == {"sw_power_cap", "sw_thermal_slowdown"}
    assert value(samples, catalog.GPU_PCIE_LINK_CAPACITY, gpu="0") == pytest.approx(3938e6 * 16)


def test_not_supported_readings_are_absent_not_invented():
    fake = fake_node(1)
    fake.gpus[0].unsupported |= {
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetPcieThroughput",
    }
    samples = scrape(fake)
    for signal in (
        catalog.DCGM_TOTAL_ENERGY,
        catalog.DCGM_ROW_REMAP_FAILURE,
        catalog.DCGM_PCIE_TX_BYTES,
    ):
        assert not promtext.select(samples, signal.name), signal.name
    assert value(samples, catalog.DCGM_GPU_UTIL, gpu="0") == 87  # the rest still flows


def test_a_gpu_that_fell_off_the_bus_stops_reporting_and_the_others_do_not():
    fake = fake_node(2)
    fake.gpus[1].lost = True
    samples = scrape(fake)
    gpus = {s.labels["gpu"] for s in promtext.select(samples, catalog.DCGM_GPU_UTIL.name)}
    assert gpus == {"0"}


def test_no_driver_is_one_clear_error():
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        Nvml(fake_node(1, init_error="NVMLError_LibraryNotFound")).init()


def test_dcgm_counters_keep_their_names_without_total():
    fake = fake_node(1)
    nvml = Nvml(fake)
    nvml.init()
    page = render(GpuCollector(NvmlSource(nvml)).collect()).decode()
    assert f"# TYPE {catalog.DCGM_PCIE_REPLAY.name} counter" in page
    assert f"\n{catalog.DCGM_PCIE_REPLAY.name}{{" in page
    assert catalog.DCGM_PCIE_REPLAY.name + "_total" not in page


def test_topology_names_each_pair_and_nvlink_wins():
    fake = fake_node(3)
    fake.topology = {(0, 1): 10, (0, 2): 50, (1, 2): 50}
    fake.nvlink = {(0, 1)}
    nvml = Nvml(fake)
    nvml.init()
    samples = promtext.parse(render(TopologyCollector(NvmlSource(nvml)).collect()).decode())
    levels = {
        (s.labels["gpu"], s.labels["peer_gpu"]): s.labels["level"]
        for s in promtext.select(samples, catalog.GPU_TOPOLOGY_LEVEL.name)
    }
    assert levels[("0", "1")] == "nvlink" and levels[("1", "0")] == "nvlink"
    assert levels[("0", "2")] == "system"


def test_processes_are_joinable_on_gpu_and_pid():
    nvml = Nvml(fake_node(1))
    nvml.init()
    source = NvmlSource(nvml)
    source.read()
    samples = promtext.parse(render(ProcessCollector(source).collect()).decode())
    info = promtext.select(samples, catalog.GPU_PROCESS_INFO.name)[0]
    assert info.labels["gpu"] == "0" and info.labels["pid"] == "4242"
    assert value(samples, catalog.GPU_PROCESS_MEMORY, pid="4242") == 70 << 30
