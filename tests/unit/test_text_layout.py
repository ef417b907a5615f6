"""`kvscope diagnose` in the terminal an on-call has: 80 columns wrap, never truncate; changes are
rounded sentences with units, not raw floats (issue 20, item 10)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from diagnosis.measures import Value
from diagnosis.report import render_text
from diagnosis.verdict import diagnose
from tests.unit.test_diagnosis_checks import ENGINE, GPU, measurements

LONG_POD = "vllm-llama-3-70b-instruct-prefill-7f9c5d8b6-x2k4q"


def _diagnosis():
    m = measurements(engine={"kv_usage_max": 0.98, "preemption_rate": 1.2, "prompt_mean": 89461.965})
    for name in list(m.values):
        m.values[name] = [
            Value(v.value, {**v.labels, "pod": LONG_POD} if "pod" in v.labels else v.labels, v.query)
            for v in m.values[name]
        ]
    m.values["temp_max"] = [Value(94.0, dict(GPU), "q")]
    m.values["sm_clock_avg"] = [Value(1100.0, dict(GPU), "q")]
    m.baseline["prompt_mean"] = [Value(36761.483, {**ENGINE, "pod": LONG_POD}, "q")]
    m.baseline["request_rate"] = [Value(5.0, {**ENGINE, "pod": LONG_POD}, "q")]
    m.values["request_rate"] = [Value(5.1, {**ENGINE, "pod": LONG_POD}, "q")]
    return diagnose(m, 0, 900, "t")


def _rendered(width: int) -> str:
    buffer = io.StringIO()
    render_text(_diagnosis(), Console(file=buffer, width=width, color_system=None))
    return buffer.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_nothing_is_cut_at_80_or_120_columns(width):
    text = _rendered(width)
    assert "…" not in text and "..." not in text, text
    assert all(len(line) <= width for line in text.splitlines())
    result = _diagnosis()
    assert len(result.incidents) >= 2
    flat = re.sub(r"[\s│┃|]+", "", text)
    for incident in result.incidents:  # each severity and scope whole, however it wrapped
        assert incident.severity.value in text
        assert re.sub(r"\s+", "", ", ".join(incident.scopes)) in flat


def test_changes_are_sentences_with_units():
    text = _rendered(80)
    assert "36761.483" not in text and "89461.965" not in text
    assert "prompts 2.4x longer (36,761 -> 89,462 tokens) at the same request rate" in text
