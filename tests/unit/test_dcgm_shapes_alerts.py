"""Every GPU alert fires (and stays silent just below) on dcgm-exporter 4.9's and 4.10's field
names as on 4.8's: the generated promtool cases, their input series rewritten into the new names
and units, run by the real promtool against the same generated rules."""

from __future__ import annotations

import re

import pytest
import yaml

from alerts import build as alert_build
from kvscope import catalog
from tests.promtool import rule_tests

pytestmark = pytest.mark.slow  # promtool over the GPU alerts' cases, twice

_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?$")
_NUM = r"[0-9.]+(?:e[+-]?[0-9]+)?"
_STEP = re.compile(rf"^(-?{_NUM})(?:([+-])({_NUM}))?(?:x([0-9]+))?$")


def _scaled_values(values: str, factor: float) -> str:
    """promtool's expanding notation (`a+bxn`, plain numbers, `_`, `stale`) times `factor`."""
    if factor == 1.0:
        return values
    out = []
    for token in values.split():
        m = _STEP.fullmatch(token)
        if m is None:
            out.append(token)
            continue
        start, sign, step, times = m.groups()
        text = repr(float(start) * factor)
        if sign:
            text += sign + repr(float(step) * factor)
        if times:
            text += "x" + times
        out.append(text)
    return " ".join(out)


def _in_shape(tests: dict, shape: str) -> tuple[dict, int]:
    renamed = 0
    for test in tests["tests"]:
        for series in test["input_series"]:
            name, labels = _SERIES.fullmatch(series["series"]).groups()
            new, factor = catalog.dcgm_shape(name, shape)
            renamed += new != name
            series["series"] = new + (labels or "")
            series["values"] = _scaled_values(str(series["values"]), factor)
    return tests, renamed


@pytest.mark.parametrize("shape", ["4.9", "4.10"])
def test_every_gpu_alert_fires_on_the_new_names_as_on_the_old(shape, tmp_path):
    rules, alerts = alert_build.build_rules()
    gpu = [a for a in alerts if a.group == "kvscope-gpu"]
    documents = alert_build.build_tests(gpu)
    tests, renamed = _in_shape(documents[alert_build.TESTS_FILE], shape)
    assert renamed >= 15  # utilisation, memory, clocks, temperature, power, XIDs, rows, PCIe
    (tmp_path / alert_build.RULES_FILE).write_text(yaml.safe_dump(rules))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tests, width=1000))
    result = rule_tests(tmp_path, "t.yaml")
    assert result.returncode == 0, result.stdout[-3000:]


def test_the_values_follow_the_unit():
    assert _scaled_values("0+30x150 _ 7", 0.01) == "0.0+0.3x150 _ 0.07"
    assert catalog.dcgm_shape(catalog.DCGM_PCIE_TX_BYTES.name, "4.9") == (catalog.DCGM_PCIE_TX_BYTES.name, 1.0)
    assert catalog.dcgm_shape(catalog.DCGM_PCIE_TX_BYTES.name, "4.10")[0].endswith("_BYTES_PER_SECOND")
