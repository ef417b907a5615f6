"""The frontend-ceiling benchmark's smoke mode: three servers on the mock engine answer every
request, and the table and JSON say so (a benchmark: no figure is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
ROOT = Path(__file__).resolve().parents[2]


def bench(module: str, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Run `python -m bench.<module> ARGS --json OUT` from the repository, its temporary directory
    a new one beside OUT; its output and JSON. A run that went well leaves nothing there (its
    servers' logs are kept only when it fails)."""
    scratch = out.parent / f"{module}-tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in scratch.iterdir()) == []
    assert "logs are kept" not in done.stderr
    return done, json.loads(out.read_text())


def test_smoke_mode_serves_every_request_bare_and_behind_both_gateways(tmp_path):
    done, result = bench("frontend_ceiling", tmp_path / "ceiling.json", "--smoke")
    shape = result["completions, streaming"]
    assert shape["failed"] == 0
    assert shape["bare_req_per_s"] > 0
    for gateway in ("default", "tuned"):
        assert shape[gateway]["req_per_s"] > 0
        assert shape[gateway]["cpu_ms"] > 0
    assert "| completions, streaming | tuned |" in done.stdout
    # what each server holds after a round: a gateway that kept requests' state would grow here
    assert set(shape["rss_mib"]) == {"bare", "default", "tuned"}
    assert all(len(held) == 1 and held[0] > 0 for held in shape["rss_mib"].values())
    assert "resident memory after each round, completions, streaming (MiB): bare " in done.stdout


def test_call_counts_show_the_gateways_per_token_work_and_one_render_a_prompt(tmp_path):
    """bench.frontend_calls on a few streamed completions: the gateway's per-chunk check runs once
    a token behind kvscope serve and never with it stepped over; the prompt is rendered once on
    both (the gateway's render is the one vLLM's route takes, serving/render_memo.py), and vLLM's
    re-parse of an id prompt for its text (once a token before serving/prompt_text.py) does not
    run at all; the body is validated once on both."""
    tokens = 6
    counted = ["--requests", "4", "--concurrency", "2", "--max-tokens", str(tokens), "--top", "1000"]
    done, result = bench("frontend_calls", tmp_path / "calls.json", *counted)
    assert {n: s["failed"] for n, s in result["servers"].items()} == {"passthrough": 0, "default": 0}
    rows = {row["function"].rsplit(":", 1)[-1]: row for row in result["functions"]}
    assert rows["send_tracked"]["passthrough"] == 0
    assert rows["send_tracked"]["default"] >= tokens  # a chunk a token, the role and [DONE] chunks besides
    # the route asks the memo on both; behind the gateway, the gateway's own render asks it too
    assert (rows["take"]["passthrough"], rows["take"]["default"]) == (1, 2)
    for vllms in ("preprocess_completion", "render_cmpl_async", "_extract_prompt_components"):
        assert vllms not in rows, rows.get(vllms)  # vLLM's render once a request on both; its re-parse never
    # the body validated once on both: vLLM's route takes the gateway's request
    # (serving/request_handoff.py), so its validator's deep copies of a parsed body happen as often
    assert "deepcopy" not in rows, rows.get("deepcopy")
    assert "| default | 4 | 0 |" in done.stdout
