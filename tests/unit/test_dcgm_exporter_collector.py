"""An existing dcgm-exporter ingested: names kept exactly, DCGM's sentinels dropped."""

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
