"""The promtool helper runs each case against the rules it reads (tests/promtool.py): the split
keeps what a case needs, and a case still fails where the whole file would."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from alerts import build as alert_build
from tests.promtool import _closure, rule_tests

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"


def _groups() -> list[dict]:
    return yaml.safe_load((ALERTS / alert_build.RULES_FILE).read_text())["groups"]


def _case(name: str) -> dict:
    for tests_file in alert_build.TESTS_FILES:
        for case in yaml.safe_load((ALERTS / tests_file).read_text())["tests"]:
            if case["name"] == name:
                return case
    raise AssertionError(name)


def _names(groups: list[dict], rules: frozenset) -> set[str]:
    return {groups[g]["rules"][r].get("record") or groups[g]["rules"][r]["alert"] for g, r in rules}


def test_a_burn_rate_case_reads_its_slos_recording_rules_and_no_gpu_alert():
    groups = _groups()
    names = _names(groups, _closure(groups, _case("SLOTtftBurnRatePage: fires")))
    assert "SLOTtftBurnRatePage" in names
    assert any(n.startswith("kvscope:") or ":" in n for n in names if n != "SLOTtftBurnRatePage")
    assert not any(n.startswith("GPU") for n in names)
    assert "SLOItlBurnRatePage" not in names


def test_a_gpu_alert_case_reads_its_alert_alone():
    groups = _groups()
    names = _names(groups, _closure(groups, _case("GPUXIDReported: fires")))
    assert "GPUXIDReported" in names
    assert not any("slo" in n.lower() for n in names) and not any(n.startswith("VLLM") for n in names)


@pytest.mark.slow  # promtool over two SLO cases
def test_a_case_fails_through_the_split_when_its_rule_changes(tmp_path):
    for name in (alert_build.RULES_FILE, alert_build.TESTS_FILE):
        shutil.copy(ALERTS / name, tmp_path / name)
    tests = yaml.safe_load((tmp_path / alert_build.TESTS_FILE).read_text())
    tests["tests"] = [c for c in tests["tests"] if c["name"].startswith("VLLMPreemptionsHigh:")]
    (tmp_path / alert_build.TESTS_FILE).write_text(yaml.safe_dump(tests, width=1000, sort_keys=False))
    assert rule_tests(tmp_path, alert_build.TESTS_FILE).returncode == 0
    rules = (tmp_path / alert_build.RULES_FILE).read_text()
    changed = rules.replace(
        "(rate(vllm:num_preemptions_total[5m])) > 0.05", "(rate(vllm:num_preemptions_total[5m])) > 500"
    )
    assert changed != rules
    (tmp_path / alert_build.RULES_FILE).write_text(changed)
    failed = rule_tests(tmp_path, alert_build.TESTS_FILE)
    assert failed.returncode != 0 and "VLLMPreemptionsHigh" in failed.stdout + failed.stderr


def test_a_rule_that_reads_alerts_is_refused():
    groups = [{"name": "g", "rules": [{"alert": "A", "expr": "ALERTS{alertname='B'} > 0"}]}]
    with pytest.raises(ValueError, match="ALERTS"):
        _closure(groups, {"alert_rule_test": [{"alertname": "A"}]})
