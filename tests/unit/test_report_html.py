"""The HTML incident report (`kvscope diagnose --format html`): one self-contained page with every
incident's severity, onset, trigger, scope, evidence (plotted with its threshold and onset), the
exact PromQL behind each number, the fix and the five triage steps; whatever the data holds is
shown as text, never run."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from diagnosis import report, report_html
from diagnosis.findings import Evidence, Finding, Severity
from diagnosis.incidents import Incident
from diagnosis.verdict import STEP_NAMES, Diagnosis, Step
from kvscope import catalog, exitcodes
from kvscope.cli import main

AT = 1796004000.0
HOSTILE = '<script>alert("x")</script>'
POD = {"namespace": "prod", "pod": f"vllm-{HOSTILE}", "instance": "10.0.0.1:8000"}
KV_QUERY = f'max by (pod) (max_over_time({catalog.VLLM_KV_CACHE_USAGE.name}{{pod="vllm-{HOSTILE}"}}[30m])) & 1'
PREEMPT_QUERY = f"sum by (pod) (rate({catalog.VLLM_NUM_PREEMPTIONS.name}[30m]))"
FIXES = ["cap concurrency with --max-num-seqs 38", "grow the KV pool: --kv-cache-dtype fp8 <fast>"]


def _kv_finding() -> Finding:
    return Finding(
        "kv_cache_exhaustion",
        Severity.CRITICAL,
        0.95,
        f"KV cache full on {HOSTILE}",
        affected=[POD],
        evidence=[
            Evidence(KV_QUERY, 0.98, 0.9, POD, measure="kv_usage_max"),
            Evidence(PREEMPT_QUERY, 0.8, 0.05, POD, measure="preemption_rate"),
        ],
        remediation=FIXES,
        scope="vllm-a",
    )


def _xid_finding() -> Finding:
    gpu = {"Hostname": "node-b", "gpu": "0"}
    return Finding(
        "gpu_hardware_fault",
        Severity.CRITICAL,
        0.9,
        "GPU 0 on node-b: XID 79",
        affected=[gpu],
        evidence=[Evidence(f"max({catalog.DCGM_XID_ERRORS.name})", 79, 0, gpu, measure="xid_last")],
        remediation=["drain node-b and reset the GPU"],
        scope="node-b",
    )


def _steps() -> list[Step]:
    return [
        Step(n, name, "fail" if n == 1 else "ok", f"detail of {name} {HOSTILE}") for n, name in enumerate(STEP_NAMES, 1)
    ]


def _two_incidents() -> Diagnosis:
    kv, xid = _kv_finding(), _xid_finding()
    first = Incident(kv.id, kv.severity, kv.confidence, kv.summary, ["vllm-a"], kv, onset=AT - 600)
    first.trigger = {"signal": "prompt_tokens_mean", "before": 6400, "after": 11800, "at": AT - 660, "scope": POD}
    second = Incident(xid.id, xid.severity, xid.confidence, xid.summary, ["node-b"], xid, onset=AT - 120)
    return Diagnosis(
        AT,
        1800,
        "http://prometheus:9090",
        kv.id,
        Severity.CRITICAL,
        0.95,
        "KV cache full; 1 more incident",
        affected=[POD],
        steps=_steps(),
        findings=[xid, kv],
        incidents=[first, second],
    )


class _Text(HTMLParser):
    """The page's text as a reader sees it, and the PromQL blocks' text."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.promql: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._in_promql = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "pre" and ("class", "promql") in attrs:
            self._in_promql = True
            self.promql.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._in_promql = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_promql:
            self.promql[-1] += data


def _read(page: str) -> _Text:
    parsed = _Text()
    parsed.feed(page)
    return parsed


def test_hostile_label_values_and_summaries_render_as_text():
    page = report.render_html(_two_incidents())
    parsed = _read(page)
    assert [tag for tag, _ in parsed.tags if tag == "script"] == []
    assert "<script>" not in page and html.escape(HOSTILE) in page
    assert HOSTILE in "".join(parsed.text)  # the reader sees the label as it is


def test_every_incident_shows_severity_onset_trigger_scope_and_fix():
    diagnosis = _two_incidents()
    text = " ".join(_read(report.render_html(diagnosis)).text)
    data = report.to_dict(diagnosis)
    for incident in data["incidents"]:
        assert incident["id"] in text and incident["onset"] in text
        assert incident["severity"] in text and incident["summary"] in text
        assert all(scope in text for scope in incident["scope"])
    assert "prompt_tokens_mean" in text and "6,400" in text and "11,800" in text
    assert data["incidents"][0]["trigger"]["at"] in text
    for fix in [*FIXES, "drain node-b and reset the GPU"]:
        assert fix in text


def test_the_promql_behind_each_number_is_shown_verbatim():
    blocks = _read(report.render_html(_two_incidents())).promql
    for query in (KV_QUERY, PREEMPT_QUERY, f"max({catalog.DCGM_XID_ERRORS.name})"):
        assert query in blocks


def test_every_plot_has_a_title_naming_its_measure():
    from diagnosis.measures import BY_NAME

    page = report.render_html(_two_incidents())
    assert page.count('<p class="ptitle">') == page.count("<figure>") == 3
    for name in ("kv_usage_max", "preemption_rate", "xid_last"):
        words = BY_NAME[name].help
        assert f"{words[:1].upper()}{words[1:]} <code>{name}</code>" in page


def test_the_five_triage_steps_are_listed_in_order():
    page = report.render_html(_two_incidents())
    text = " ".join(_read(page).text)
    places = [text.index(f"detail of {name} {HOSTILE}") for name in STEP_NAMES]
    assert places == sorted(places) and len(STEP_NAMES) == 5


def test_a_report_without_incidents_says_healthy():
    healthy = Diagnosis(AT, 1800, "bundle b.json", "healthy", Severity.OK, 0.9, "healthy: all within", steps=_steps())
    page = report.render_html(healthy)
    banner = re.search(r'<header class="verdict" id="verdict" style="background:([^"]+)"', page)
    assert banner and banner.group(1) == report_html.BANNER["ok"]
    text = " ".join(_read(page).text)
    assert "healthy: no incident" in text and "healthy: all within" in text and "incident 1" not in text


def test_the_page_loads_nothing():
    page = report.render_html(_two_incidents())
    for tag, attrs in _read(page).tags:
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            value = attrs.get(name)
            assert value is None or value.startswith("data:") or value.startswith("#"), (tag, name, value)
    assert "url(" not in page and "@import" not in page and "<script" not in page
    assert f'content="{report_html.CSP}"' in page and 'name="viewport"' in page


def test_with_history_each_evidence_is_plotted_with_its_threshold_and_onset():
    diagnosis = _two_incidents()
    steps = [[AT - 3600 + 60 * k, 0.5 if k < 50 else 0.97] for k in range(61)]
    history = {
        "start": AT - 3600,
        "end": AT,
        "step": 60.0,
        "short": 120.0,
        "series": [
            {"finding": 1, "evidence": 0, "query": "plotted-query", "lines": [{"labels": POD, "points": steps}]}
        ],
        "errors": [],
    }
    page = report.render_html(diagnosis, history)
    kv_card = page[page.index('id="incident-1"') : page.index('id="incident-2"')]
    plot = kv_card[kv_card.index('<svg class="plot"') :]
    plot = plot[: plot.index("</svg>")]
    assert 'class="series"' in plot and 'class="threshold"' in plot and 'class="onset"' in plot
    assert 'class="trigger"' in plot and "threshold 0.9" in plot
    # the preemption evidence has no history: drawn as a bar against its threshold, and said so
    assert 'class="plot bar"' in kv_card and "no history with this report" in kv_card


def test_without_history_every_value_is_a_bar_against_its_threshold():
    page = report.render_html(_two_incidents())
    assert page.count('class="plot bar"') == 3 and 'class="series"' not in page
    assert page.count("no history with this report") == 3


def test_a_stored_webhook_report_renders_from_its_json():
    data = json.loads(report.to_json(_two_incidents()))
    page = report_html.render(data, alert={"labels": {"alertname": "VLLMKVCacheFull", "namespace": HOSTILE}})
    text = " ".join(_read(page).text)
    assert "VLLMKVCacheFull" in text and HOSTILE in text and "<script>" not in page


ENGINE = {"instance": "10.0.0.1:8000", "pod": f"vllm-{HOSTILE}", "namespace": "prod", "model_name": "m"}


def _bundle(path: Path) -> Path:
    values = {"kv_usage_max": 0.97, "preemption_rate": 0.4, "waiting_max": 150, "running_max": 8}
    measurements = {name: [{"value": v, "labels": ENGINE, "query": f"q:{name}"}] for name, v in values.items()}
    path.write_text(
        json.dumps(
            {"schema": "kvscope.bundle/v1", "at": AT, "window": 1800, "source": "t", "measurements": measurements}
        )
    )
    return path


def test_diagnose_format_html_writes_the_page_to_out(tmp_path, capsys):
    out = tmp_path / "report.html"
    code = main(["diagnose", "--bundle", str(_bundle(tmp_path / "b.json")), "--format", "html", "--out", str(out)])
    assert code == exitcodes.CRITICAL and capsys.readouterr().out == ""
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "kv_cache_exhaustion" in page and "<script>" not in page
    assert "q:kv_usage_max" in _read(page).promql


def test_diagnose_format_html_prints_to_stdout_without_out(tmp_path, capsys):
    code = main(["diagnose", "--bundle", str(_bundle(tmp_path / "b.json")), "--format", "html"])
    assert code == exitcodes.CRITICAL and capsys.readouterr().out.startswith("<!doctype html>")


def test_an_unusable_source_still_gives_a_page(tmp_path, capsys):
    out = tmp_path / "report.html"
    code = main(["diagnose", "--bundle", str(tmp_path / "absent.json"), "--format", "html", "--out", str(out)])
    assert code == exitcodes.UNDIAGNOSABLE
    assert "insufficient_data" in out.read_text() and "absent.json" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["json", "markdown", "text"])
def test_out_takes_every_format(tmp_path, capsys, fmt):
    out = tmp_path / "report"
    main(["diagnose", "--bundle", str(_bundle(tmp_path / "b.json")), "--format", fmt, "--out", str(out)])
    assert "kv_cache_exhaustion" in out.read_text() and capsys.readouterr().out == ""


def test_an_unwritable_out_is_a_usage_error_in_one_line(tmp_path, capsys):
    out = tmp_path / "missing-dir" / "report.html"
    code = main(["diagnose", "--bundle", str(_bundle(tmp_path / "b.json")), "--format", "html", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == exitcodes.USAGE and "--out" in err and len(err.splitlines()) == 1


def test_out_with_listen_is_a_usage_error(tmp_path, capsys):
    argv = ["diagnose", "--prometheus", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--out", str(tmp_path / "r")]
    assert main(argv) == exitcodes.USAGE and "--out" in capsys.readouterr().err
