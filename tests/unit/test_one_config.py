"""One number changed in kvscope.yaml moves the alert, the dashboard's red line and the
diagnosis's threshold together (the monitoring-mixin contract), for a gauge, a counter rate and
a histogram threshold; the generated promtool tests pass for the non-default values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from alerts import build as alert_build
from kvscope import exitcodes
from kvscope.cli import main
from tests.promtool import rule_tests

CONFIG = """
thresholds:
  kv_usage_critical: 0.8         # a gauge
  kv_usage_warning: 0.7
  preemption_rate: 0.5           # a counter's rate
  queue_time_p99: {value: 5, for: 3m}   # a histogram quantile
slo:
  ttft: {objective: 0.95, seconds: 5}  # a histogram bucket
selectors:
  engine: '{job="vllm", pod=~"vllm-.*"}'
  gpu: '{cluster=~"a|b"}'
"""
ENGINE = {"instance": "10.0.0.1:8000", "pod": "vllm-0", "namespace": "prod", "model_name": "m"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("one-config")
    (root / "kvscope.yaml").write_text(CONFIG)
    for kind in ("alerts", "dashboards"):
        assert main([kind, "build", "--config", str(root / "kvscope.yaml"), "--out", str(root / kind)]) == 0
    return {"root": root, "config": root / "kvscope.yaml", "alerts": root / "alerts", "dashboards": root / "dashboards"}


def rules(folder: Path) -> dict[str, dict]:
    doc = yaml.safe_load((folder / "kvscope-rules.yaml").read_text())
    return {r.get("alert") or r["record"] + str(r.get("labels")): r for g in doc["groups"] for r in g["rules"]}


def panel(folder: Path, board: str, title: str) -> dict:
    data = json.loads((folder / f"{board}.json").read_text())
    panels = [p for top in data["panels"] for p in (top, *top.get("panels", []))]
    return next(p for p in panels if p["title"] == title)


def steps(p: dict) -> list:
    return [s["value"] for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"]]


def test_the_alerts_take_the_new_numbers(generated):
    alerts = rules(generated["alerts"])
    assert (
        alerts["VLLMKVCacheExhausted"]["expr"].startswith("((")
        and ">= 0.8) and" in alerts["VLLMKVCacheExhausted"]["expr"]
    )
    assert alerts["VLLMPreemptionsHigh"]["expr"].endswith("> 0.5")
    assert alerts["VLLMQueueTimeHigh"]["expr"].endswith("> 5") and alerts["VLLMQueueTimeHigh"]["for"] == "3m"
    ttft_slo = next(r for k, r in alerts.items() if k.startswith("slo:sli_error:ratio_rate5m") and "ttft" in k)
    assert 'le=~"5|5\\\\.0"' in ttft_slo["expr"]


def test_the_selectors_reach_every_engine_and_gpu_query(generated):
    alerts = rules(generated["alerts"])
    assert 'vllm:num_requests_waiting{job="vllm",pod=~"vllm-.*"}' in alerts["VLLMQueueBacklog"]["expr"]
    assert 'DCGM_FI_DEV_GPU_UTIL{cluster=~"a|b",GPU_I_ID=""}' in alerts["GPUUtilLow"]["expr"]
    assert 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster=~"a|b"}' in alerts["GPUUtilLow"]["expr"]  # MIG instances
    assert 'kvscope_gpu_pcie_link_capacity_bytes_per_second{cluster=~"a|b"}' in alerts["GPUPCIeSaturated"]["expr"]
    kv = panel(generated["dashboards"], "llm-serving-overview", "KV-cache usage per instance")
    assert all('job="vllm",pod=~"vllm-.*"' in t["expr"] for t in kv["targets"])


@pytest.mark.slow  # promtool over every alert's cases (a minute of CPU)
def test_the_generated_promtool_tests_pass_for_the_new_numbers(generated):
    # every alert's cases, and of the slow-burn tickets (a day of data each, two minutes of CPU
    # for all twelve) those of the SLO the config changes: the other tickets' cases differ from the
    # committed ones (test_generated_rules_and_dashboards runs them) by the engine selector alone,
    # which every fast case here carries too
    folder = generated["alerts"]
    slow = yaml.safe_load((folder / alert_build.SLOW_TESTS_FILE).read_text())
    slow["tests"] = [t for t in slow["tests"] if t["name"].startswith("SLOTtftBurnRateTicket:")]
    assert len(slow["tests"]) == 4 and slow["tests"][0]["name"] == "SLOTtftBurnRateTicket: fires"
    (folder / "ttft.slow-burn.test.yaml").write_text(yaml.safe_dump(slow, sort_keys=False))
    result = rule_tests(folder, alert_build.TESTS_FILE, "ttft.slow-burn.test.yaml")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "SUCCESS" in result.stdout


def test_the_dashboards_draw_the_new_lines(generated):
    board = generated["dashboards"]
    assert steps(panel(board, "llm-serving-overview", "KV-cache usage per instance"))[-1] == 0.8
    assert steps(panel(board, "llm-serving-overview", "Preemptions per second"))[-1] == 0.5
    assert steps(panel(board, "triage", "Queue time p99"))[-1] == 5


def _bundle(path: Path, **values: float) -> Path:
    measurements = {name: [{"value": v, "labels": ENGINE, "query": f"q:{name}"}] for name, v in values.items()}
    path.write_text(
        json.dumps(
            {
                "schema": "kvscope.bundle/v1",
                "at": 1796004000,
                "window": 1800,
                "source": "t",
                "measurements": measurements,
            }
        )
    )
    return path


def diagnose(bundle: Path, capsys, *extra: str) -> tuple[int, dict]:
    code = main(["diagnose", "--bundle", str(bundle), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_the_diagnosis_moves_with_them(generated, capsys, tmp_path):
    config = str(generated["config"])
    base = {"waiting_max": 150, "running_max": 8, "ttft_p50": 1.0, "ttft_p99": 4.0, "waiting_slope": 0.5}
    # 0.3 preemptions/s with the pool 85 % full: over the defaults (0.05/s, 90 %), under 0.5/s and over 80 %;
    # the queue long but not growing, and its time under both lines
    kv = _bundle(
        tmp_path / "kv.json", kv_usage_max=0.85, preemption_rate=0.3, queue_p99=0.5, **{**base, "waiting_slope": 0}
    )
    code, default = diagnose(kv, capsys)
    assert default["bottleneck"] == "kv_cache_exhaustion" and code == exitcodes.CRITICAL
    code, tuned = diagnose(kv, capsys, "--config", config)
    assert tuned["bottleneck"] != "kv_cache_exhaustion"
    step1 = next(s for s in tuned["steps"] if s["name"] == "kv_cache")
    assert step1["status"] == "fail" and "threshold 80%" in step1["detail"]
    # with the queue growing, the tuned lines read the pool (full at 80 %) as what it waits for: no
    # evictions past their line, so a warning where the defaults said critical
    growing = _bundle(tmp_path / "kv-growing.json", kv_usage_max=0.85, preemption_rate=0.3, queue_p99=0.5, **base)
    code, tuned = diagnose(growing, capsys, "--config", config)
    assert tuned["bottleneck"] == "kv_cache_exhaustion" and code == exitcodes.WARNING
    assert "nothing is evicted" in tuned["summary"]
    # a 3 s p99 queue time with a growing backlog: saturation at the default 1 s, not at 5 s
    queued = _bundle(tmp_path / "queue.json", kv_usage_max=0.5, preemption_rate=0.0, queue_p99=3.0, **base)
    assert diagnose(queued, capsys)[1]["bottleneck"] == "capacity_saturation"
    code, tuned = diagnose(queued, capsys, "--config", config)
    assert tuned["bottleneck"] != "capacity_saturation"
    step2 = next(s for s in tuned["steps"] if s["name"] == "queue")
    assert "threshold 5 s" in step2["detail"]
