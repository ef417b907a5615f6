"""Short variants of every drill, end to end through the `kvscope` console script: the real
stack starts, the scenario's alert fires in Prometheus, the diagnosis names the scenario's
bottleneck, the report is written and nothing is left listening. How much the tuned profile
improves on the default is a measurement, not a pass/fail: `python -m bench.drill_profiles`
and docs/benchmarks.md. Each drill starts its own engine, exporter and Prometheus (about
25 s), so these take ~15 minutes together."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from drill.scenarios import SCENARIOS
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHORT = {  # seconds of traffic per profile in CI
    "kv-avalanche": 90,
    "prefill-hol": 60,
    "prefix-miss": 100,
    "gpu-xid": 50,
    "thermal": 50,
    "pcie-degraded": 50,
    "memory-leak": 50,
}


def drill(
    report: Path, scenario: str, *extra: str, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    kvscope = Path(sys.executable).parent / "kvscope"
    result = subprocess.run(
        [str(kvscope), "drill", scenario, "--duration", f"{SHORT[scenario]}s", "--report", str(report), *extra],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=cwd,
    )
    results_file = (cwd or Path.cwd()) / report / "results.json"
    assert results_file.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    return result, json.loads(results_file.read_text())


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_every_scenario_has_a_ci_variant():
    assert set(SHORT) == set(SCENARIOS)


def test_kv_avalanche_alerts_diagnoses_and_the_tuned_profile_fixes_it(tmp_path):
    # a relative report folder, as `make demo` gives it
    result, out = drill(Path("demo-report"), "kv-avalanche", "--profile", "both", cwd=tmp_path)
    tmp_path = tmp_path / "demo-report"
    assert result.returncode == 0, result.stdout[-4000:]
    default, tuned = out["profiles"]["default"], out["profiles"]["tuned"]
    assert set(default["alerts_fired"]) & set(out["expected_alerts"]), default["alerts_fired"]
    assert default["bottleneck"] == "kv_cache_exhaustion"
    # the verdict agrees with the alerts on both profiles: each one that fired is explained by an
    # incident, or is about the monitoring itself (issue 12)
    for profile in (default, tuned):
        loose = [
            a["alertname"]
            for a in profile["diagnosis"]["alerts"]
            if not a["explained_by"] and "monitoring" not in a.get("why", "")
        ]
        assert not loose, (profile["profile"], loose, profile["diagnosis"]["summary"])
    assert "at the same request rate" in default["diagnosis"]["summary"]  # seed 000's trigger, said
    assert default["failed"] == tuned["failed"] == 0
    assert default["requests"] == tuned["requests"] > 0  # the same seeded traffic replayed on tuned
    assert tuned["preemptions"] is not None and tuned["short_p99_ttft_s"] is not None
    # what the user sees at the end: the before/after table, the alerts, the verdict
    assert "before / after" in result.stdout and "tuned / default" in result.stdout
    assert "alerts fired on default" in result.stdout and "drill passed" in result.stdout
    summary = (tmp_path / "summary.md").read_text()
    assert "## Before / after" in summary and "kv_cache_exhaustion" in summary
    assert (tmp_path / "default.png").stat().st_size > 20_000 and (tmp_path / "tuned.png").stat().st_size > 20_000
    assert (tmp_path / "requests-default.csv").read_text().count("\n") == default["requests"] + 1


@pytest.mark.parametrize("scenario", [s for s in SHORT if s != "kv-avalanche"])
def test_scenario_fires_its_alert_is_diagnosed_and_stops_everything(tmp_path, scenario):
    ports = [_free() for _ in range(3)]  # fixed, so the test can see nothing listens afterwards
    result, out = drill(tmp_path, scenario, "--ports", ",".join(map(str, ports)))
    run = out["profiles"]["default"]
    assert set(run["alerts_fired"]) & set(out["expected_alerts"]), (run["alerts_fired"], result.stdout[-3000:])
    assert run["bottleneck"] == out["expected"], run["diagnosis"]["summary"]
    assert result.returncode == 0, result.stdout[-3000:]
    assert (tmp_path / "default.png").is_file()
    assert f"127.0.0.1:{ports[0]}" in result.stdout
    assert not [p for p in ports if _listening(p)]


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_stops_every_process(tmp_path, sig, code, word):
    ports = [_free() for _ in range(3)]
    kvscope = Path(sys.executable).parent / "kvscope"
    proc = subprocess.Popen(
        [str(kvscope), "drill", "gpu-xid", "--ports", ",".join(map(str, ports)), "--report", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # a shell without job control starts background jobs with SIGINT ignored, and children
        # inherit that: give the drill the handlers a terminal would
        preexec_fn=_default_signals,
    )
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until the traffic runs on the whole stack
        seen.append(line)
        if "stack ready" in line:
            break
    eventually(lambda: all(_listening(p) for p in ports), timeout=30, what="the stack listening")
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == code, "".join(seen) + out
    assert word in out
    assert not [p for p in ports if _listening(p)]
