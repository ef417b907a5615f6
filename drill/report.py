"""The drill's report folder: summary.md, results.json, and per profile a PNG (KV usage,
waiting requests, preemptions and TTFT p99 over time, the change and alert firing times
marked), requests-PROFILE.csv (one row per request) and the notifications that reached the
on-call receiver (Alertmanager -> `kvscope diagnose --listen` -> `--forward`)."""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drill.calibrate import Calibration
from drill.report_dir import ReportDir
from drill.results import ProfileRun, comparison_rows, markdown_table
from drill.scenarios import Scenario
from kvscope import thresholds as t
from kvscope.durations import format_duration, scaled
from kvscope.thresholds import DEFAULTS, Thresholds

_PANELS = (
    ("kv_usage", "KV-cache usage", "fraction of the pool", t.KV_USAGE_CRITICAL),
    ("waiting", "Requests waiting", "requests", None),
    ("preemptions_per_s", "Preemptions", "per second", None),
    ("ttft_p99", "TTFT p99 (engine)", "seconds", t.TTFT_P99),
)


def plot(run: ProfileRun, scenario: Scenario, path: Path, limits: Thresholds = DEFAULTS) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(_PANELS), 1, figsize=(10, 11), sharex=True)
    change = run.changed - run.started
    fired = run.alerts_fired
    for ax, (attr, title, unit, threshold) in zip(axes, _PANELS, strict=True):
        line = limits.value(threshold) if threshold is not None else None
        points = getattr(run.series, attr)
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, color="tab:blue", linewidth=1.6)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
        if line is not None:
            ax.axhline(line, color="tab:red", linestyle=":", linewidth=1, label=f"threshold {line:g}")
            ax.legend(loc="upper left", fontsize=8)
        ax.axvline(change, color="black", linestyle="--", linewidth=1)
        for after in fired.values():
            ax.axvline(change + after, color="tab:red", alpha=0.6, linewidth=1)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
    top = axes[0]
    top.text(change, 1.02, " change", transform=top.get_xaxis_transform(), fontsize=8, va="bottom")
    for i, after in enumerate(fired.values(), start=1):
        top.text(
            change + after,
            1.02,
            str(i),
            transform=top.get_xaxis_transform(),
            fontsize=8,
            color="tab:red",
            ha="center",
            va="bottom",
            fontweight="bold",
        )
    listed = "; ".join(f"{i} {name} ({after:+.0f} s)" for i, (name, after) in enumerate(fired.items(), start=1))
    fig.text(
        0.01,
        0.955,
        "alerts fired (red lines, seconds after the change): " + (listed or "none"),
        fontsize=8,
        color="tab:red",
        wrap=True,
        va="top",
    )
    axes[-1].set_xlabel("seconds since the drill's traffic started (dashed: the change; red: an alert fired)")
    fig.suptitle(f"kvscope drill {scenario.name}: profile {run.profile}", y=0.995, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


REQUEST_COLUMNS = (
    "sent_s",
    "phase",
    "class",
    "prompt_tokens",
    "ttft_s",
    "latency_s",
    "output_tokens",
    "error",
    "aborted_after_s",
)


def write_requests(run: ProfileRun, path: Path) -> Path:
    """One row per request (seconds from the start of traffic), for analysis beyond the table."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(REQUEST_COLUMNS)
        for o in sorted(run.outcomes, key=lambda o: o.sent):
            out.writerow(
                [
                    f"{o.sent - run.started:.3f}",
                    o.phase,
                    o.klass,
                    o.prompt_tokens,
                    "" if o.ttft is None else f"{o.ttft:.4f}",
                    "" if o.latency is None else f"{o.latency:.4f}",
                    o.output_tokens,
                    o.error or "",
                    "" if o.aborted is None else f"{o.aborted:.4f}",
                ]
            )
    return path


def notification_lines(notes: Sequence[Mapping[str, Any]] | None, report_root: Path | None = None) -> list[str]:
    """The summary's lines for one profile's notifications (None: no on-call path ran)."""
    lines = [
        "What reached the on-call receiver: Prometheus fired the rule, Alertmanager routed it to "
        "`kvscope diagnose --listen`, which diagnosed it and forwarded the notification "
        "(seconds after the change):",
        "",
    ]
    if notes is None:
        return [*lines, "- not run: Alertmanager is not installed (`apt-get install prometheus-alertmanager`)"]
    if not notes:
        return [*lines, "- none (the paged alerts' notifications did not arrive: see `logs/*/oncall/`)"]
    for n in notes:
        verdict = n.get("verdict") or {}
        where = ", ".join(f"{k}={v}" for k, v in (n.get("labels") or {}).items())
        times = [f"{n['reached_receiver_s']:+.0f} s"]
        if n.get("alert_started_s") is not None and n.get("diagnosed_at_s") is not None:
            times.append(f"alert started {n['alert_started_s']:+.0f} s, diagnosed as of {n['diagnosed_at_s']:+.0f} s")
        kept = n.get("report_file")
        if kept and report_root is not None:
            with contextlib.suppress(ValueError):
                kept = str(Path(kept).relative_to(report_root))
        lines += [
            f"- {times[0]} `{n['alertname']}`{f' ({where})' if where else ''}: **{verdict.get('bottleneck')}** "
            f"({verdict.get('severity')}): {n.get('summary') or ''}" + (f" ({times[1]})" if len(times) > 1 else ""),
            f"  report: {n.get('report_url')}" + (f" (kept in `{kept}`)" if kept else ""),
            "",
            f"      {n.get('text')}",
            "",
        ]
    return lines


def write(
    report: ReportDir,
    scenario: Scenario,
    runs: Sequence[ProfileRun],
    *,
    speedup: float,
    min_range: float,
    command: str,
    passed: bool,
    verdict: str,
    limits: Thresholds = DEFAULTS,
    notifications: Mapping[str, Sequence[Mapping[str, Any]] | None] | None = None,
    calibration: Calibration | None = None,
) -> Path:
    """Write the whole report into a folder the drill claimed; returns the summary's path.
    `notifications`: per profile, what reached the on-call receiver (alertmanager.digest)."""
    lines = [
        f"# kvscope drill {scenario.name}",
        "",
        f"Seed {scenario.seed}: {scenario.story}.",
        "",
        f"- Traffic: the seeds' mix at {calibration.rate if calibration else 0:g} requests/s; the change at "
        f"{runs[0].changed - runs[0].started:.0f} s of {runs[0].traffic_end - runs[0].started:.0f} s; requests "
        "unanswered when the traffic stops are aborted (counted apart from failures; a short request's TTFT "
        "then counts as the time it had waited, a lower bound).",
        f"- {calibration.line() if calibration else 'calibration: none'}",
        f"- Expected: {scenario.expectation()}.",
        f"- Alert rules: `alerts/kvscope-rules.yaml` with every duration divided by {speedup:g} "
        f"(`for: 5m` waits {scaled('5m', speedup)}) so alerts fire within a short drill; range windows of "
        f"{format_duration(min_range)} at least (five scrapes, and two of the scenario's periods: "
        "the spacing of its bursts, or of its long prompts).",
        f"- Result: **{verdict}**",
        f"- Reproduce: `{command}`",
        "",
        "## Before / after" if len(runs) == 2 else "## Measured",
        "",
        markdown_table(comparison_rows(runs)),
        "",
    ]
    for run in runs:
        png = plot(run, scenario, report.track(f"{run.profile}.png"), limits)
        write_requests(run, report.track(f"requests-{run.profile}.csv"))
        lines += [f"## Profile {run.profile}", ""]
        flags = " ".join(run.profile_flags) or "none: vLLM's defaults"
        lines += [f"Profile flags: `{flags}`; drill flags: `{' '.join(run.engine_args) or 'none'}`", ""]
        lines += ["Alerts fired (seconds after the change):", ""]
        if run.alerts.fired:
            for f in sorted(run.alerts.fired.values(), key=lambda f: f.firing_at):
                where = ", ".join(
                    f"{k}={v}" for k, v in sorted(f.labels.items()) if k in ("gpu", "instance", "target", "xid")
                )
                lines.append(f"- {f.firing_at - run.changed:+.0f} s `{f.alertname}` ({f.severity}) {where}")
        else:
            lines.append("- none")
        lines += ["", f"![{run.profile}]({png.name})", ""]
        if notifications is not None and run.profile in notifications:
            lines += ["### On-call notification", "", *notification_lines(notifications[run.profile], report.path)]
        lines += ["### Diagnosis", "", run.diagnosis_markdown, ""]
    summary = report.track("summary.md")
    summary.write_text("\n".join(lines))
    report.track("results.json").write_text(
        json.dumps(
            {
                "scenario": scenario.name,
                "expected": scenario.expected,
                "expected_alerts": list(scenario.alerts),
                "parts": [
                    {"scenario": p.name, "gpu": p.faults[0]["gpu"], "expected": p.expected, "alerts": list(p.alerts)}
                    for p in scenario.parts
                ],
                "alert_speedup": speedup,
                "alert_min_range_s": min_range,
                "passed": passed,
                "verdict": verdict,
                "calibration": calibration.record() if calibration else None,
                "profiles": {
                    r.profile: {**r.summary(), "notifications": (notifications or {}).get(r.profile)} for r in runs
                },
            },
            indent=2,
            default=str,
        )
    )
    return summary
