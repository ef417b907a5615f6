"""Every page of tests/data/real-pages diagnosed (as two scrapes of the same page) without a crash,
with the verdict a GPU engineer would give; a broken page costs only its own lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.measures import MEASURES
from diagnosis.sources.scrape import ScrapeSource, compute
from diagnosis.verdict import diagnose
from kvscope import promtext
from tests.fakes.dcgm_shapes import reshape

REAL = Path(__file__).resolve().parents[1] / "data" / "real-pages"  # SOURCES.md: where each comes from

# page -> the verdict: idle GPUs are a cost finding; the T4 at its cap is throttled
VERDICTS = {
    "dcgm-a100-10c-vgpu-vks-2.prom": "gpu_underutilized",
    "dcgm-a100-40c-vgpu-vks-1.prom": "gpu_underutilized",
    "dcgm-l4-kops-1.prom": "gpu_underutilized",
    "dcgm-l40s-upcloud-1.prom": "gpu_underutilized",
    "dcgm-l40s-viettel-redacted-1.prom": "healthy",  # 2 of 20 lines readable: SM clocks at idle
    "dcgm-readme-blank-sentinel-1.prom": "healthy",
    "dcgm-rtx4000ada-linode-1.prom": "gpu_underutilized",
    "dcgm-t4-ericsson-1.prom": "thermal_power_throttling",
    "dcgm-t4-rafay-1.prom": "gpu_underutilized",
    "vllm-kops-qwen25-05b-1.prom": "healthy",
}


def _diagnose(*names: str, shape: str = "4.8"):
    samples = []
    for name in names:
        read, _ = promtext.parse_lenient((REAL / name).read_text())
        samples += [promtext.Sample(s.name, {"instance": name, **s.labels}, s.value) for s in reshape(read, shape)]
    return diagnose(compute(MEASURES, [(0.0, samples), (60.0, samples)], "pages"), 0, 60, "pages")


def _what_it_said(result) -> tuple:
    """What must not change with the exporter's field names: verdict, incidents, evidence values."""
    incidents = [
        (i.id, i.severity, tuple(i.scopes), i.summary, tuple(sorted(map(str, i.affected)))) for i in result.incidents
    ]
    evidence = sorted((f.id, e.measure, round(e.value, 6)) for f in result.findings for e in f.evidence)
    return result.bottleneck, result.exit_code, incidents, evidence


@pytest.mark.parametrize("shape", ["4.9", "4.10"])
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_a_page_in_dcgm_exporter_49_and_410_names_reads_as_it_did_in_48s(name, shape):
    # 4.9.0 renamed 23 default fields and changed 11 units (Hz, bytes, J, ratios); 4.10.0 the PCIe rates
    assert _what_it_said(_diagnose(name, shape=shape)) == _what_it_said(_diagnose(name))


def test_the_renamed_page_really_is_in_the_new_names():
    read, _ = promtext.parse_lenient((REAL / "dcgm-t4-ericsson-1.prom").read_text())
    names = {s.name for s in reshape(read, "4.9")}
    assert "DCGM_FI_DEV_SM_CLOCK_HERTZ" in names and "DCGM_FI_DEV_SM_CLOCK" not in names
    assert "DCGM_FI_DEV_GPU_UTIL_RATIO" in names and "DCGM_FI_DEV_GPU_UTIL" not in names
    clock = next(s for s in reshape(read, "4.9") if s.name == "DCGM_FI_DEV_SM_CLOCK_HERTZ")
    assert clock.value == 660e6  # Hz, where 4.8 wrote 660 (MHz)


def test_a_fleet_mid_upgrade_reads_as_one_fleet():
    # the T4 at its cap on 4.9, the idle L4 still on 4.8: both GPUs, each judged as before
    old = _diagnose("dcgm-t4-ericsson-1.prom", "dcgm-l4-kops-1.prom")
    mixed = []
    for name, shape in (("dcgm-t4-ericsson-1.prom", "4.9"), ("dcgm-l4-kops-1.prom", "4.8")):
        read, _ = promtext.parse_lenient((REAL / name).read_text())
        mixed += [promtext.Sample(s.name, {"instance": name, **s.labels}, s.value) for s in reshape(read, shape)]
    result = diagnose(compute(MEASURES, [(0.0, mixed), (60.0, mixed)], "pages"), 0, 60, "pages")
    assert _what_it_said(result) == _what_it_said(old)
    assert {i.id for i in result.incidents} >= {"thermal_power_throttling", "gpu_underutilized"}


def test_every_page_is_in_the_table():
    assert sorted(p.name for p in REAL.glob("*.prom")) == sorted(VERDICTS)


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_each_real_page_gets_the_verdict_an_engineer_would_give(name):
    assert _diagnose(name).bottleneck == VERDICTS[name]


def test_the_t4_at_its_power_cap_is_throttled_on_default_counters():
    result = _diagnose("dcgm-t4-ericsson-1.prom")
    incident = result.incidents[0]
    assert "68.2 W of 70 W" in incident.summary and "660 MHz vs maximum 1590 MHz" in incident.summary
    assert [a.get("Hostname") for a in incident.affected] == ["cp-bm14r7"]


def test_dcgm_blank_sentinels_are_never_values():
    read, _ = promtext.parse_lenient((REAL / "dcgm-readme-blank-sentinel-1.prom").read_text())
    assert any(s.value >= 1e15 for s in read)  # MEMORY_TEMP reads DCGM's blank
    samples = [promtext.Sample(s.name, {"instance": "p", **s.labels}, s.value) for s in read]
    measured = compute(MEASURES, [(0.0, samples), (60.0, samples)], "page")
    assert all(v.value < 1e15 for values in measured.values.values() for v in values)
    hot = [
        promtext.Sample("DCGM_FI_DEV_GPU_TEMP", {"instance": "p", "gpu": "0", "Hostname": "n"}, 9223372036854775794.0)
    ]
    blank = compute(MEASURES, [(0.0, hot), (60.0, hot)], "page")
    assert not blank.has("temp_max") and any("DCGM blank sentinel" in note for note in blank.notes)
    assert _diagnose("dcgm-readme-blank-sentinel-1.prom").bottleneck == "healthy"


def test_a_redacted_page_costs_only_its_own_lines():
    """The vLLM page beside a redacted dcgm page is diagnosed; the dcgm page is `partial`."""
    from tests.fakes.pages import PageServer

    vllm = PageServer((REAL / "vllm-kops-qwen25-05b-1.prom").read_text())
    dcgm = PageServer((REAL / "dcgm-l40s-viettel-redacted-1.prom").read_text())
    try:
        source = ScrapeSource([vllm.url, dcgm.url], interval=0.2, step=0)
        measured = source.fetch(MEASURES)
    finally:
        vllm.close()
        dcgm.close()
    result = diagnose(measured, 0, 1, source.name)
    status = {s["source"]: s["status"] for s in result.sources}
    assert status == {vllm.url: "ok", dcgm.url: "partial"}
    assert result.bottleneck == "healthy" and result.exit_code == 0
    assert any(m.startswith("vllm:") or m == "kv_usage_max" for m in measured.values) or measured.has("waiting_max")


def test_a_page_of_dcgm_families_kvscope_does_not_know_is_named_not_read_as_idle():
    from tests.fakes.pages import PageServer

    # a future release's names: nothing to read, and the verdict must say it cannot judge the GPUs
    text = (REAL / "dcgm-t4-ericsson-1.prom").read_text().replace("DCGM_FI_", "DCGM_FI_V9_")
    server = PageServer(text)
    try:
        source = ScrapeSource([server.url], interval=0.2, step=0)
        measured = source.fetch(MEASURES)
    finally:
        server.close()
    (status,) = measured.sources
    assert status["status"] == "partial" and "none of its" in status["detail"] and "DCGM_FI_V9_" in status["detail"]
    result = diagnose(measured, 0, 1, source.name)
    assert result.bottleneck != "gpu_underutilized"  # missing is not idle
