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


def scrape(fake, **collector) -> list[promtext.Sample]:
    nvml = Nvml(fake)
    nvml.init()
    return promtext.parse(render(GpuCollector(NvmlSource(nvml), **collector).collect()).decode())


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
    assert sample.labels["pci_bus_id"] == "00000000:18:00.0" and sample.labels["hostname"]
    assert "emulated" not in sample.labels and "Hostname" not in sample.labels


def test_dcgm_labels_come_in_dcgm_exporters_order_with_the_current_host_spelling():
    page = render(GpuCollector(NvmlSource(_nvml(fake_node(1)))).collect()).decode()
    line = next(x for x in page.splitlines() if x.startswith(catalog.DCGM_GPU_TEMP.name + "{"))
    names = [pair.split("=")[0] for pair in line[line.index("{") + 1 : line.index("}")].split(",")]
    assert names == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"]


@pytest.mark.parametrize(
    ("spelling", "present", "absent"), [("Hostname", "Hostname", "hostname"), ("", None, "hostname")]
)
def test_the_host_label_spelling_is_chosen_or_left_out(spelling, present, absent):
    sample = promtext.select(scrape(fake_node(1), host_label=spelling), catalog.DCGM_GPU_TEMP.name)[0]
    assert absent not in sample.labels
    assert present is None or sample.labels[present]
    assert "Hostname" not in sample.labels or spelling == "Hostname"


def _nvml(fake):
    nvml = Nvml(fake)
    nvml.init()
    return nvml


def test_mig_instances_are_devices_of_their_own_with_dcgm_exporters_labels():
    samples = scrape(fake_node(2, mig={0: ["3g.40gb", "1g.10gb"]}))
    used = promtext.select(samples, catalog.DCGM_FB_USED.name, gpu="0")
    by_instance = {s.labels.get("GPU_I_ID"): s for s in used}
    assert set(by_instance) == {None, "1", "2"}  # the GPU itself and its two instances
    small = by_instance["2"].labels
    assert small["GPU_I_PROFILE"] == "1g.10gb" and by_instance["1"].labels["GPU_I_PROFILE"] == "3g.40gb"
    # the parent's identity, as dcgm-exporter writes it: gpu = parent index, UUID = parent UUID
    assert (small["gpu"], small["UUID"], small["device"]) == ("0", "GPU-fake-0", "nvidia0")
    assert by_instance["2"].value == 5 * 1024  # the instance's own memory, in MiB
    names = list(small)
    assert names.index("modelName") < names.index("GPU_I_PROFILE") < names.index("GPU_I_ID") < names.index("hostname")


def test_mig_has_no_utilisation_and_instances_carry_no_device_level_readings():
    fake = fake_node(2, mig={0: ["3g.40gb", "1g.10gb"]})
    fake.gpus[0].answers_under_mig.add("nvmlDeviceGetUtilizationRates")  # a driver that answers anyway
    samples = scrape(fake)
    assert {s.labels["gpu"] for s in promtext.select(samples, catalog.DCGM_GPU_UTIL.name)} == {"1"}
    assert not promtext.select(samples, catalog.DCGM_MEM_COPY_UTIL.name, gpu="0")
    temps = promtext.select(samples, catalog.DCGM_GPU_TEMP.name, gpu="0")
    assert len(temps) == 1 and "GPU_I_ID" not in temps[0].labels  # served once, on the GPU


def test_mig_processes_belong_to_their_instance():
    nvml = _nvml(fake_node(1, mig={0: ["3g.40gb", "1g.10gb"]}))
    source = NvmlSource(nvml)
    source.read()
    samples = promtext.parse(render(ProcessCollector(source).collect()).decode())
    assert {s.labels["pid"] for s in promtext.select(samples, catalog.GPU_PROCESS_INFO.name)} == {"5000", "5001"}


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
