"""What one drill run measured, per profile, and the before/after comparison."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from drill.observe import AlertLog, Series
from drill.traffic import Outcome


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation, as numpy does; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass
class ProfileRun:
    profile: str
    started: float  # wall-clock time the traffic started
    changed: float  # ... the scenario's change started
    traffic_end: float  # ... the last request was sent
    ended: float  # ... the last request was answered or aborted
    outcomes: list[Outcome]
    alerts: AlertLog
    diagnosis: dict[str, Any]  # diagnosis.report.to_dict
    diagnosis_markdown: str
    series: Series
    preemptions: float
    peak_kv_usage: float | None
    queue_p99_s: float | None
    engine_args: list[str] = field(default_factory=list)  # the drill's own flags (KV pool, eager)
    profile_flags: list[str] = field(default_factory=list)  # what the profile sets on this hardware

    def _ttfts(self, klass: str, phase: str) -> list[float]:
        """TTFTs of a class in a phase; a request aborted at the window's end before its first
        token counts with the time it had waited (a lower bound), so the worst are not left out."""
        return [
            t for o in self.outcomes if o.klass == klass and o.phase == phase and (t := o.ttft_at_least) is not None
        ]

    @property
    def short_p99_ttft_s(self) -> float | None:
        """p99 time to first token of short prompts after the change (what most users felt)."""
        return percentile(self._ttfts("short", "after"), 99)

    @property
    def short_p50_ttft_s(self) -> float | None:
        return percentile(self._ttfts("short", "after"), 50)

    @property
    def long_p99_ttft_s(self) -> float | None:
        """... and of the medium and long prompts: what the fix costs them."""
        return percentile(self._ttfts("medium", "after") + self._ttfts("long", "after"), 99)

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes if o.error)

    @property
    def aborted(self) -> int:
        """Requests still unanswered when the traffic stopped (not failures: the drill ended them)."""
        return sum(1 for o in self.outcomes if o.aborted is not None)

    @property
    def throughput_tok_s(self) -> float:
        """Generated tokens per second from the start of traffic to the last answer."""
        tokens = sum(o.output_tokens for o in self.outcomes)
        return tokens / max(self.ended - self.started, 1e-9)

    @property
    def alerts_fired(self) -> dict[str, float]:
        """alertname -> seconds after the change it first fired (negative: before it)."""
        return {name: t - self.changed for name, t in sorted(self.alerts.first_firing().items(), key=lambda kv: kv[1])}

    def fired_before_change(self, severities: Sequence[str]) -> dict[str, float]:
        """alertname -> seconds before the change (negative) it first fired, of the alerts of
        these severities that fired before it."""
        out: dict[str, float] = {}
        for f in self.alerts.fired.values():
            if f.severity in severities and (after := f.firing_at - self.changed) < 0:
                out[f.alertname] = min(out.get(f.alertname, 0.0), after)
        return dict(sorted(out.items(), key=lambda kv: kv[1]))

    @property
    def bottleneck(self) -> str:
        return str(self.diagnosis.get("bottleneck", "?"))

    def summary(self) -> dict[str, Any]:
        """The JSON-friendly record of the run (results.json)."""
        return {
            "profile": self.profile,
            "engine_args": self.engine_args,
            "profile_flags": self.profile_flags,
            "requests": len(self.outcomes),
            "failed": self.failed,
            "aborted": self.aborted,
            "short_p50_ttft_s": self.short_p50_ttft_s,
            "short_p99_ttft_s": self.short_p99_ttft_s,
            "long_p99_ttft_s": self.long_p99_ttft_s,
            "preemptions": self.preemptions,
            "peak_kv_usage": self.peak_kv_usage,
            "queue_p99_s": self.queue_p99_s,
            "throughput_tok_s": self.throughput_tok_s,
            "alerts_fired": self.alerts_fired,
            "alert_instances": [
                {
                    "alertname": f.alertname,
                    "severity": f.severity,
                    "labels": f.labels,
                    "after_change_s": f.firing_at - self.changed,
                }
                for f in self.alerts.fired.values()
            ],
            "bottleneck": self.bottleneck,
            "diagnosis": self.diagnosis,
            "traffic_seconds": self.traffic_end - self.started,
            "change_at_s": self.changed - self.started,
        }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "tok/s":
        return f"{value:,.0f} tok/s"
    return f"{value:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a:.2f}x"


def comparison_rows(runs: Sequence[ProfileRun]) -> list[list[str]]:
    """Header + rows: the before/after table (one column per profile, then the ratio)."""
    header = ["", *(r.profile for r in runs)] + (["tuned / default"] if len(runs) == 2 else [])
    rows = [header]
    metrics: list[tuple[str, str, Any]] = [
        ("short-request p99 TTFT (after the change)", "s", lambda r: r.short_p99_ttft_s),
        ("short-request p50 TTFT (after the change)", "s", lambda r: r.short_p50_ttft_s),
        ("medium and long request p99 TTFT (after the change)", "s", lambda r: r.long_p99_ttft_s),
        ("preemptions", "n", lambda r: r.preemptions),
        ("peak KV-cache usage", "%", lambda r: r.peak_kv_usage),
        ("queue time p99", "s", lambda r: r.queue_p99_s),
        ("throughput (generated)", "tok/s", lambda r: r.throughput_tok_s),
        ("failed requests", "n", lambda r: float(r.failed)),
        ("unanswered when the traffic stopped (aborted)", "n", lambda r: float(r.aborted)),
    ]
    for label, unit, get in metrics:
        values = [get(r) for r in runs]
        row = [label, *(_fmt(v, unit) for v in values)]
        if len(runs) == 2:
            row.append(_ratio(values[0], values[1]) if unit in ("s", "tok/s") else "")
        rows.append(row)
    fired = ["alerts fired", *(", ".join(r.alerts_fired) or "none" for r in runs)]
    rows.append(fired + ([""] if len(runs) == 2 else []))
    rows.append(["diagnosis", *(r.bottleneck for r in runs)] + ([""] if len(runs) == 2 else []))
    return rows


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)
