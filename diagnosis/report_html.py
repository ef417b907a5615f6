"""The HTML incident report: one self-contained page from a kvscope.diagnosis/v1 report (the
dict `report.to_dict` writes, as the webhook stores it), for `kvscope diagnose --format html`
and the webhook's `GET /reports/ID`.

Inline CSS and inline SVG drawn here; no script, no font, no image and no link that loads
anything (the page carries the same Content-Security-Policy the webhook sends). Every string
from the data (label values, PromQL, model names, summaries) is escaped: they are input from
whoever writes labels. The page shows, in order: the verdict, every incident (severity, onset,
trigger, scope, its evidence plotted over the window with the threshold and the onset, the
exact PromQL behind each number, the fix), the five triage steps, then what changed, the alerts,
the sources. A report's optional "history" (diagnosis/history.py) draws each evidence over
time; without it (a scrape, a bundle) each value is drawn against its threshold as a bar.
Rendering only: nothing here decides.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnosis.measures import BY_NAME
from kvscope.durations import parse_duration, parse_time

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# the verdict banner's background, by severity (the Chromium test looks for these pixels)
BANNER = {
    "critical": "#b42318",
    "warning": "#b54708",
    "info": "#175cd3",
    "ok": "#067647",
    "undiagnosable": "#475467",
}
_STATUS = {"ok": "#067647", "fail": "#b42318", "skipped": "#667085"}
_STATE = {
    "queued": "The diagnosis is still queued: reload in a moment.",
    "failed": "The diagnosis failed: see the receiver's log.",
}
_LINES = ("#175cd3", "#7a2e0e", "#6941c6", "#027a48", "#c11574", "#344054")
_HALO = ' paint-order="stroke" stroke="#fff" stroke-width="3" stroke-linejoin="round"'  # labels over lines
_THRESHOLD, _ONSET, _TRIGGER = "#d92d20", "#101828", "#6941c6"
# a narrow viewBox keeps the labels legible when a phone shrinks the plot to ~330 px
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 480, 210, 50, 10, 22, 34  # the plot's viewBox and margins

_CSS = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:#101828;background:#f2f4f7}
.verdict{color:#fff;padding:1.1rem 1.25rem 1.2rem}
.verdict .wrap{max-width:76rem;margin:0 auto}
.verdict .kicker{margin:0;font-size:.8rem;letter-spacing:.06em;text-transform:uppercase;opacity:.9}
.verdict h1{margin:.15rem 0 .3rem;font-size:1.75rem;line-height:1.2;overflow-wrap:anywhere}
.verdict .grade{display:inline-block;font-weight:600;background:rgba(255,255,255,.18);
border-radius:.3rem;padding:.05rem .5rem;margin-bottom:.4rem}
.verdict p{margin:.3rem 0;max-width:60rem;overflow-wrap:anywhere}
.verdict .meta{font-size:.85rem;opacity:.92}
.verdict .chip{background:rgba(255,255,255,.2);color:#fff}
main{max-width:76rem;margin:0 auto;padding:1rem}
section{margin:0 0 1.5rem}
h2{font-size:1.25rem;margin:1.2rem 0 .6rem}
h3{font-size:1rem;margin:1rem 0 .4rem}
.card{background:#fff;border:1px solid #d0d5dd;border-left:6px solid var(--sev,#667085);
border-radius:.5rem;padding:.9rem 1rem;margin:0 0 1rem;min-width:0}
.card h2{margin:0 0 .4rem;overflow-wrap:anywhere}
.badge{display:inline-block;color:#fff;border-radius:.3rem;padding:0 .45rem;font-size:.8rem;
font-weight:600;vertical-align:middle;background:var(--sev,#667085)}
.facts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,14rem),1fr));gap:.5rem 1rem;margin:.6rem 0}
.facts div{min-width:0}
.facts dt{font-size:.75rem;text-transform:uppercase;letter-spacing:.05em;color:#475467}
.facts dd{margin:0;overflow-wrap:anywhere}
.chip{display:inline-block;background:#eaecf0;border-radius:.3rem;padding:0 .35rem;margin:.1rem .2rem .1rem 0;
font:12.5px/1.6 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere;max-width:100%}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,28rem),1fr));gap:.8rem}
figure{margin:0;border:1px solid #eaecf0;border-radius:.4rem;padding:.5rem;background:#fcfcfd;min-width:0}
figure svg{display:block;width:100%;height:auto}.ptitle{margin:0 0 .2rem;font-weight:600}
figcaption{font-size:.85rem;margin-top:.3rem;min-width:0}
.num{font-variant-numeric:tabular-nums;font-weight:600}
.note{color:#475467;font-size:.85rem}
code,pre{font:12.5px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre.promql{margin:.25rem 0 0;padding:.35rem .5rem;background:#f2f4f7;border-radius:.3rem;
white-space:pre-wrap;overflow-wrap:anywhere;word-break:break-all}
ol.fix{margin:.2rem 0 0;padding-left:1.3rem}
ol.fix li{overflow-wrap:anywhere}
ol.steps{list-style:none;margin:0;padding:0;display:grid;gap:.5rem}
ol.steps li{background:#fff;border:1px solid #d0d5dd;border-radius:.5rem;padding:.6rem .8rem;
display:grid;grid-template-columns:2rem minmax(0,1fr);gap:.2rem .6rem}
ol.steps .n{font-weight:700;font-size:1.1rem}
ol.steps .detail{grid-column:2;overflow-wrap:anywhere;font-size:.92rem}
details{margin:.6rem 0;border-top:1px solid #eaecf0;padding-top:.4rem}
summary{cursor:pointer;font-weight:600;overflow-wrap:anywhere}
details.plotted{margin:.2rem 0 0;border:0;padding:0}details.plotted summary{font-weight:400}
.table{overflow-x:auto;background:#fff;border:1px solid #d0d5dd;border-radius:.5rem}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #eaecf0;vertical-align:top;overflow-wrap:anywhere}
th{background:#f9fafb;font-weight:600}
.healthy{border-left-color:#067647}
footer{max-width:76rem;margin:0 auto;padding:0 1rem 2rem;color:#667085;font-size:.8rem}
@media (max-width:40rem){body{font-size:14px}.verdict h1{font-size:1.35rem}main{padding:.6rem}
.card{padding:.6rem .55rem;border-left-width:4px}figure{padding:.3rem}th,td{padding:.3rem .4rem}}
"""


def _e(value: object) -> str:
    """Text from the data, safe in an element or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(value)
    v = float(value)
    if not math.isfinite(v):
        return _e(v)
    if v != 0 and (abs(v) >= 1e7 or abs(v) < 1e-3):
        return f"{v:.3g}"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _clock(at: float) -> str:
    return time.strftime("%H:%M", time.gmtime(at))


def _unix(text: object) -> float | None:
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _labels(labels: object) -> str:
    if not isinstance(labels, Mapping) or not labels:
        return ""
    return "".join(f'<span class="chip">{_e(k)}={_e(v)}</span>' for k, v in labels.items())


def _affected(entries: object) -> str:
    if not isinstance(entries, list) or not entries:
        return "the fleet"
    return "<br>".join(_labels(a) for a in entries if isinstance(a, Mapping))


def _sev(severity: object, bottleneck: object = None) -> str:
    if bottleneck == "insufficient_data":
        return "undiagnosable"
    return str(severity) if severity in BANNER else "ok"


def render(report: Mapping[str, Any], alert: Mapping[str, Any] | None = None) -> str:
    """The page for one diagnosis report (`report.to_dict`, optionally with "history"); `alert`:
    the Alertmanager alert the webhook diagnosed it for."""
    findings = [f for f in report.get("findings") or [] if isinstance(f, Mapping)]
    incidents = [i for i in report.get("incidents") or [] if isinstance(i, Mapping)]
    history = report.get("history") if isinstance(report.get("history"), Mapping) else None
    plots = _Plots(report, history)
    members, leftover = _members(incidents, findings)
    sev = _sev(report.get("severity"), report.get("bottleneck"))
    title = f"kvscope: {report.get('bottleneck', '?')} ({report.get('severity', '?')}) at {report.get('at', '?')}"
    body = [_verdict(report, sev, alert)]
    body.append("<main>")
    if incidents:
        body.append(f'<section id="incidents"><h2>{len(incidents)} incident{"s" if len(incidents) > 1 else ""}</h2>')
        for n, (incident, (causes, symptoms)) in enumerate(zip(incidents, members, strict=True), 1):
            own = [(i, findings[i]) for i in causes]
            body.append(_incident(n, incident, own, [(i, findings[i]) for i in symptoms], plots))
        body.append("</section>")
    else:
        verdict = "could not diagnose" if sev == "undiagnosable" else "healthy: no incident"
        body.append(
            f'<section id="incidents"><div class="card healthy" style="--sev:{BANNER[sev]}">'
            f"<h2>{_e(verdict)}</h2><p>{_e(report.get('summary', ''))}</p></div></section>"
        )
    if leftover:
        body.append('<section id="findings"><h2>Other findings</h2>')
        for i in leftover:
            body.append(_finding(i, findings[i], plots, open_=True))
        body.append("</section>")
    body.append(_steps(report.get("steps") or []))
    body.append(_changes(report.get("changes") or []))
    body.append(_alerts(report.get("alerts") or []))
    body.append(_sources(report))
    body.append("</main>")
    body.append(
        f"<footer>{_e(report.get('schema', ''))} &middot; rendered by kvscope diagnose &middot; "
        "this page loads nothing from the network</footer>"
    )
    return _page(title, sev, "".join(body))


def render_state(report_id: str, state: str, alert: Mapping[str, Any] | None = None) -> str:
    """The page for a webhook report that has no diagnosis (yet): queued, or failed."""
    labels = alert.get("labels") if isinstance(alert, Mapping) else None
    name = labels.get("alertname") if isinstance(labels, Mapping) else None
    body = (
        f'<header class="verdict" id="verdict" style="background:{BANNER["undiagnosable"]}"><div class="wrap">'
        f'<p class="kicker">kvscope diagnosis &middot; report {_e(report_id)}</p><h1>{_e(state)}</h1>'
        f"<p>{_e(_STATE.get(state, 'No diagnosis in this report.'))}</p>"
        f'<p class="meta">alert {_e(name or "?")} {_labels(labels)}</p></div></header>'
    )
    return _page(f"kvscope report {report_id}: {state}", "undiagnosable", body)


def _page(title: str, sev: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>"
        f'<body data-severity="{_e(sev)}">{body}</body></html>\n'
    )


def _verdict(report: Mapping[str, Any], sev: str, alert: Mapping[str, Any] | None) -> str:
    confidence = report.get("confidence")
    grade = f"{_e(str(report.get('severity', '?')).upper())} &middot; confidence {_num(confidence)}"
    meta = (
        f"at {_e(report.get('at', '?'))} &middot; window {_e(report.get('window', '?'))} &middot; "
        f"source {_e(report.get('source', '?'))}"
    )
    out = [
        f'<header class="verdict" id="verdict" style="background:{BANNER[sev]}"><div class="wrap">',
        '<p class="kicker">kvscope diagnosis</p>',
        f"<h1>{_e(report.get('bottleneck', '?'))}</h1>",
        f'<span class="grade">{grade}</span>',
        f"<p>{_e(report.get('summary', ''))}</p>",
    ]
    if report.get("affected"):
        out.append(f'<p class="meta">affected: {_affected(report.get("affected"))}</p>')
    if isinstance(alert, Mapping):
        raw = alert.get("labels")
        labels: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        out.append(f'<p class="meta">for alert {_e(labels.get("alertname", "?"))}: {_labels(labels)}</p>')
    out.append(f'<p class="meta">{meta}</p></div></header>')
    return "".join(out)


def _members(
    incidents: Sequence[Mapping[str, Any]], findings: Sequence[Mapping[str, Any]]
) -> tuple[list[tuple[list[int], list[int]]], list[int]]:
    """Each incident's cause findings and the symptoms it explains, by place in `findings` (the
    JSON keeps them apart: a finding is an incident's when its id is the incident's, or one the
    incident explains, and its affected entities are the incident's); the findings left over."""
    taken: set[int] = set()

    def inside(finding: Mapping[str, Any], incident: Mapping[str, Any]) -> bool:
        mine = incident.get("affected") or []
        return all(a in mine for a in finding.get("affected") or [])

    out = []
    for incident in incidents:
        causes = [
            i
            for i, f in enumerate(findings)
            if i not in taken and f.get("id") == incident.get("id") and inside(f, incident)
        ]
        if not causes:
            causes = [i for i, f in enumerate(findings) if i not in taken and f.get("id") == incident.get("id")][:1]
        taken.update(causes)
        explains = set(incident.get("explains") or [])
        symptoms = [
            i for i, f in enumerate(findings) if i not in taken and f.get("id") in explains and inside(f, incident)
        ]
        taken.update(symptoms)
        out.append((causes, symptoms))
    return out, [i for i in range(len(findings)) if i not in taken]


def _incident(
    n: int,
    incident: Mapping[str, Any],
    causes: list[tuple[int, Mapping[str, Any]]],
    symptoms: list[tuple[int, Mapping[str, Any]]],
    plots: _Plots,
) -> str:
    sev = _sev(incident.get("severity"))
    onset = incident.get("onset")
    trigger = incident.get("trigger") if isinstance(incident.get("trigger"), Mapping) else None
    if trigger:
        moved = f"{_e(trigger.get('signal', '?'))}: {_num(trigger.get('before'))} &rarr; {_num(trigger.get('after'))}"
        moved += f" at {_e(trigger['at'])}" if trigger.get("at") else " (time unknown)"
        trigger_text = moved + (f"<br>{_labels(trigger.get('scope'))}" if trigger.get("scope") else "")
    else:
        trigger_text = "none found: nothing in the load or the configuration moved before it"
    scope = ", ".join(str(s) for s in incident.get("scope") or [] if s) or "the fleet"
    facts = [
        ("severity", f'<span class="badge" style="--sev:{BANNER[sev]}">{_e(incident.get("severity"))}</span>'),
        ("confidence", f'<span class="num">{_num(incident.get("confidence"))}</span>'),
        ("onset", _e(onset) if onset else "unknown (no history in this source)"),
        ("trigger", trigger_text),
        ("scope", _e(scope)),
        ("affected", _affected(incident.get("affected"))),
        ("explains", _e(", ".join(str(x) for x in incident.get("explains") or []) or "nothing else")),
    ]
    marks = _Marks(_unix(onset), _unix(trigger.get("at")) if trigger else None)
    out = [
        f'<article class="card incident" id="incident-{n}" style="--sev:{BANNER[sev]}">',
        f'<h2>{n} &middot; {_e(incident.get("id"))} <span class="badge">{_e(incident.get("severity"))}</span></h2>',
        f"<p>{_e(incident.get('summary', ''))}</p>",
        '<dl class="facts">' + "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts) + "</dl>",
    ]
    for i, finding in causes:
        out.append(_evidence_and_fix(i, finding, plots, marks, own=len(causes) == 1))
    for i, finding in symptoms:
        out.append(_finding(i, finding, plots, marks=marks, symptom=True))
    out.append("</article>")
    return "".join(out)


def _finding(
    index: int,
    finding: Mapping[str, Any],
    plots: _Plots,
    marks: _Marks | None = None,
    symptom: bool = False,
    open_: bool = False,
) -> str:
    kind = "explains" if symptom else "finding"
    head = (
        f"{kind}: {_e(finding.get('id'))} ({_e(finding.get('severity'))}, confidence "
        f"{_num(finding.get('confidence'))}) &mdash; {_e(finding.get('summary', ''))}"
    )
    return (
        f"<details{' open' if open_ else ''}><summary>{head}</summary>"
        f"{_evidence_and_fix(index, finding, plots, marks or _Marks(None, None), own=False)}</details>"
    )


def _evidence_and_fix(index: int, finding: Mapping[str, Any], plots: _Plots, marks: _Marks, own: bool) -> str:
    evidence = [e for e in finding.get("evidence") or [] if isinstance(e, Mapping)]
    out = []
    if not own:
        out.append(f"<h3>{_e(finding.get('id'))} on {_affected(finding.get('affected'))}</h3>")
    out.append('<h3>Evidence</h3><div class="plots">')
    for ei, e in enumerate(evidence):
        out.append(plots.figure(index, ei, e, marks, _sev(finding.get("severity"))))
    out.append("</div>")
    fixes = [r for r in finding.get("remediation") or []]
    if fixes:
        out.append('<h3>Fix</h3><ol class="fix">' + "".join(f"<li>{_e(r)}</li>" for r in fixes) + "</ol>")
    return "".join(out)


@dataclass(frozen=True)
class _Marks:
    """The times an incident's plots mark: its onset and its trigger's move (unix seconds)."""

    onset: float | None
    trigger: float | None


class _Plots:
    """Draws each evidence: over time when the report's history has it, else as a bar."""

    def __init__(self, report: Mapping[str, Any], history: Mapping[str, Any] | None) -> None:
        self.history = history
        self.series: dict[tuple[int, int], Mapping[str, Any]] = {}
        for s in (history or {}).get("series") or []:
            if isinstance(s, Mapping) and isinstance(s.get("finding"), int) and isinstance(s.get("evidence"), int):
                self.series[(s["finding"], s["evidence"])] = s
        self.window = _window_seconds(report.get("window"))

    def figure(self, fi: int, ei: int, e: Mapping[str, Any], marks: _Marks, sev: str) -> str:
        value, threshold = e.get("value"), e.get("threshold")
        caption = [
            f'<span class="num">{_num(value)}</span>',
            f' against threshold <span class="num">{_num(threshold)}</span>'
            if threshold is not None
            else " (context: no threshold)",
        ]
        if e.get("labels"):
            caption.append(f"<br>{_labels(e.get('labels'))}")
        caption.append(f'<br>the number: <pre class="promql">{_e(e.get("query", ""))}</pre>')
        drawn = self.series.get((fi, ei))
        lines = [ln for ln in (drawn or {}).get("lines") or [] if isinstance(ln, Mapping) and _drawable(ln)]
        if drawn is not None and lines and self.history is not None:
            svg = _plot(self.history, lines, _float(threshold), marks, self.window, e.get("query", ""))
            caption.append(
                f'<details class="plotted"><summary class="note">plotted: the same measure over '
                f"{_num(self.history.get('short'))} s at each step</summary>"
                f'<pre class="promql">{_e(drawn.get("query", ""))}</pre></details>'
            )
            if len(lines) > 1:
                caption.append(
                    '<span class="note">lines: '
                    + "; ".join(
                        f'<span style="color:{_LINES[k % len(_LINES)]}">&#9632;</span> {_labels(ln.get("labels"))}'
                        for k, ln in enumerate(lines)
                    )
                    + "</span>"
                )
        else:
            svg = _bar(_float(value), _float(threshold), sev, e.get("query", ""))
            why = (
                "no samples in the range for this series"
                if drawn is not None
                else "no history with this report (a scrape or a bundle holds one value per signal over its window)"
            )
            caption.append(f'<span class="note">{why}: the value is drawn against its threshold</span>')
        return f"<figure>{_heading(e)}{svg}<figcaption>{''.join(caption)}</figcaption></figure>"


def _heading(e: Mapping[str, Any]) -> str:
    """A plot's title: what the measure is, in words, and its name (the query is in the caption)."""
    name = str(e.get("measure") or "")
    words = BY_NAME[name].help if name in BY_NAME and BY_NAME[name].help else name or "evidence"
    return f'<p class="ptitle">{_e(words[:1].upper() + words[1:])}' + (
        f" <code>{_e(name)}</code></p>" if name and name != words else "</p>"
    )


def _drawable(line: Mapping[str, Any]) -> bool:
    points = line.get("points")
    return isinstance(points, list) and any(_point(p) for p in points)


def _point(p: object) -> tuple[float, float] | None:
    if not isinstance(p, list | tuple) or len(p) != 2:
        return None
    t, v = _float(p[0]), _float(p[1])
    return None if t is None or v is None else (t, v)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _window_seconds(text: object) -> float | None:
    try:
        return parse_duration(str(text)) if text else None
    except ValueError:
        return None


def _ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    raw = (hi - lo) / count
    if raw <= 0:
        return [lo]
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _plot(
    history: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    threshold: float | None,
    marks: _Marks,
    window: float | None,
    query: object,
) -> str:
    start, end = _float(history.get("start")), _float(history.get("end"))
    step = _float(history.get("step")) or 15.0
    points = [[p for p in map(_point, ln["points"]) if p is not None] for ln in lines]
    values = [v for pts in points for _, v in pts]
    times = [t for pts in points for t, _ in pts]
    if start is None or end is None or end <= start:
        start, end = min(times), max(times) + step
    lo = min([*values, *([threshold] if threshold is not None else [])])
    hi = max([*values, *([threshold] if threshold is not None else [])])
    lo = min(lo, 0.0) if lo >= 0 else lo - (hi - lo) * 0.08
    hi = hi + (hi - lo) * 0.1 if hi > lo else lo + 1.0
    width, height = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + (min(max(t, start), end) - start) / (end - start) * width

    def y(v: float) -> float:
        return _TOP + (hi - v) / (hi - lo) * height

    out = [
        f'<svg class="plot" viewBox="0 0 {_W} {_H}" role="img" xmlns="http://www.w3.org/2000/svg" '
        'font-family="system-ui,sans-serif" font-size="14">',
        f"<title>{_e(query)}</title>",
        f'<rect x="{_LEFT}" y="{_TOP}" width="{width}" height="{height}" fill="#fff" stroke="#d0d5dd"/>',
    ]
    if window is not None and end - window > start:
        wx = x(end - window)
        out.append(
            f'<rect x="{wx:.1f}" y="{_TOP}" width="{_LEFT + width - wx:.1f}" height="{height}" fill="#eff4ff"/>'
            f'<text x="{wx + 4:.1f}" y="{_TOP + 13}" fill="#475467" font-size="11">window</text>'
            f'<text x="{_LEFT + 4}" y="{_TOP + 13}" fill="#475467" font-size="11">baseline</text>'
        )
    for v in _ticks(lo, hi):
        out.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + width}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eaecf0"/>'
            f'<text x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#475467">{_num(v)}</text>'
        )
    for k in range(5):
        t = start + (end - start) * k / 4
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        out.append(f'<text x="{x(t):.1f}" y="{_H - 12}" text-anchor="{anchor}" fill="#475467">{_clock(t)}</text>')
    out.append(f'<text x="{_LEFT + width}" y="{_H - 1}" text-anchor="end" fill="#667085" font-size="10">UTC</text>')
    for k, pts in enumerate(points):
        colour = _LINES[k % len(_LINES)]
        for run in _runs(pts, step):
            if len(run) == 1:
                out.append(f'<circle cx="{x(run[0][0]):.1f}" cy="{y(run[0][1]):.1f}" r="2.5" fill="{colour}"/>')
            else:
                path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in run)
                out.append(
                    f'<polyline class="series" points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
                    'stroke-linejoin="round"/>'
                )
    if threshold is not None:
        ty = y(threshold)
        out.append(
            f'<line class="threshold" x1="{_LEFT}" x2="{_LEFT + width}" y1="{ty:.1f}" y2="{ty:.1f}" '
            f'stroke="{_THRESHOLD}" stroke-width="1.5" stroke-dasharray="6 4"/>'
            f'<text x="{_LEFT + width - 4}" y="{ty - 4:.1f}" text-anchor="end" fill="{_THRESHOLD}"{_HALO}>'
            f"threshold {_num(threshold)}</text>"
        )
    for when, label, colour, dash in (
        (marks.trigger, "trigger", _TRIGGER, ' stroke-dasharray="3 3"'),
        (marks.onset, "onset", _ONSET, ""),
    ):
        if when is None or not start <= when <= end:
            continue
        mx = x(when)
        anchor = "end" if mx > _LEFT + width * 0.8 else "start"
        shift = -4 if anchor == "end" else 4
        ly = _TOP - 6 if label == "onset" else _TOP + height - 6  # the trigger's at the foot, clear of the onset's
        out.append(
            f'<line class="{label}" x1="{mx:.1f}" x2="{mx:.1f}" y1="{_TOP}" y2="{_TOP + height}" stroke="{colour}" '
            f'stroke-width="1.5"{dash}/>'
            f'<text x="{mx + shift:.1f}" y="{ly}" text-anchor="{anchor}" fill="{colour}" font-weight="600"{_HALO}>'
            f"{label} {_clock(when)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _runs(points: Iterable[tuple[float, float]], step: float) -> list[list[tuple[float, float]]]:
    """The points split where a scrape gap leaves more than two steps without a sample."""
    runs: list[list[tuple[float, float]]] = []
    for t, v in points:
        if runs and t - runs[-1][-1][0] <= 2.5 * step:
            runs[-1].append((t, v))
        else:
            runs.append([(t, v)])
    return runs


def _bar(value: float | None, threshold: float | None, sev: str, query: object) -> str:
    height, left, right = 64, 12, 12
    width = _W - left - right
    known = [v for v in (value, threshold) if v is not None]
    lo = min([0.0, *known])
    hi = max([0.0, *known]) * 1.2 if max([0.0, *known]) > 0 else 1.0
    span = hi - lo or 1.0

    def x(v: float) -> float:
        return left + (v - lo) / span * width

    out = [
        f'<svg class="plot bar" viewBox="0 0 {_W} {height}" role="img" xmlns="http://www.w3.org/2000/svg" '
        'font-family="system-ui,sans-serif" font-size="14">',
        f"<title>{_e(query)}</title>",
        f'<rect x="{left}" y="18" width="{width}" height="22" fill="#f2f4f7" rx="3"/>',
    ]
    if value is not None:
        a, b = sorted((x(0.0), x(value)))
        out.append(
            f'<rect class="value" x="{a:.1f}" y="18" width="{max(b - a, 1.5):.1f}" height="22" '
            f'fill="{BANNER[sev]}" rx="3"/>'
            f'<text x="{left}" y="12" fill="#101828" font-weight="600">value {_num(value)}</text>'
        )
    if threshold is not None:
        tx = x(threshold)
        anchor = "end" if tx > left + width * 0.7 else "start"
        out.append(
            f'<line class="threshold" x1="{tx:.1f}" x2="{tx:.1f}" y1="12" y2="46" stroke="{_THRESHOLD}" '
            'stroke-width="2" stroke-dasharray="4 3"/>'
            f'<text x="{tx + (-4 if anchor == "end" else 4):.1f}" y="58" text-anchor="{anchor}" '
            f'fill="{_THRESHOLD}">threshold {_num(threshold)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _steps(steps: Sequence[Any]) -> str:
    items = []
    for s in steps:
        if not isinstance(s, Mapping):
            continue
        status = str(s.get("status", "skipped"))
        colour = _STATUS.get(status, "#667085")
        items.append(
            f'<li class="step-{_e(status)}"><span class="n">{_e(s.get("step"))}</span>'
            f'<span><strong>{_e(s.get("name"))}</strong> <span class="badge" style="--sev:{colour}">'
            f'{_e(status)}</span></span><span class="detail">{_e(s.get("detail", ""))}</span></li>'
        )
    return f'<section id="triage"><h2>The five-step triage</h2><ol class="steps">{"".join(items)}</ol></section>'


def _table(section: str, title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return ""
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<section id="{section}"><h2>{title}</h2><div class="table"><table><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr></thead><tbody>{cells}</tbody></table></div></section>"
    )


def _changes(changes: Sequence[Any]) -> str:
    rows = [
        [
            _e(c.get("signal")),
            _labels(c.get("scope")),
            _num(c.get("before")),
            _num(c.get("after")),
            _e(c.get("at") or "-"),
        ]
        for c in changes
        if isinstance(c, Mapping)
    ]
    head = ("signal", "scope", "before", "after", "at")
    return _table("changes", "What changed (against the baseline before the window)", head, rows)


def _alerts(alerts: Sequence[Any]) -> str:
    rows = [
        [
            _e(a.get("alertname")),
            _labels(a.get("labels")),
            _e(a.get("explained_by") or "nothing") + (f"<br>{_e(a['why'])}" if a.get("why") else ""),
        ]
        for a in alerts
        if isinstance(a, Mapping)
    ]
    return _table("alerts", "Firing alerts", ("alert", "labels", "explained by"), rows)


def _sources(report: Mapping[str, Any]) -> str:
    rows = [
        [_e(s.get("source")), _e(s.get("status")), _e(s.get("detail", ""))]
        for s in report.get("sources") or []
        if isinstance(s, Mapping)
    ]
    out = _table("sources", "Sources", ("source", "status", "detail"), rows)
    extra = [f"<li>{_e(n)}</li>" for n in report.get("notes") or []]
    if report.get("missing"):
        extra.append(f"<li>missing: {_e(', '.join(str(m) for m in report['missing']))}</li>")
    errors = ((report.get("history") or {}) if isinstance(report.get("history"), Mapping) else {}).get("errors")
    extra += [f"<li>plot not drawn: {_e(x)}</li>" for x in errors or []]
    if extra:
        out += f'<section id="notes"><h2>Notes</h2><ul class="note">{"".join(extra)}</ul></section>'
    return out
