"""The DCGM backend through fake bindings: watches the catalog's fields, serves them under the
same names and labels as every backend, skips blanks, fails with one clear line; topology from
DCGM, else NVML alongside, else none with the reason."""

import pytest

from exporter.collectors.dcgm import DcgmSource, DcgmUnavailable, load_bindings
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.topology import TopologyCollector
from exporter.exposition import render
from exporter.nvml_api import Nvml
from kvscope import catalog, promtext
from tests.fakes.dcgm import FIELD_IDS, TOPOLOGY_NVLINK1, TOPOLOGY_SINGLE, TOPOLOGY_SYSTEM, bindings
from tests.fakes.nvml import fake_node


def test_watches_every_catalog_field_the_installed_dcgm_knows():
    modules = bindings({0: {}})
    DcgmSource(modules, update_seconds=2.0)
    assert sorted(modules["_watched"]["fields"]) == sorted(FIELD_IDS.values())
    assert modules["_watched"]["freq"] == 2_000_000


def test_values_are_served_under_dcgm_names_and_blanks_are_absent():
    latest = {
        0: {203: 55.0, 252: 70000.0, 150: None, 112: 4.0, 237: 5.0, 238: 16.0},
        1: {203: 10.0, 252: 500.0, 150: 40.0},
    }
    page = render(GpuCollector(DcgmSource(bindings(latest))).collect()).decode()
    samples = promtext.parse(page)
    assert promtext.total(samples, catalog.DCGM_GPU_UTIL.name, gpu="0", modelName="NVIDIA H200") == 55
    assert promtext.total(samples, catalog.DCGM_FB_USED.name, gpu="1") == 500
    temps = {s.labels["gpu"] for s in promtext.select(samples, catalog.DCGM_GPU_TEMP.name)}
    assert temps == {"1"}  # GPU 0's temperature was blank
    power_cap = promtext.select(samples, catalog.GPU_CLOCK_EVENT_ACTIVE.name, gpu="0", reason="sw_power_cap")
    assert power_cap[0].value == 1
    assert promtext.total(samples, catalog.GPU_BACKEND_INFO.name, backend="dcgm") == 1


def test_host_engine_down_is_one_clear_error():
    with pytest.raises(DcgmUnavailable, match="DCGM unavailable: connection refused"):
        DcgmSource(bindings({}, fail="connection refused"))


def test_missing_bindings_name_where_they_were_looked_for(tmp_path):
    with pytest.raises(DcgmUnavailable, match=str(tmp_path)):
        load_bindings(str(tmp_path))


def _levels(source):
    samples = promtext.parse(render(TopologyCollector(source).collect()).decode())
    return {
        (s.labels["gpu"], s.labels["peer_gpu"]): s.labels["level"]
        for s in promtext.select(samples, catalog.GPU_TOPOLOGY_LEVEL.name)
    }


def test_topology_comes_from_dcgms_own_topology_call():
    topology = {(0, 1): TOPOLOGY_NVLINK1 | TOPOLOGY_SINGLE, (0, 2): TOPOLOGY_SYSTEM, (1, 2): TOPOLOGY_SYSTEM}
    levels = _levels(DcgmSource(bindings({0: {}, 1: {}, 2: {}}, topology=topology)))
    assert levels[("0", "1")] == "nvlink" and levels[("1", "0")] == "nvlink"
    assert levels[("0", "2")] == "system" and levels[("2", "1")] == "system"


def test_topology_falls_back_to_nvml_alongside_matched_by_uuid():
    fake = fake_node(2)
    for i, gpu in enumerate(fake.gpus):
        gpu.uuid = f"GPU-dcgm-{i}"  # the same GPUs DCGM sees
    fake.topology = {(0, 1): 50}
    nvml = Nvml(fake)
    nvml.init()
    assert _levels(DcgmSource(bindings({0: {}, 1: {}}), nvml=nvml))[("0", "1")] == "system"


def test_without_dcgm_topology_or_nvml_topology_is_absent_with_the_reason(caplog):
    source = DcgmSource(bindings({0: {}, 1: {}}))
    with caplog.at_level("WARNING", logger="kvscope.export.dcgm"):
        assert _levels(source) == {}
    assert "dcgmGetDeviceTopology" in source.topology_reason and "NVML" in source.topology_reason
    assert any("topology unavailable" in r.getMessage() for r in caplog.records)
