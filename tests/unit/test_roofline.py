"""Each GPU's roofline on the exporter's page, from the GPU model table and kvscope.yaml."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.collectors.emulated import EmulatedSource
from exporter.collectors.roofline import RooflineCollector
from exporter.collectors.xid import XidCounts
from exporter.exposition import render
from kvscope import catalog, promtext
from kvscope.gpu_models import DEFAULT_MODELS, GpuModels


def _page(source: EmulatedSource, models: GpuModels = DEFAULT_MODELS) -> list[promtext.Sample]:
    source.read()
    return promtext.parse(render(list(RooflineCollector(source, models).collect())).decode())


def test_each_gpu_carries_its_models_peak_and_bandwidth():
    samples = _page(EmulatedSource(2, "H200", lambda: {}, XidCounts(), clock=lambda: 0.0))
    peaks = promtext.select(samples, catalog.GPU_PEAK_FLOPS.name)
    assert sorted(s.labels["gpu"] for s in peaks) == ["0", "1"]
    assert peaks[0].value == pytest.approx(989.4e12)
    (bandwidth,) = promtext.select(samples, catalog.GPU_MEMORY_BANDWIDTH.name, gpu="1")
    assert bandwidth.value == pytest.approx(4.8e12)
    assert DEFAULT_MODELS["H200"].ridge_flops_per_byte == pytest.approx(989.4e12 / 4.8e12)


def test_a_fleets_override_moves_the_roofline_and_an_unknown_figure_is_left_out():
    models = GpuModels({"H100": {"peak_tflops": 800.0, "memory_gbps": None}})
    samples = _page(EmulatedSource(1, "H100", lambda: {}, XidCounts(), clock=lambda: 0.0), models)
    assert promtext.select(samples, catalog.GPU_PEAK_FLOPS.name)[0].value == pytest.approx(800e12)
    assert promtext.select(samples, catalog.GPU_MEMORY_BANDWIDTH.name)[0].value == pytest.approx(3.35e12)
    unknown = GpuModels()
    unknown.table["H100"] = replace(unknown.table["H100"], peak_tflops=None)  # a board without a datasheet figure
    samples = _page(EmulatedSource(1, "H100", lambda: {}, XidCounts(), clock=lambda: 0.0), unknown)
    assert not promtext.select(samples, catalog.GPU_PEAK_FLOPS.name)


def test_mig_slices_carry_no_roofline_of_the_whole_card():
    source = EmulatedSource(1, "H100", lambda: {}, XidCounts(), clock=lambda: 0.0, mig="3g.40gb,1g.10gb")
    samples = _page(source)
    assert all("GPU_I_ID" not in s.labels for s in samples)
