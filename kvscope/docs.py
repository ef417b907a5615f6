"""Generate docs/metrics.md from the signal catalog and the thresholds table.

`python -m kvscope.docs` rewrites it; a unit test fails when the committed file is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvscope import catalog, thresholds

METRICS_MD = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"

_SECTIONS = (
    (
        catalog.Source.VLLM,
        "vLLM engine (read)",
        "Exposed by vLLM's V1 engine; kvscope reads them. Aliases are the pre-rename names that "
        "older deployments still expose; the queries accept both.",
    ),
    (
        catalog.Source.DCGM,
        "GPU telemetry under dcgm-exporter names (read and written)",
        "Read from dcgm-exporter, or written by `kvscope export` from DCGM or NVML under the same "
        "names and labels, so existing dashboards keep working.",
    ),
    (
        catalog.Source.KVSCOPE,
        "kvscope's own (written)",
        "What vLLM and DCGM lack: fine-grained phase times, per-tenant and per-priority latency, "
        "gateway decisions, XID counts, PCIe capacity, topology, exporter health.",
    ),
    (
        catalog.Source.PROMETHEUS,
        "Written by Prometheus",
        "Series Prometheus adds for every scrape target; kvscope reads them.",
    ),
    (
        catalog.Source.RULE,
        "Recording rules (computed by Prometheus)",
        "Written by the generated rule file (`alerts/kvscope-rules.yaml`): SLO error ratios over the "
        "multi-window burn-rate windows, the objectives and the error budget left.",
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole of docs/metrics.md."""
    out = [
        "# Metrics",
        "",
        "Generated from `kvscope/catalog.py` and `kvscope/thresholds.py` by `make generate`; do not edit by hand.",
        "",
    ]
    for source, title, blurb in _SECTIONS:
        out += [
            f"## {title}",
            "",
            blurb,
            "",
            "| name | type | unit | labels | meaning |",
            "| --- | --- | --- | --- | --- |",
        ]
        for s in catalog.all_signals():
            if s.source is not source:
                continue
            meaning = s.help
            if s.aliases:
                meaning += " Also: " + ", ".join(f"`{a}`" for a in s.aliases) + "."
            if s.legacy:
                meaning = "**Legacy (V0).** " + meaning
            labels = ", ".join(s.labels)
            out.append(f"| `{s.name}` | {s.kind} | {_cell(s.unit)} | {labels} | {_cell(meaning)} |")
        out.append("")
    out += [
        "## Thresholds",
        "",
        "Used by the alert rules, the dashboards' threshold lines and the diagnosis alike.",
        "",
        "| key | value | unit | for | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in thresholds.all_thresholds():
        out.append(f"| `{t.key}` | {t.value:g} | {_cell(t.unit)} | {t.for_ or '-'} | {_cell(t.why)} |")
    return "\n".join(out) + "\n"


def main() -> int:
    METRICS_MD.parent.mkdir(parents=True, exist_ok=True)
    METRICS_MD.write_text(render())
    print(f"wrote {METRICS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
