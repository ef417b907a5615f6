"""Rendering a diagnosis: JSON (the fixed kvscope.diagnosis/v1 schema), rich text for a terminal
(the triage walk first, then the verdict), Markdown for an incident channel. Renderers never
decide."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from diagnosis.changes import Change, sentence
from diagnosis.findings import SCHEMA, Finding
from diagnosis.incidents import Incident
from diagnosis.verdict import Diagnosis
from kvscope.durations import format_duration, rfc3339

_STYLE = {
    "ok": "green",
    "info": "cyan",
    "warning": "yellow",
    "critical": "bold red",
    "fail": "red",
    "skipped": "dim",
}


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity.value,
        "confidence": f.confidence,
        "summary": f.summary,
        "affected": f.affected,
        "evidence": [
            {"query": e.query, "value": e.value, "threshold": e.threshold, "labels": e.labels, "measure": e.measure}
            for e in f.evidence
        ],
        "remediation": f.remediation,
    }


def _when(at: object) -> str | None:
    return rfc3339(float(at)) if isinstance(at, int | float) else None


def _incident(i: Incident) -> dict[str, Any]:
    trigger = None
    if i.trigger:
        trigger = {**i.trigger, "at": _when(i.trigger.get("at"))}
    return {
        "id": i.id,
        "severity": i.severity.value,
        "confidence": i.confidence,
        "onset": _when(i.onset),
        "status": i.status,
        **({"ended": _when(i.ended)} if i.ended is not None else {}),
        "summary": i.summary,
        "affected": i.affected,
        "scope": [s for s in i.scopes if s],
        "explains": i.explains,
        "trigger": trigger,
    }


def _change(c: Change) -> dict[str, Any]:
    return {"signal": c.signal, "scope": c.scope, "before": c.before, "after": c.after, "at": _when(c.at)}


def to_dict(d: Diagnosis) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "at": rfc3339(d.at),
        "window": format_duration(d.window),
        "source": d.source,
        "bottleneck": d.bottleneck,
        "severity": d.severity.value,
        "confidence": d.confidence,
        "summary": d.summary,
        "affected": d.affected,
        "steps": [{"step": s.step, "name": s.name, "status": s.status, "detail": s.detail} for s in d.steps],
        "findings": [_finding(f) for f in d.findings],
        "incidents": [_incident(i) for i in d.incidents],
        "changes": [_change(c) for c in d.changes],
        "alerts": d.alerts,
        "sources": d.sources,
    }
    if d.notes:
        out["notes"] = d.notes
    if d.missing:
        out["missing"] = d.missing
    return out


def to_json(d: Diagnosis) -> str:
    return json.dumps(to_dict(d), indent=2)


def _value(v: float) -> str:
    return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.3e}"


def render_text(d: Diagnosis, console: Console) -> None:
    steps = Table(
        title=f"five-step triage at {rfc3339(d.at)} over {format_duration(d.window)} ({d.source})",
        title_justify="left",
        expand=True,
    )
    steps.add_column("#", width=2)
    steps.add_column("step", width=22)
    steps.add_column("status", width=8)
    steps.add_column("detail", overflow="fold")
    for s in d.steps:
        steps.add_row(str(s.step), s.name, Text(s.status, style=_STYLE[s.status]), s.detail)
    console.print(steps)
    head = Text.assemble(
        ("bottleneck: ", "bold"),
        (d.bottleneck, _STYLE.get(d.severity.value, "")),
        f"   severity {d.severity.value}   confidence {d.confidence:.2f}",
    )
    parts: list[Any] = [head, Text(d.summary)]
    if d.affected:
        parts.append(Text("affected: " + "; ".join(", ".join(f"{k}={v}" for k, v in a.items()) for a in d.affected)))
    console.print(Panel(Group(*parts), title="verdict", border_style=_STYLE.get(d.severity.value, "white")))
    if d.incidents:
        _incidents(d, console)
    for c in d.changes[:8]:
        console.print(f"  changed on {c.where}: {sentence(c, d.changes)}", highlight=False)
    for a in d.alerts:
        console.print(f"  alert {a['alertname']}: explained by {a.get('explained_by') or 'nothing'}", highlight=False)
    for src in d.sources:
        if src.get("status") != "ok":
            console.print(f"  source {src['source']}: {src['status']} ({src.get('detail', '')})", style="yellow")
    for f in d.findings:
        table = Table(
            show_header=True,
            expand=True,
            title=f"{f.id} ({f.severity.value}, confidence {f.confidence:.2f})",
            title_justify="left",
        )
        table.add_column("evidence", overflow="fold")
        table.add_column("value", justify="right", width=12)
        table.add_column("threshold", justify="right", width=12)
        for e in f.evidence:
            table.add_row(e.query, _value(e.value), "" if e.threshold is None else _value(e.threshold))
        console.print(table)
        for step in f.remediation:
            console.print(f"  fix: {step}", highlight=False)
    if d.missing:
        console.print(f"missing: {', '.join(d.missing)}", style="red")


WIDE = 120  # columns from which the incidents are a table; narrower, one block each (wrapped)


def _incidents(d: Diagnosis, console: Console) -> None:
    """The incidents, never truncated: a table on a wide terminal, else a block per incident
    (its id, severity, status, scope and onset on one line, the summary wrapped under it)."""
    rows = [
        (
            str(n),
            i.id,
            i.severity.value,
            i.status,
            ", ".join(s for s in i.scopes if s) or "fleet",
            _when(i.onset) or "-",
            i.summary + (f" (explains {', '.join(i.explains)})" if i.explains else ""),
        )
        for n, i in enumerate(d.incidents, 1)
    ]
    if console.width >= WIDE:
        table = Table(title=f"{len(d.incidents)} incident(s)", title_justify="left", expand=True)
        for column in ("#", "incident", "severity", "status", "scope", "onset"):
            table.add_column(column, overflow="fold", no_wrap=column in ("#", "severity", "status"))
        table.add_column("summary", overflow="fold", ratio=1)
        for n, kind, severity, status, scope, onset, summary in rows:
            table.add_row(n, kind, Text(severity, style=_STYLE[severity]), status, scope, onset, summary)
        console.print(table)
        return
    console.print(Text(f"{len(d.incidents)} incident(s)", style="bold"))
    for n, kind, severity, status, scope, onset, summary in rows:
        head = Text.assemble(f"{n}. ", (kind, "bold"), "  ", (severity, _STYLE[severity]), f"  {status}  on {scope}")
        if onset != "-":
            head.append(f"  since {onset}")
        console.print(head, overflow="fold")
        console.print(Padding(Text(summary), (0, 0, 0, 3)), overflow="fold")


def render_markdown(d: Diagnosis) -> str:
    icon = {"ok": "OK", "info": "INFO", "warning": "WARNING", "critical": "CRITICAL"}[d.severity.value]
    lines = [
        f"### kvscope diagnosis: `{d.bottleneck}` ({icon}, confidence {d.confidence:.2f})",
        "",
        d.summary,
        "",
        f"At {rfc3339(d.at)}, window {format_duration(d.window)}, source `{d.source}`.",
    ]
    if d.affected:
        lines += [
            "",
            "**Affected:** " + "; ".join(", ".join(f"`{k}={v}`" for k, v in a.items()) for a in d.affected),
        ]
    if d.incidents:
        lines += ["", "| # | incident | severity | scope | onset | summary |", "| --- | --- | --- | --- | --- | --- |"]
        for n, i in enumerate(d.incidents, 1):
            scope = ", ".join(s for s in i.scopes if s) or "fleet"
            summary = (i.summary + (f" (explains {', '.join(i.explains)})" if i.explains else "")).replace("|", "/")
            lines.append(f"| {n} | `{i.id}` | {i.severity.value} | {scope} | {_when(i.onset) or '-'} | {summary} |")
    if d.changes:
        lines += ["", "**What changed** (against the baseline before the window):"]
        lines += [f"- {c.where}: `{c.signal}` {c.before} -> {c.after}" for c in d.changes[:8]]
    if d.alerts:
        lines += ["", "**Firing alerts:**"]
        lines += [f"- `{a['alertname']}`: explained by `{a.get('explained_by') or 'nothing'}`" for a in d.alerts]
    bad = [src for src in d.sources if src.get("status") != "ok"]
    if bad:
        lines += ["", "**Sources:**"] + [f"- `{b['source']}`: {b['status']} ({b.get('detail', '')})" for b in bad]
    lines += ["", "| # | triage step | status | detail |", "| --- | --- | --- | --- |"]
    lines += [f"| {s.step} | {s.name} | {s.status} | {s.detail.replace('|', '/')} |" for s in d.steps]
    for f in d.findings:
        lines += [
            "",
            f"#### {f.id} ({f.severity.value}, confidence {f.confidence:.2f})",
            "",
            f.summary,
            "",
            "| evidence | value | threshold |",
            "| --- | --- | --- |",
        ]
        lines += [
            f"| `{e.query.replace('|', '/')}` | {_value(e.value)} | "
            f"{'' if e.threshold is None else _value(e.threshold)} |"
            for e in f.evidence
        ]
        lines += ["", "Fix:"] + [f"- {r}" for r in f.remediation]
    if d.missing:
        lines += ["", f"Missing: {', '.join(d.missing)}"]
    return "\n".join(lines) + "\n"


def render_html(d: Diagnosis, history: dict[str, Any] | None = None) -> str:
    """One self-contained HTML page (diagnosis/report_html.py); `history` (diagnosis/history.py)
    plots each evidence over time, without it each value is drawn against its threshold."""
    from diagnosis import report_html

    data = to_dict(d)
    if history is not None:
        data["history"] = history
    return report_html.render(data)
