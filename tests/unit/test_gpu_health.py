"""DCGM_EXP_GPU_HEALTH_STATUS{health_watch, health_error_code}: DCGM's health check where the
DCGM backend runs, derived from NVML's readings elsewhere, under dcgm-exporter's watch names and
DCGM_FR_* codes; a watch nothing was read for is left out, never a made-up PASS."""

from types import SimpleNamespace

from exporter.collectors.dcgm import DcgmSource
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.health import FAIL, PASS, WARN, HealthCollector
from exporter.collectors.nvml import NvmlSource
from exporter.collectors.xid import XidCounts
from exporter.exposition import render
from exporter.nvml_api import Nvml
from kvscope import catalog, promtext
from tests.fakes.dcgm import bindings, incident
from tests.fakes.nvml import fake_node


def nvml_node(fake, counts=None, clock=None, xids_watched=True):
    nvml = Nvml(fake)
    nvml.init()
    source = NvmlSource(nvml, counts)
    return source, HealthCollector(source, counts or XidCounts(), xids_watched=xids_watched, clock=clock)


def health(source, collector):
    source.read()
    samples = promtext.parse(render(collector.collect()).decode())
    return {
        (s.labels["gpu"], s.labels["health_watch"]): (s.value, s.labels["health_error_code"])
        for s in promtext.select(samples, catalog.DCGM_EXP_HEALTH.name)
    }


def quiet(fake):
    for gpu in fake.gpus:
        gpu.readings["nvmlDeviceGetCurrentClocksEventReasons"] = 0
    return fake


def test_a_healthy_gpu_passes_every_watch_nvml_can_judge_and_no_other():
    found = health(*nvml_node(quiet(fake_node(1))))
    watches = {w for _, w in found}
    assert watches == {"PCIE", "NVLINK", "MCU", "MEM", "THERMAL", "POWER", "DRIVER"}
    assert all(v == (PASS, "DCGM_FR_OK") for v in found.values())


def test_row_remap_failure_and_uncorrectable_ecc_fail_the_memory_watch():
    fake = quiet(fake_node(2))
    fake.gpus[1].readings["nvmlDeviceGetRemappedRows"] = (0, 1, False, True)
    found = health(*nvml_node(fake))
    assert found[("1", "MEM")] == (FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
    assert found[("0", "MEM")] == (PASS, "DCGM_FR_OK")
    fake.gpus[0].readings["nvmlDeviceGetTotalEccErrors"] = 2
    assert health(*nvml_node(fake))[("0", "MEM")] == (FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED")


def test_thermal_clock_events_warn_and_recent_xids_fail_their_watch():
    counts = XidCounts(clock=lambda: 1000.0)
    counts.record(0, "GPU-fake-0", 74)
    counts.record(0, "GPU-fake-0", 13)  # an application fault: not the GPU's health
    found = health(*nvml_node(fake_node(1), counts))  # default readings: sw thermal slowdown
    assert found[("0", "THERMAL")] == (WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
    assert found[("0", "NVLINK")] == (FAIL, "DCGM_FR_XID_ERROR")
    assert found[("0", "MCU")] == (PASS, "DCGM_FR_OK")


def test_a_gpu_that_fell_off_the_bus_fails_pcie_instead_of_vanishing():
    fake = quiet(fake_node(2))
    fake.gpus[1].lost = True
    found = health(*nvml_node(fake))
    assert found[("1", "PCIE")] == (FAIL, "DCGM_FR_NVML_API")
    assert ("1", "THERMAL") not in found  # nothing read: not judged


def test_pcie_replays_above_dcgms_rate_warn():
    fake, now = quiet(fake_node(1)), [0.0]
    source, collector = nvml_node(fake, clock=lambda: now[0])
    assert health(source, collector)[("0", "PCIE")] == (PASS, "DCGM_FR_OK")  # no rate yet
    fake.gpus[0].readings["nvmlDeviceGetPcieReplayCounter"] = 3 + 20
    now[0] = 60.0
    assert health(source, collector)[("0", "PCIE")] == (WARN, "DCGM_FR_PCI_REPLAY_RATE")


def test_without_xid_watching_the_xid_only_watches_are_absent_not_passed():
    found = health(*nvml_node(quiet(fake_node(1)), xids_watched=False))
    assert ("0", "NVLINK") not in found and ("0", "MCU") not in found and ("0", "DRIVER") not in found
    assert found[("0", "MEM")] == (PASS, "DCGM_FR_OK")


def test_mig_instances_get_no_health_series_of_their_own():
    found = health(*nvml_node(quiet(fake_node(1, mig={0: ["3g.40gb", "1g.10gb"]}))))
    assert {gpu for gpu, _ in found} == {"0"} and len(found) == 7


def test_dcgm_backend_serves_dcgms_health_check_for_every_watch():
    modules = bindings({0: {}, 1: {}}, incidents=[incident(1, "PCIE", WARN, "DCGM_FR_PCI_REPLAY_RATE")])
    source = DcgmSource(modules)
    assert modules["_watched"]["health"] == 0xFFFFFFFF  # dcgmHealthSet(ALL)
    list(GpuCollector(source).collect())
    found = health(source, HealthCollector(source, XidCounts()))
    assert found[("1", "PCIE")] == (WARN, "DCGM_FR_PCI_REPLAY_RATE")
    assert found[("0", "PCIE")] == (PASS, "DCGM_FR_OK")
    assert {w for g, w in found if g == "0"} == {
        "PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER",
    }  # fmt: skip


def test_dcgm_without_health_watches_falls_back_to_the_readings():
    source = DcgmSource(bindings({0: {112: 0.0}}))  # clock events read, no health watches
    found = health(source, HealthCollector(source, XidCounts(), xids_watched=False))
    assert found == {("0", "THERMAL"): (PASS, "DCGM_FR_OK"), ("0", "POWER"): (PASS, "DCGM_FR_OK")}


def test_health_series_carry_the_chosen_host_label():
    source, _ = nvml_node(quiet(fake_node(1)))
    source.read()
    collector = HealthCollector(source, XidCounts(), host_label="Hostname")
    sample = promtext.select(promtext.parse(render(collector.collect()).decode()), catalog.DCGM_EXP_HEALTH.name)[0]
    assert "Hostname" in sample.labels and "hostname" not in sample.labels
    assert SimpleNamespace(**sample.labels).UUID == "GPU-fake-0"
