"""The DCGM backend through fake bindings: watches the catalog's fields, serves them under the
same names and labels as every backend, skips blanks, fails with one clear line."""

import pytest

from exporter.collectors.dcgm import DcgmSource, DcgmUnavailable, load_bindings
from exporter.collectors.gpu import GpuCollector
from exporter.exposition import render
from kvscope import catalog, promtext
from tests.fakes.dcgm import FIELD_IDS, bindings


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
