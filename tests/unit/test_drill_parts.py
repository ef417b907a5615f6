"""The drill's pieces that need no running stack: compressed rules, ports, scenarios, prompts,
the before/after table, the report and the CLI's usage errors."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from alerts import build
from diagnosis.findings import VOCABULARY
from drill import report, rules, scenarios
from drill.observe import AlertLog, Fired, Series
from drill.prometheus_server import binary, write_config
from drill.report_dir import ReportDir, ReportDirRefused
from drill.results import ProfileRun, comparison_rows, percentile
from drill.stack import Ports
from drill.traffic import Outcome, Prompts
from exporter.faults import Fault
from kvscope import exitcodes
from kvscope.cli import main
from kvscope.promql import scale_durations


def test_compression_divides_windows_offsets_and_subquery_steps():
    expr = "rate(x[5m]) > 0 and max_over_time((rate(y[10m]))[1h:1m] offset 10m) >= 0.75 and rate(z[1m]) > 0"
    out = scale_durations(expr, 20, min_range=10, min_step=2)
    assert out == ("rate(x[15s]) > 0 and max_over_time((rate(y[30s]))[3m:3s] offset 30s) >= 0.75 and rate(z[10s]) > 0")


def test_compressed_rules_keep_thresholds_and_shorten_for():
    source, _ = build.build_rules()
    fast = rules.compress(source, 20, scrape_interval=2)
    before = {r["alert"]: r for g in source["groups"] for r in g["rules"] if "alert" in r}
    after = {r["alert"]: r for g in fast["groups"] for r in g["rules"] if "alert" in r}
    assert before.keys() == after.keys()
    assert before["VLLMKVCacheNearlyFull"]["for"] == "5m" and after["VLLMKVCacheNearlyFull"]["for"] == "15s"
    assert ">= 0.85" in after["VLLMKVCacheNearlyFull"]["expr"]
    assert after["VLLMKVCacheNearlyFull"]["labels"] == before["VLLMKVCacheNearlyFull"]["labels"]
    assert all(g["interval"] == "2s" for g in fast["groups"])
    assert rules.compress(source, 1, 2)["groups"][0]["rules"] == source["groups"][0]["rules"]


def test_compressed_rule_file_passes_promtool(tmp_path):
    path = rules.write(tmp_path / "drill.yaml", 20, 2)
    result = subprocess.run(
        [binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_speedup_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        rules.compress({"groups": []}, 0.5, 2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("auto", Ports()), ("8000,9400,9090", Ports(8000, 9400, 9090)), ("8000,,0", Ports(8000, None, None))],
)
def test_ports_parse(text, expected):
    assert Ports.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8000", "SERVE,EXPORT,PROMETHEUS"),
        ("a,b,c", "not three port numbers"),
        ("1,1,2", "twice"),
        ("1,2,70000", "0-65535"),
    ],
)
def test_bad_ports_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        Ports.parse(text)


def test_every_scenario_expects_a_vocabulary_bottleneck_and_generated_alerts():
    alert_names = {
        r["alert"]
        for g in yaml.safe_load((build.ALERTS_DIR / build.RULES_FILE).read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert set(scenarios.SCENARIOS) == {
        "kv-avalanche",
        "prefill-hol",
        "prefix-miss",
        "gpu-xid",
        "thermal",
        "pcie-degraded",
        "memory-leak",
    }
    for s in scenarios.SCENARIOS.values():
        assert s.expected in VOCABULARY, s.name
        assert set(s.alerts) <= alert_names, s.name
        if s.fault:
            Fault(**s.fault)  # the exporter accepts it


def test_phases_split_the_duration_and_carry_the_change():
    kv = scenarios.get("kv-avalanche")
    before, after = kv.phases(6.5, 90)
    assert (before.name, after.name) == ("before", "after")
    assert before.seconds + after.seconds == pytest.approx(90)
    assert after.rate == before.rate == 6.5
    assert after.mix.mean_prompt_tokens == pytest.approx(2 * before.mix.mean_prompt_tokens, rel=0.01)
    assert before.mix.shares == (0.90, 0.08, 0.02)

    hol = scenarios.get("prefill-hol").phases(5.0, 60)[1]
    assert hol.forced and {k for _, k in hol.forced} == {"long"} and hol.mix.long_tokens == 12000
    assert all(0 <= t < hol.seconds for t, _ in hol.forced)

    miss_before, miss_after = scenarios.get("prefix-miss").phases(2.0, 60)
    assert miss_before.system_prompt_seed is not None and miss_after.system_prompt_seed is None


def test_unknown_scenario_names_the_choices():
    with pytest.raises(ValueError, match="kv-avalanche"):
        scenarios.get("nope")


def test_prompts_share_the_system_prompt_only_while_it_is_shared():
    before, after = scenarios.get("prefix-miss").phases(2.0, 60)
    prompts = Prompts(3)
    shared = [prompts.make(before, "short").split("\n")[0] for _ in range(3)]
    own = [prompts.make(after, "short").split("\n")[0] for _ in range(3)]
    assert len(set(shared)) == 1 and len(set(own)) == 3
    words = len(shared[0].split())
    assert 0.7 * 2048 < words / 0.8 < 1.3 * 2048


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([], 99) is None


def _run(profile: str, ttft: float, preemptions: float, fired: dict[str, float]) -> ProfileRun:
    outcomes = [
        Outcome("after", "short", 120, 100.0 + i, ttft=ttft * (1 + i / 100), latency=1.0, output_tokens=32)
        for i in range(100)
    ]
    log = AlertLog()
    for name, at in fired.items():
        log.fired[(name,)] = Fired(name, "warning", {"instance": "x"}, "", 130.0 + at)
    series = Series([(0, 0.2), (30, 0.95), (60, 0.99)], [(0, 0), (60, 12)], [(0, 0), (60, 0.4)], [(0, 0.1), (60, 4.2)])
    return ProfileRun(
        profile,
        100.0,
        130.0,
        190.0,
        200.0,
        outcomes,
        log,
        {"bottleneck": "kv_cache_exhaustion", "summary": "full"},
        "### diagnosis",
        series,
        preemptions,
        0.99,
        1.5,
        ["--enforce-eager"],
    )


def test_the_before_after_table_compares_the_profiles():
    rows = comparison_rows([_run("default", 4.0, 29, {"VLLMKVCacheExhausted": 12}), _run("tuned", 0.4, 8, {})])
    assert rows[0] == ["", "default", "tuned", "tuned / default"]
    table = {r[0]: r[1:] for r in rows[1:]}
    assert table["short-request p99 TTFT (after the change)"][0].endswith(" s")
    assert table["short-request p99 TTFT (after the change)"][2] == "0.10x"
    assert table["preemptions"][:2] == ["29", "8"]
    assert table["alerts fired"][:2] == ["VLLMKVCacheExhausted", "none"]
    assert table["diagnosis"][:2] == ["kv_cache_exhaustion", "kv_cache_exhaustion"]


def test_the_terminal_table_fits_80_columns_without_breaking_a_word():
    import io

    from rich.console import Console

    from drill.run import print_table

    alerts = {"VLLMPreemptionsHigh": 25, "VLLMQueueTimeHigh": 25, "SLOTtftBurnRatePage": 31}
    out = io.StringIO()
    print_table(Console(file=out, width=80), [_run("default", 5.67, 118, alerts), _run("tuned", 0.93, 19, {})])
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    words = {w for line in text.splitlines() for w in line.replace("│", " ").split()}
    # every label word and value whole on its line (the alerts are listed in full below the table)
    for word in ("short-request", "KV-cache", "kv_cache_exhaustion", "preemptions", "0.16x", "tuned / default"):
        assert all(part in words for part in word.split()), (word, text)
    assert "VLLMPreemptionsHigh" not in text


def test_the_report_has_a_summary_results_and_readable_plots(tmp_path):
    runs = [_run("default", 4.0, 29, {"VLLMKVCacheExhausted": 12}), _run("tuned", 0.4, 8, {})]
    folder = ReportDir(tmp_path)
    folder.claim()
    summary = report.write(
        folder,
        scenarios.get("kv-avalanche"),
        runs,
        speedup=20,
        min_range=33,
        command="kvscope drill x",
        passed=True,
        verdict="passed",
    )
    text = summary.read_text()
    assert "| preemptions | 29 | 8 |" in text and "![default](default.png)" in text
    assert "+12 s `VLLMKVCacheExhausted`" in text
    assert "range windows of 33s at least" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["alert_min_range_s"] == 33
    assert results["profiles"]["default"]["alerts_fired"] == {"VLLMKVCacheExhausted": 12.0}
    for name in ("default.png", "tuned.png"):
        image = matplotlib.image.imread(tmp_path / name)
        assert image.shape[0] > 800 and image.shape[1] > 800
        assert Path(tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (tmp_path / "requests-tuned.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 100 and rows[0]["sent_s"] == "0.000" and rows[-1]["sent_s"] == "99.000"
    assert rows[0]["class"] == "short" and float(rows[0]["ttft_s"]) == pytest.approx(0.4)
    assert rows[0]["error"] == "" and rows[0]["output_tokens"] == "32"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["drill", "nope"], "unknown scenario"),
        (["drill", "kv-avalanche", "--profile", "fast"], "--profile must be"),
        (["drill", "kv-avalanche", "--ports", "1,2"], "SERVE,EXPORT,PROMETHEUS"),
        (["drill", "kv-avalanche", "--duration", "5s"], "too short"),
        (["drill", "kv-avalanche", "--duration", "soon"], "duration"),
        (["drill", "kv-avalanche", "--alert-speedup", "0.5"], "at least 1"),
    ],
)
def test_drill_usage_errors_exit_64_with_one_line(argv, message, capsys):
    assert main(argv) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_fault_scenarios_refuse_real_gpus(capsys, tmp_path):
    code = main(["drill", "gpu-xid", "--gpu", "real", "--report", str(tmp_path)])
    assert code == exitcodes.USAGE
    assert "--gpu" in capsys.readouterr().out


def test_prometheus_config_names_rule_files_by_absolute_path(tmp_path, monkeypatch):
    """Prometheus reads relative rule paths from its config's folder: `make demo` passes one."""
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path / "prometheus.yml", {"j": ["h:1"]}, rule_files=[Path("rules.yaml")])
    assert yaml.safe_load(config.read_text())["rule_files"] == [str(tmp_path / "rules.yaml")]


def test_a_drill_never_deletes_what_it_did_not_create(tmp_path, capsys):
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's own file")
    code = main(["drill", "gpu-xid", "--gpu", "emulated", "--report", str(tmp_path)])
    assert code == exitcodes.USAGE and "did not write" in capsys.readouterr().out
    assert mine.read_text() == "the user's own file"


def test_a_rerun_removes_only_what_the_previous_drill_wrote(tmp_path):
    folder = ReportDir(tmp_path / "report")
    folder.claim()
    folder.track("summary.md").write_text("old")
    (folder.path / "logs").mkdir()
    folder.track("logs")
    folder.claim()  # the next run
    assert sorted(p.name for p in folder.path.iterdir()) == [".kvscope-drill"]
    (folder.path / "user.txt").write_text("kept")
    folder.marker.write_text("../../etc\n/etc/passwd\nuser-missing.txt\n")  # a damaged marker points nowhere
    folder.claim()
    assert (folder.path / "user.txt").read_text() == "kept"


def test_a_report_an_older_drill_wrote_without_a_marker_is_still_its_own(tmp_path):
    old = tmp_path / "demo"
    (old / "logs" / "default").mkdir(parents=True)
    (old / "summary.md").write_text("# kvscope drill kv-avalanche\n")
    (old / "results.json").write_text('{"scenario": "kv-avalanche"}')
    for name in ("default.png", "requests-default.csv"):
        (old / name).write_text("old")
    ReportDir(old).claim()
    assert sorted(p.name for p in old.iterdir()) == [".kvscope-drill"]
    # the same names, but not a drill's: refused, nothing removed
    photos = tmp_path / "photos"
    (photos / "logs").mkdir(parents=True)
    (photos / "summary.md").write_text("my notes")
    (photos / "default.png").write_text("a picture")
    with pytest.raises(ReportDirRefused):
        ReportDir(photos).claim()
    assert (photos / "default.png").read_text() == "a picture"


def test_hardware_faults_combine_each_on_its_own_gpu():
    both = scenarios.get("thermal+pcie-degraded")
    assert [f["gpu"] for f in both.faults] == [0, 1] and both.gpus == 2
    assert "GPU 1's PCIe link" in both.story and both.story.count("while traffic runs") == 1
    assert set(both.alerts) == {"GPUTemperatureHigh", "GPUThrottled", "GPUPCIeLinkDegraded"}
    assert scenarios.get("gpu-xid+thermal+pcie-degraded+memory-leak").gpus == 4
    assert "on GPU 1: GPUPCIeLinkDegraded and a diagnosis of pcie_bottleneck" in both.expectation()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("kv-avalanche+thermal", "only hardware faults combine: kv-avalanche changes the traffic"),
        ("thermal+thermal", "two or more different faults"),
        ("thermal+nope", "unknown scenario 'nope'"),
    ],
)
def test_what_cannot_combine_is_refused(name, message):
    with pytest.raises(ValueError, match=message):
        scenarios.get(name)


def test_a_combined_drill_passes_only_when_every_fault_is_named_on_its_gpu():
    from drill.run import unmet

    combined = scenarios.get("thermal+pcie-degraded")

    def run_with(incidents: list[dict], alerts: dict[str, str]) -> ProfileRun:
        r = _run("default", 0.1, 0, {})
        r.diagnosis = {"bottleneck": incidents[0]["id"] if incidents else "healthy", "incidents": incidents}
        for name, gpu in alerts.items():
            r.alerts.fired[(name, gpu)] = Fired(name, "warning", {"gpu": gpu}, "", 140.0)
        return r

    def incident(kind: str, *gpus: str, status: str = "active") -> dict:
        return {"id": kind, "status": status, "affected": [{"instance": "x", "gpu": g} for g in gpus]}

    alerts = {"GPUTemperatureHigh": "0", "GPUPCIeLinkDegraded": "1"}
    good = [incident("thermal_power_throttling", "0"), incident("pcie_bottleneck", "1")]
    assert unmet(combined, run_with(good, alerts)) == []
    # the PCIe link folded into the thermal incident, or named on the wrong GPU, or recovered
    folded = [incident("thermal_power_throttling", "0", "1")]
    assert unmet(combined, run_with(folded, alerts)) == ["no active pcie_bottleneck incident on GPU 1 (pcie-degraded)"]
    wrong = [incident("thermal_power_throttling", "0"), incident("pcie_bottleneck", "0")]
    assert unmet(combined, run_with(wrong, alerts)) == ["no active pcie_bottleneck incident on GPU 1 (pcie-degraded)"]
    past = [incident("thermal_power_throttling", "0"), incident("pcie_bottleneck", "1", status="recovered")]
    assert len(unmet(combined, run_with(past, alerts))) == 1
    quiet = unmet(combined, run_with(good, {"GPUTemperatureHigh": "0", "GPUPCIeLinkDegraded": "0"}))
    assert quiet == ["none of GPUPCIeLinkDegraded fired for GPU 1 (pcie-degraded)"]


@pytest.mark.slow  # promtool over 83 compressed minutes (about 6 s)
def test_a_drill_opens_no_slo_ticket_before_its_window_fills(tmp_path):
    # a half-speed CI drill's ticket fired 16 s before its change: compressed 20x, a ticket's
    # windows (1d -> 72 min, 3d -> 3.6 h) hold the whole run so far, and the run's first minute of
    # slow tokens stood for days. Diluted by the share of the window its series fill, the same 4 %
    # (over the 1d pair's 3 % line) stays quiet at 20 s and at 80 s, and opens the ticket once the
    # compressed day is filled.
    from alerts import definitions as d
    from kvscope import catalog
    from kvscope.config import Config

    fast = rules.compress(build.build_rules()[0], 20, scrape_interval=10)
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(fast, sort_keys=False, width=1000))
    ticket = next(r for g in fast["groups"] for r in g["rules"] if r.get("alert") == "SLOItlBurnRateTicket")
    fx = d.Fixtures(Config())
    per_step, steps = 350, 500  # output tokens per 10 s scrape, 83 min
    count = f"count({ticket['expr']})"
    test = {
        "rule_files": [str(path)],
        "evaluation_interval": "10s",
        "tests": [
            {
                "interval": "10s",
                "input_series": [
                    {"series": fx.engine(catalog.VLLM_ITL, "_count"), "values": f"0+{per_step}x{steps}"},
                    {
                        "series": fx.engine(catalog.VLLM_ITL, "_bucket", le="0.2"),
                        "values": f"0+{per_step * 0.96:g}x{steps}",
                    },
                ],
                "promql_expr_test": [
                    {"expr": count, "eval_time": "20s", "exp_samples": []},
                    {"expr": count, "eval_time": "80s", "exp_samples": []},
                    {"expr": count, "eval_time": "80m", "exp_samples": [{"labels": "{}", "value": 1}]},
                ],
            }
        ],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    result = subprocess.run(
        [binary("promtool"), "test", "rules", str(tmp_path / "t.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compressed_windows_hold_two_of_the_scenarios_periods():
    source, _ = build.build_rules()
    spaced = rules.compress(source, 20, scrape_interval=2, period=16.5)
    alerts = {r["alert"]: r for g in spaced["groups"] for r in g["rules"] if "alert" in r}
    assert "[33s]" in alerts["VLLMQueueTimeHigh"]["expr"] and "[15s]" not in alerts["VLLMQueueTimeHigh"]["expr"]
    assert alerts["VLLMQueueTimeHigh"]["for"] == "15s"  # only the windows widen; `for` keeps the clock
    assert rules.min_range(2) == 10 and rules.min_range(2, 3) == 10 and rules.min_range(2, 16.5) == 33
    with pytest.raises(ValueError, match="positive"):
        rules.compress(source, 20, 2, period=0)


def _queue_time_bursts(every_steps: int, steps: int) -> list[dict[str, str]]:
    """vLLM's queue-time histogram, scraped every 2 s: 10 requests a scrape wait under 1 s; from
    the tenth scrape, every `every_steps` scrapes a burst of long prompts blocks the engine for
    three scrapes (nothing finishes), then its backlog of 30 finishes at once, each having
    waited 1-10 s."""
    from alerts import definitions as d
    from kvscope import catalog
    from kvscope.config import Config

    fast, slow = [0], [0]
    for step in range(1, steps):
        phase = (step - 10) % every_steps if step >= 10 else None
        blocked = phase is not None and 1 <= phase <= 3
        backlog = 30 if phase == 4 else 0
        fast.append(fast[-1] + (0 if blocked else 10))
        slow.append(slow[-1] + backlog)
    fx = d.Fixtures(Config())
    cumulative = {"1": fast, "10": [a + b for a, b in zip(fast, slow, strict=True)]}
    cumulative["+Inf"] = cumulative["10"]
    out = [
        {"series": fx.engine(catalog.VLLM_QUEUE_TIME, "_bucket", le=le), "values": " ".join(map(str, values))}
        for le, values in cumulative.items()
    ]
    out.append(
        {"series": fx.engine(catalog.VLLM_QUEUE_TIME, "_count"), "values": " ".join(map(str, cumulative["+Inf"]))}
    )
    return out


@pytest.mark.parametrize(("period", "fires"), [(None, False), (18.0, True)])
def test_queue_time_alert_fires_on_bursts_spaced_wider_than_the_compressed_window(tmp_path, period, fires):
    # prefill-hol on a loaded machine (CI with a CPU hog): the calibration spaced the bursts
    # 16.5 s apart, the 20x-compressed window was 15 s, each burst's backlog left the window
    # before `for: 15s` had passed, and neither latency alert fired although queue p99 was 9 s.
    # With the windows holding two periods the backlogs overlap and the alert fires.
    fast = rules.compress(build.build_rules()[0], 20, scrape_interval=2, period=period)
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(fast, sort_keys=False, width=1000))
    firing = 'count(ALERTS{alertname="VLLMQueueTimeHigh", alertstate="firing"})'
    pending = 'count(ALERTS{alertname="VLLMQueueTimeHigh", alertstate="pending"})'
    # the first backlog finishes at 28 s: pending from there on both ways; firing 16 s later
    # (`for: 15s` on a 2 s evaluation) only where the window holds the next backlog too
    checks = [{"expr": pending, "eval_time": "30s", "exp_samples": [{"labels": "{}", "value": 1}]}]
    checks += [
        {
            "expr": firing,
            "eval_time": f"{t}s",
            "exp_samples": [{"labels": "{}", "value": 1}] if fires and t >= 44 else [],
        }
        for t in range(20, 120, 2)
    ]
    test = {
        "rule_files": [str(path)],
        "evaluation_interval": "2s",
        "tests": [{"interval": "2s", "input_series": _queue_time_bursts(9, 60), "promql_expr_test": checks}],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    result = subprocess.run(
        [binary("promtool"), "test", "rules", str(tmp_path / "t.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.parametrize(("period", "fires"), [(None, False), (31.6, True)])
def test_one_clump_of_preemptions_fires_when_the_window_holds_the_decks_it_came_from(tmp_path, period, fires):
    # kv-avalanche in CI with a CPU hog (drill 1.58 req/s): the pool filled once and 7 requests
    # were preempted within a scrape; a 15 s window read them for 14 s, less than
    # VLLMPreemptionsHigh's `for: 15s`, and no KV alert fired. A deck of 50 requests (one long
    # prompt) takes 31.6 s at that rate: windows holding two decks keep the clump long enough.
    from alerts import definitions as d
    from kvscope import catalog
    from kvscope.config import Config

    fast = rules.compress(build.build_rules()[0], 20, scrape_interval=2, period=period)
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(fast, sort_keys=False, width=1000))
    counts = [0] * 25 + [7] * 45  # scraped every 2 s: the clump at 50 s, none after it
    series = d.Fixtures(Config()).engine(catalog.VLLM_NUM_PREEMPTIONS)
    firing = 'count(ALERTS{alertname="VLLMPreemptionsHigh", alertstate="firing"})'
    checks = [
        {"expr": firing, "eval_time": f"{t}s", "exp_samples": [{"labels": "{}", "value": 1}] if fires else []}
        for t in range(70, 80, 2)  # 20-30 s after the clump: `for: 15s` has passed on a long window
    ]
    test = {
        "rule_files": [str(path)],
        "evaluation_interval": "2s",
        "tests": [
            {
                "interval": "2s",
                "input_series": [{"series": series, "values": " ".join(map(str, counts))}],
                "promql_expr_test": checks,
            }
        ],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    result = subprocess.run(
        [binary("promtool"), "test", "rules", str(tmp_path / "t.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_kv_avalanches_window_holds_two_decks_on_a_slow_engine_and_is_unchanged_on_the_reference():
    kv, hol, miss = (scenarios.get(n) for n in ("kv-avalanche", "prefill-hol", "prefix-miss"))
    assert kv.recurrence(1.58) == pytest.approx(50 / 1.58)
    assert rules.min_range(2, kv.recurrence(1.58)) == pytest.approx(2 * 50 / 1.58)
    assert rules.min_range(2, kv.recurrence(12.0)) < 15  # the reference's rate: 5m at 20x as before
    assert hol.recurrence(1.0, 127.5) == 127.5 and hol.recurrence(1.0) == 15.0
    assert miss.recurrence(0.3) is None
