"""GPU models are found by NVML's exact device name, never by a substring: an L40 is not an L4,
an A100 40GB PCIe is not the 400 W SXM4 80GB, an H100 PCIe is not the 700 W SXM board."""

from __future__ import annotations

import pytest

from kvscope.gpu_models import DEFAULT_MODELS, MODELS, GpuModels, nvml_key


@pytest.mark.parametrize(
    ("device", "tdp_w"),
    [
        ("NVIDIA L40", 300),
        ("NVIDIA L4", 72),
        ("NVIDIA L40S", 350),
        ("NVIDIA A100-PCIE-40GB", 250),
        ("NVIDIA A100-SXM4-40GB", 400),
        ("NVIDIA A100 80GB PCIe", 300),
        ("NVIDIA A100-SXM4-80GB", 400),
        ("NVIDIA H100 PCIe", 350),
        ("NVIDIA H100 80GB HBM3", 700),
        ("NVIDIA H100 NVL", 400),
        ("NVIDIA H200", 700),
        ("NVIDIA H200 NVL", 600),
        ("Tesla T4", 70),
        ("NVIDIA A10", 150),
        ("NVIDIA A30", 165),
        ("NVIDIA A40", 300),
    ],
)
def test_each_board_is_its_own_row(device, tdp_w):
    assert DEFAULT_MODELS.lookup(device).tdp_w == tdp_w


def test_the_rule_is_exact_but_for_spacing_case_and_a_mig_profile():
    assert nvml_key("NVIDIA  H100 80GB HBM3 MIG 3g.40gb") == nvml_key("nvidia h100 80gb hbm3")
    assert DEFAULT_MODELS.lookup("NVIDIA H100 80GB HBM3 MIG 1g.10gb").tdp_w == 700
    for unknown in ("NVIDIA L40G", "NVIDIA A100", "GRID A100-40C", "NVIDIA H100", "", None):
        assert DEFAULT_MODELS.lookup(unknown) is None


def test_every_row_says_where_its_numbers_come_from_and_no_name_is_two_rows():
    names = [nvml_key(n) for m in MODELS.values() for n in (m.name, *m.names)]
    assert len(names) == len(set(names))
    assert all(m.source for m in MODELS.values())


def test_a_users_new_board_needs_only_its_name_and_what_it_knows():
    models = GpuModels({"GB200": {"name": "NVIDIA GB200", "tdp_w": 1200}})
    assert models.lookup("NVIDIA GB200").tdp_w == 1200 and models.lookup("NVIDIA GB200").slowdown_temp is None
    with pytest.raises(ValueError, match="NVML device name"):
        GpuModels({"X": {"tdp_w": 100}})


def test_an_unknown_board_gets_no_datasheet_judgement_and_the_verdict_names_it():
    from diagnosis.measures import Measurements, Value
    from diagnosis.verdict import diagnose

    gpu = {"instance": "n:9400", "Hostname": "n", "gpu": "0", "UUID": "G", "modelName": "GRID A100-40C"}
    m = Measurements()
    for name, v in {"gpu_util_avg": 95, "sm_clock_avg": 600, "temp_max": 70, "power_avg": 240}.items():
        m.values[name] = [Value(float(v), dict(gpu), f"q:{name}")]
    result = diagnose(m, 0, 900, "t")
    assert result.bottleneck != "thermal_power_throttling"  # no base clock or power cap known
    step = next(s for s in result.steps if s.step == 3)
    assert "no datasheet row for GRID A100-40C" in step.detail
