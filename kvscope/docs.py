"""Generate docs/metrics.md (the signal catalog, the thresholds, the kvscope.yaml keys) and
docs/tuning.md (the tuned profile's numbers and their sources).

`python -m kvscope.docs` rewrites them (in a checkout's docs/, else the current folder); a unit
test fails when the committed files are stale.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path

from kvscope import catalog, config, paths, thresholds, tuning
from kvscope.gpu_models import FIELDS, MODELS
from kvscope.promql import Selector

METRICS_FILE = "metrics.md"
TUNING_FILE = "tuning.md"

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
        "multi-window burn-rate windows, the objectives and the error budget left; and the rollups "
        "(`level:metric:operations`, group `kvscope-rollups`, every minute): per engine and per GPU, "
        "the KV-cache and queue peaks, preemption rate, queue, TTFT and inter-token quantiles, "
        "utilisation, clocks, heat, power and memory, for dashboards and alerts on big fleets.",
    ),
)


# The layers whose code reads (or, for serving and exporter, writes) catalog entries.
CONSUMERS = ("serving", "exporter", "diagnosis", "dashboards", "alerts", "drill")
PASSED_THROUGH = "passed through"


@cache
def consumers() -> dict[str, tuple[str, ...]]:
    """Signal name -> the layers whose code names its catalog constant (`catalog.X` / `c.X`).
    Read from the source files, not imported, so the ground does not depend on the floors."""
    constants = {
        name: value for name, value in vars(catalog).items() if isinstance(value, catalog.Signal) and name.isupper()
    }
    used: dict[str, set[str]] = {}
    pattern = re.compile(r"\b(?:catalog|c)\.([A-Z][A-Z0-9_]+)\b")
    for layer in CONSUMERS:
        spec = importlib.util.find_spec(layer)
        if spec is None or not spec.submodule_search_locations:
            continue
        for folder in spec.submodule_search_locations:
            for path in Path(folder).rglob("*.py"):
                for constant in pattern.findall(path.read_text()):
                    if constant in constants:
                        used.setdefault(constants[constant].name, set()).add(layer)
    return {name: tuple(layer for layer in CONSUMERS if layer in layers) for name, layers in used.items()}


_DCGM_LISTS = {
    "enabled": "in the default counters",
    "opt_in": "listed, commented out (opt-in)",
    "exporter": "an exporter-computed field (opt-in)",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole of docs/metrics.md."""
    out = [
        "# Metrics",
        "",
        "Generated from `kvscope/catalog.py`, `kvscope/thresholds.py` and `kvscope/config.py` by `make generate`; "
        "do not edit by hand.",
        "",
    ]
    dcgm_lists = {s.name: _DCGM_LISTS[group] for group, fields in catalog.DCGM_EXPORTER_FIELDS.items() for s in fields}
    for source, title, blurb in _SECTIONS:
        out += [
            f"## {title}",
            "",
            blurb,
            "",
            "| name | type | unit | labels | used by | meaning |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for s in catalog.all_signals():
            if s.source is not source:
                continue
            meaning = s.help
            if s.aliases:
                meaning += " Also: " + ", ".join(f"`{a}`" for a in s.aliases) + "."
            for r in s.rescaled:
                meaning += f" In another unit: `{r.name}` ({r.unit}, read x {r.factor:g}; dcgm-exporter {r.release})."
            if s.legacy:
                meaning = "**Legacy (V0).** " + meaning
            if s.condition:
                meaning += f" Only with {s.condition}."
            if s.name in dcgm_lists:
                meaning += f" dcgm-exporter {catalog.DCGM_EXPORTER_RELEASE}: {dcgm_lists[s.name]}."
            labels = ", ".join(s.labels)
            used = ", ".join(consumers().get(s.name, ())) or PASSED_THROUGH
            out.append(f"| `{s.name}` | {s.kind} | {_cell(s.unit)} | {labels} | {used} | {_cell(meaning)} |")
        out.append("")
    out += [
        "## dcgm-exporter 4.9 and 4.10 field names",
        "",
        "The default fields dcgm-exporter renamed after 4.8 (the 4.9.0 release notes: 23 default and profiling "
        "fields to DCGM 4.7's names, 11 of them in other units; 4.10.0: the PCIe rates). kvscope reads both shapes "
        "and a fleet mid-upgrade as one: a same-unit name is an alias, one in another unit is read with its "
        "factor (never as an alias), and `kvscope export --dcgm-names 4.9|4.10` writes the new shape. Sources: "
        "A the 4.9.0 release notes, B the 4.10.0 release page, C go-dcgm's `dcgm_fields.h` (its deprecated-alias "
        "block and base-unit field IDs), D a secondary DCGM 4.7 field guide (the five marked D only rest on it). "
        f"The driver label: `{catalog.DCGM_DRIVER_LABELS[0]}` becomes `{catalog.DCGM_DRIVER_LABELS[1]}` (4.9.0).",
        "",
        "| new name | unit | 4.8 name | unit | release | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for old, rename in catalog.DCGM_EXPORTER_RENAMES.items():
        signal = next(x for x in catalog.all_signals() if x.name == old)
        new = next((x for x in catalog.all_signals() if x.name == rename.new), None)
        unit = next((r.unit for r in signal.rescaled if r.name == rename.new), new.unit if new else signal.unit)
        out.append(
            f"| `{rename.new}` | {_cell(unit)} | `{old}` | {_cell(signal.unit)} | {rename.release} | {rename.source} |"
        )
    out += [
        "",
        "## OpenTelemetry GenAI metrics (OTLP, from kvscope serve)",
        "",
        f"Pushed over OTLP, not scraped: OpenTelemetry's GenAI server metrics as open-telemetry/semantic-conventions "
        f"v{catalog.GENAI_SEMCONV_VERSION} defines them in docs/gen-ai/gen-ai-metrics.md, whose status is "
        "Development, so this is the version followed. Sent only where "
        "`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` "
        "is set; `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (http/protobuf, grpc), "
        "`OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_METRIC_EXPORT_INTERVAL` as for any OpenTelemetry program, or "
        "the same keys in kvscope.yaml's `gateway.otlp` (`endpoint`, `traces_endpoint`, `metrics_endpoint`, "
        "`protocol`, `headers`, `metric_export_interval_ms`; a variable that is set wins). "
        "Attributes: `gen_ai.operation.name` (`text_completion`, `chat`, `embeddings`, else the route's shape), "
        f"`gen_ai.provider.name` (`{catalog.GENAI_PROVIDER}`), `gen_ai.request.model`, `server.port`, `error.type` "
        "(request duration of a failed request: its HTTP status), `gen_ai.token.type` (`input`, `output`: "
        "the tokens vLLM ran, its usage). First-token and per-token times are recorded for successful responses "
        "only.",
        "",
        "| name | instrument | unit | buckets | meaning |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| `{h.name}` | histogram | `{h.unit}` | {', '.join(f'{b:g}' for b in h.buckets)} | {_cell(h.help)} |"
            for h in catalog.GENAI_METRICS
        ),
        "",
        "## Thresholds",
        "",
        "Used by the alert rules, the dashboards' threshold lines and the diagnosis alike.",
        "",
        "| key | value | unit | for | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in thresholds.all_thresholds():
        out.append(f"| `{t.key}` | {t.value:g} | {_cell(t.unit)} | {t.for_ or '-'} | {_cell(t.why)} |")
    out += ["", *_config_keys()]
    return "\n".join(out) + "\n"


def _config_keys() -> list[str]:
    slo = config.Slo()
    lines = [
        "## kvscope.yaml",
        "",
        "One file for every command (`--config FILE`, else `$KVSCOPE_CONFIG`); `kvscope config show` prints "
        "every effective value and where it came from. An unknown key or a bad value is a one-line error "
        "(exit 64).",
        "",
        "| key | default | what |",
        "| --- | --- | --- |",
        "| `thresholds.<key>` | the table above | a number, or `{value: N, for: 5m}`; ratios in (0, 1], "
        "percentages in (0, 100] |",
        f"| `slo.ttft.objective`, `slo.ttft.seconds` | {slo.ttft.objective:g}, {slo.ttft.seconds:g} | share of "
        "requests whose first token comes within the seconds (a bucket bound of vLLM's TTFT histogram) |",
        f"| `slo.itl.objective`, `slo.itl.seconds` | {slo.itl.objective:g}, {slo.itl.seconds:g} | share of output "
        "tokens within the seconds of the previous one (a bucket bound of vLLM's ITL histogram) |",
        "| `slo.ttft.custom_buckets`, `slo.itl.custom_buckets` | false | the fleet runs vLLM's "
        "`--custom-histogram-buckets`: any bound is accepted, and `KvscopeSLO*BoundNotABucket` checks that the "
        "data has it as an edge |",
        f"| `slo.errors.objective` | {slo.errors.objective:g} | share of requests without abort or error |",
        f"| `slo.period` | {slo.period} | the error budget's period |",
        "| `slo.windows` | "
        + ", ".join(f"{w.severity} {w.long}/{w.short} x{w.factor:g}" for w in slo.windows)
        + " | burn-rate pairs (Google SRE workbook); windows from "
        + ", ".join(catalog.SLO_WINDOWS)
        + " |",
        f"| `slo.min_bad_events` | {slo.min_bad_events:g} | a burn-rate pair counts once its long window holds "
        "enough events for this many bad ones at its line (a ratio of a few events is noise; 0: no guard) |",
        "| `selectors.engine`, `selectors.gpu` | none | label matchers added to every engine / GPU query of the "
        f"alerts, dashboards and diagnosis, e.g. `'{Selector.of(job='vllm')}'` |",
        f"| `gpu_models.<model>.<field>` | {', '.join(MODELS)} | datasheet overrides, or a new model: its NVML "
        f"device name (`name`, matched exactly) and what it knows of: {', '.join(FIELDS[1:])} |",
        "| `gateway` | no keys, one anonymous tenant | `kvscope serve`'s tenants, tiers, limits and QoS "
        "(serving/gateway_config.py) |",
        "| `export` | 127.0.0.1:9408, no targets | `kvscope export`'s settings, the same keys as its flags |",
        "| `deploy.namespace`, `deploy.labels`, `deploy.image`, `deploy.runbook_base`, "
        "`deploy.bearer_token_secret`, `deploy.tls_secret` | monitoring, none, the release image, this release's "
        "runbooks, none, none | the Kubernetes manifests `kvscope alerts deploy` writes (deploy/) |",
    ]
    return lines


def render_tuning() -> str:
    """The whole of docs/tuning.md: every number of the tuned profile, per platform, with its source."""
    out = [
        "# The tuned profile's numbers",
        "",
        "Generated from `kvscope/tuning.py` by `make generate`; do not edit by hand. Production (GPU) numbers cite "
        "their source or say that they are not yet measured on a GPU; the CPU demo profile's numbers were "
        "measured by its drills (docs/benchmarks.md).",
        "",
        "| knob | platform | value | source | from a GPU (seeds, vLLM) |",
        "| --- | --- | --- | --- | --- |",
    ]
    per_platform = (
        ("--max-num-batched-tokens", tuning.PREFILL_BUDGET),
        ("--long-prefill-token-threshold (1/N of the budget)", tuning.LONG_PREFILL_SHARE),
        ("--watermark", tuning.WATERMARK),
        ("bulk QoS class KV lane (share of the pool)", tuning.KV_LANE_SHARE),
    )
    for knob, table in per_platform:
        for platform, number in table.items():
            out.append(_tuning_row(knob, str(platform), number))
    for knob, number in (
        ("--gpu-memory-utilization", tuning.GPU_MEMORY_UTILIZATION),
        ("--block-size", tuning.BLOCK_SIZE),
        ("--block-size past 128K context", tuning.LONG_CONTEXT_BLOCK_SIZE),
    ):
        out.append(_tuning_row(knob, "GPU", number))
    out.append(_tuning_row("--kv-cache-metrics-sample", "all", tuning.KV_CACHE_METRICS_SAMPLE))
    for name, number in tuning.QOS_DELAY_MS.items():
        out.append(_tuning_row(f"QoS class {name}: delay (ms)", "all", number))
    return "\n".join(out) + "\n"


def _tuning_row(knob: str, platform: str, number: tuning.Number) -> str:
    measured = "yes" if number.measured_on_gpu else "no"
    return f"| {knob} | {platform} | {number.value:g} | {_cell(number.source)} | {measured} |"


def main() -> int:
    folder = paths.output(None, "docs")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ((METRICS_FILE, render()), (TUNING_FILE, render_tuning())):
        (folder / name).write_text(text)
        print(f"wrote {folder / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
