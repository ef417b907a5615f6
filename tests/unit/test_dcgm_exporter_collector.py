"""An existing dcgm-exporter ingested: names kept exactly, DCGM's sentinels dropped."""

import pytest

from exporter.collectors.dcgm_exporter import DcgmExporterCollector
from exporter.exposition import render
from kvscope import catalog, promtext
from tests.fakes.pages import PageServer

LABELS = 'gpu="0",UUID="GPU-1",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'
PAGE = f"""# HELP {catalog.DCGM_PCIE_REPLAY.name} PCIe replays.
# TYPE {catalog.DCGM_PCIE_REPLAY.name} counter
{catalog.DCGM_PCIE_REPLAY.name}{{{LABELS}}} 12
# HELP {catalog.DCGM_GPU_UTIL.name} util
# TYPE {catalog.DCGM_GPU_UTIL.name} gauge
{catalog.DCGM_GPU_UTIL.name}{{{LABELS}}} 91
# HELP {catalog.DCGM_FB_RESERVED.name} reserved
# TYPE {catalog.DCGM_FB_RESERVED.name} gauge
{catalog.DCGM_FB_RESERVED.name}{{{LABELS}}} 9223372036854775794
"""


def test_dcgm_exporter_series_pass_through_by_name_and_sentinels_are_dropped():
    server = PageServer(PAGE)
    try:
        page = render(DcgmExporterCollector(server.url).collect()).decode()
    finally:
        server.close()
    samples = promtext.parse(page)
    assert promtext.total(samples, catalog.DCGM_PCIE_REPLAY.name, gpu="0") == 12
    assert f"# TYPE {catalog.DCGM_PCIE_REPLAY.name} counter" in page
    assert promtext.total(samples, catalog.DCGM_GPU_UTIL.name, Hostname="n1") == 91
    assert not promtext.select(samples, catalog.DCGM_FB_RESERVED.name)  # "not supported", not a value
    assert promtext.total(samples, catalog.TARGET_UP.name) == 1


def test_beside_a_local_backend_each_gpus_series_is_served_once_dcgm_exporter_winning():
    from exporter.collectors.gpu import GpuCollector
    from exporter.collectors.nvml import NvmlSource
    from exporter.nvml_api import Nvml
    from exporter.registry import Exporter
    from tests.fakes.nvml import fake_node

    fake = fake_node(2)
    fake.gpus[0].uuid = "GPU-1"  # dcgm-exporter serves GPU 0 (UUID GPU-1); GPU 1 only the local backend
    nvml = Nvml(fake)
    nvml.init()
    server = PageServer(PAGE)
    try:
        remote = DcgmExporterCollector(server.url)
        exporter = Exporter([remote, GpuCollector(NvmlSource(nvml), served=remote.served)], interval=0)
        samples = promtext.parse(exporter.page().decode())
        util = promtext.select(samples, catalog.DCGM_GPU_UTIL.name)
        assert sorted((s.labels["UUID"], s.value) for s in util) == [("GPU-1", 91), ("GPU-fake-1", 87)]
        # what dcgm-exporter does not serve for that GPU still comes from the local backend
        assert {s.labels["UUID"] for s in promtext.select(samples, catalog.DCGM_GPU_TEMP.name)} == {
            "GPU-1",
            "GPU-fake-1",
        }
        assert promtext.select(samples, catalog.GPU_CLOCK_EVENT_ACTIVE.name, UUID="GPU-1")  # kvscope extras too
        server.close()
        samples = promtext.parse(exporter.page().decode())  # dcgm-exporter went away: local serves all
        assert {s.labels["UUID"] for s in promtext.select(samples, catalog.DCGM_GPU_UTIL.name)} == {
            "GPU-1",
            "GPU-fake-1",
        }
    finally:
        server.close()


def test_beside_a_49_dcgm_exporter_a_renamed_measurement_is_still_served_once():
    # dcgm-exporter 4.9 writes utilisation as DCGM_FI_DEV_GPU_UTIL_RATIO: the local backend's
    # DCGM_FI_DEV_GPU_UTIL for that GPU is the same measurement and is left to it
    from exporter.collectors.gpu import GpuCollector
    from exporter.collectors.nvml import NvmlSource
    from exporter.nvml_api import Nvml
    from exporter.registry import Exporter
    from tests.fakes.dcgm_shapes import reshape_page
    from tests.fakes.nvml import fake_node

    fake = fake_node(2)
    fake.gpus[0].uuid = "GPU-1"
    nvml = Nvml(fake)
    nvml.init()
    server = PageServer(reshape_page(PAGE, "4.9"))
    try:
        remote = DcgmExporterCollector(server.url)
        exporter = Exporter([remote, GpuCollector(NvmlSource(nvml), served=remote.served)], interval=0)
        samples = promtext.parse(exporter.page().decode())
        ratio = promtext.select(samples, "DCGM_FI_DEV_GPU_UTIL_RATIO")
        assert [(s.labels["UUID"], s.value) for s in ratio] == [("GPU-1", 0.91)]
        util = promtext.select(samples, catalog.DCGM_GPU_UTIL.name)
        assert [s.labels["UUID"] for s in util] == ["GPU-fake-1"]  # GPU-1's is dcgm-exporter's, once
    finally:
        server.close()


def test_the_local_backend_writes_49s_names_in_their_units_when_asked():
    from exporter.collectors.gpu import GpuCollector
    from exporter.collectors.nvml import NvmlSource
    from exporter.nvml_api import Nvml
    from exporter.registry import Exporter
    from tests.fakes.nvml import fake_node

    def page(shape: str) -> list:
        nvml = Nvml(fake_node(1))
        nvml.init()
        return promtext.parse(Exporter([GpuCollector(NvmlSource(nvml), shape=shape)], interval=0).page().decode())

    old, new = page("4.8"), page("4.9")
    mhz = promtext.total(old, catalog.DCGM_SM_CLOCK.name)
    assert promtext.total(new, "DCGM_FI_DEV_SM_CLOCK_HERTZ") == pytest.approx(mhz * 1e6)
    assert not promtext.select(new, catalog.DCGM_SM_CLOCK.name)
    mib = promtext.total(old, catalog.DCGM_FB_USED.name)
    assert promtext.total(new, "DCGM_FI_DEV_FB_USED_BYTES") == pytest.approx(mib * (1 << 20))
    assert promtext.total(new, "DCGM_FI_DEV_GPU_TEMP_CELSIUS") == promtext.total(old, catalog.DCGM_GPU_TEMP.name)
