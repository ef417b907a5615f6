"""`kvscope dashboards build`: Grafana 11 dashboards from the signal catalog and the thresholds,
with grafana-foundation-sdk. Threshold lines are the values the alerts and the diagnosis use;
queries fall back to legacy vLLM names with `or` so plain vLLM + dcgm-exporter fleets work.

- LLM serving overview: KV cache first, then business, engine, infrastructure (seed 000).
- GPU fleet: dcgm-exporter panels plus what NVIDIA's dashboard lacks (XIDs with meaning and
  action, PCIe against capacity and link state, clock-event reasons, remapped rows, NVLink,
  topology, processes).
- Triage: one row per step of the five-step triage, and the `kvscope diagnose` command.
- Tenants and QoS: per-tenant and per-priority latency, quota use, rejections.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, text, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import text as text_model
from grafana_foundation_sdk.models.dashboard import DataSourceRef
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.thresholds import Threshold

DASHBOARDS_DIR = Path(__file__).resolve().parent
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
ENGINE_SEL = 'namespace=~"$namespace", instance=~"$instance", model_name=~"$model_name"'
GPU_SEL = 'Hostname=~"$hostname", gpu=~"$gpu"'
E_BY = "namespace, instance, pod, target"
G_BY = "Hostname, gpu"
RATE = "$__rate_interval"


def sel(name: str, selector: str, extra: str = "") -> str:
    inner = ", ".join(p for p in (selector, extra) if p)
    return f"{name}{{{inner}}}"


def either(*exprs: str) -> str:
    return " or ".join(f"({e})" for e in exprs)


def engine_gauge(signal: c.Signal, agg: str = "max") -> str:
    """Per-instance gauge, current name first and legacy names after."""
    return either(*(f"{agg} by ({E_BY}) ({sel(n, ENGINE_SEL)})" for n in signal.names))


def engine_rate(signal: c.Signal, extra: str = "", by: str = E_BY) -> str:
    return either(*(f"sum by ({by}) (rate({sel(n, ENGINE_SEL, extra)}[{RATE}]))" for n in signal.names))


def quantile(q: float, signal: c.Signal, by: str = E_BY, selector: str = ENGINE_SEL) -> str:
    return either(
        *(
            f"histogram_quantile({q}, sum by (le, {by}) (rate({sel(n + '_bucket', selector)}[{RATE}])))"
            for n in signal.names
        )
    )


@dataclass
class Board:
    """Accumulates panels with unique ids; `add` places them on the 24-column grid."""

    title: str
    uid: str
    description: str
    tags: list[str]
    builder: Any = None
    next_id: int = 1
    variables: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.builder = (
            db.Dashboard(self.title)
            .uid(self.uid)
            .description(self.description)
            .tags(["kvscope", *self.tags])
            .refresh("30s")
            .time("now-1h", "now")
            .timezone("browser")
            .editable()
            .tooltip(model.DashboardCursorSync.CROSSHAIR)
        )
        self.builder.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))

    def query_variable(self, name: str, label: str, query: str) -> Board:
        self.builder.with_variable(
            db.QueryVariable(name)
            .label(label)
            .datasource(DS)
            .query(query)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".*")
            .multi(True)
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
        )
        self.variables.append(name)
        return self

    def row(self, title: str) -> Board:
        self.builder.with_row(db.Row(title).id(self._id()))
        return self

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def add(self, panel: Any, span: int = 12, height: int = 8) -> Board:
        self.builder.with_panel(panel.id(self._id()).span(span).height(height).datasource(DS))
        return self

    def build(self) -> model.Dashboard:
        return self.builder.build()


def _targets(
    panel: Any, queries: Sequence[tuple[str, str]], instant: bool = False, fmt: PromQueryFormat | None = None
) -> Any:
    for i, (expr, legend) in enumerate(queries):
        q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i))
        if instant:
            q = q.instant()
        if fmt:
            q = q.format(fmt)
        panel = panel.with_target(q)
    return panel


def _thresholds(lines: Sequence[tuple[Threshold | float, str]], base: str = "green") -> Any:
    steps = [model.Threshold(value=None, color=base)]
    steps += [
        model.Threshold(value=line.value if isinstance(line, Threshold) else line, color=color) for line, color in lines
    ]
    return db.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)


def ts(
    title: str,
    unit: str,
    queries: Sequence[tuple[str, str]],
    description: str = "",
    lines: Sequence[tuple[Threshold | float, str]] = (),
    stack: bool = False,
) -> Any:
    """A time series panel; `lines` are drawn as threshold lines (the alerts' and diagnosis' limits)."""
    panel = timeseries.Panel().title(title).description(description).unit(unit).fill_opacity(10).line_width(1)
    panel = panel.thresholds(_thresholds(lines))
    if lines:
        panel = panel.thresholds_style(_line_style())
    if stack:
        panel = panel.stacking(_stacking())
    return _targets(panel, queries)


def _line_style() -> Any:
    from grafana_foundation_sdk.builders import common as common_builders

    return common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE)


def _stacking() -> Any:
    from grafana_foundation_sdk.builders import common as common_builders

    return common_builders.StackingConfig().mode(common.StackingMode.NORMAL)


def st(
    title: str, unit: str, expr: str, description: str = "", lines: Sequence[tuple[Threshold | float, str]] = ()
) -> Any:
    panel = stat.Panel().title(title).description(description).unit(unit).thresholds(_thresholds(lines))
    return _targets(panel, [(expr, "")])


def tbl(title: str, queries: Sequence[tuple[str, str]], description: str = "", unit: str = "short") -> Any:
    panel = table.Panel().title(title).description(description).unit(unit).thresholds(_thresholds(()))
    return _targets(panel, queries, instant=True, fmt=PromQueryFormat.TABLE)


def hm(title: str, expr: str, description: str = "", unit: str = "short") -> Any:
    panel = heatmap.Panel().title(title).description(description).unit(unit).thresholds(_thresholds(()))
    return _targets(panel, [(expr, "{{le}}")], fmt=PromQueryFormat.HEATMAP)


def _engine_variables(board: Board) -> Board:
    running = c.VLLM_REQUESTS_RUNNING.name
    return (
        board.query_variable("namespace", "Namespace", f"label_values({running}, namespace)")
        .query_variable("instance", "Instance / pod", f'label_values({running}{{namespace=~"$namespace"}}, instance)')
        .query_variable("model_name", "Model", f"label_values({running}, model_name)")
    )


def _gpu_variables(board: Board) -> Board:
    util = c.DCGM_GPU_UTIL.name
    return board.query_variable("hostname", "Node", f"label_values({util}, Hostname)").query_variable(
        "gpu", "GPU", f'label_values({util}{{Hostname=~"$hostname"}}, gpu)'
    )


def overview() -> Board:
    b = _engine_variables(
        Board(
            "LLM serving overview",
            "kvscope-overview",
            "KV cache first, then business, engine and infrastructure layers (seed 000).",
            ["vllm"],
        )
    )
    _gpu_variables(b)
    kv = engine_gauge(c.VLLM_KV_CACHE_USAGE)
    b.row("KV cache")
    b.add(
        st(
            "KV-cache usage (peak instance)",
            "percentunit",
            f"max({kv})",
            "The core signal: above 90 % with preemptions is the avalanche.",
            [(t.KV_USAGE_WARNING, "orange"), (t.KV_USAGE_CRITICAL, "red")],
        ),
        span=6,
    )
    b.add(
        ts(
            "KV-cache usage per instance",
            "percentunit",
            [(kv, "{{instance}} {{pod}}")],
            lines=[(t.KV_USAGE_WARNING, "orange"), (t.KV_USAGE_CRITICAL, "red")],
        ),
        span=18,
    )
    b.row("Business")
    b.add(
        ts(
            "Requests by finish reason",
            "reqps",
            [(engine_rate(c.VLLM_REQUEST_SUCCESS, by="finished_reason"), "{{finished_reason}}")],
            stack=True,
        ),
        span=8,
    )
    success = c.VLLM_REQUEST_SUCCESS.name
    errors = (
        f"sum(rate({sel(success, ENGINE_SEL, 'finished_reason=~' + chr(34) + 'abort|error' + chr(34))}[{RATE}]))"
        f" / sum(rate({sel(success, ENGINE_SEL)}[{RATE}]))"
    )
    b.add(
        ts("Error ratio (abort + error)", "percentunit", [(errors, "errors")], lines=[(t.ERROR_RATIO, "red")]), span=8
    )
    b.add(
        ts(
            "Tokens per second",
            "short",
            [
                (f"sum(rate({sel(c.VLLM_PROMPT_TOKENS.name, ENGINE_SEL)}[{RATE}]))", "prompt"),
                (f"sum(rate({sel(c.VLLM_GENERATION_TOKENS.name, ENGINE_SEL)}[{RATE}]))", "generated"),
            ],
        ),
        span=8,
    )
    b.add(
        ts(
            "Tokens per tenant",
            "short",
            [(f"sum by (tenant, kind) (rate({c.GATEWAY_TOKENS.name}[{RATE}]))", "{{tenant}} {{kind}}")],
            stack=True,
        )
    )
    b.add(
        ts(
            "Gateway rejections by reason",
            "reqps",
            [(f"sum by (reason) (rate({c.GATEWAY_REJECTIONS.name}[{RATE}]))", "{{reason}}")],
            stack=True,
        )
    )
    b.row("Engine")
    hit = either(
        *(
            f"sum by ({E_BY}) (rate({sel(h, ENGINE_SEL)}[{RATE}])) "
            f"/ sum by ({E_BY}) (rate({sel(q, ENGINE_SEL)}[{RATE}]))"
            for h, q in zip(c.VLLM_PREFIX_CACHE_HITS.names, c.VLLM_PREFIX_CACHE_QUERIES.names, strict=True)
        )
    )
    b.add(
        ts(
            "Prefix-cache hit rate",
            "percentunit",
            [(hit, "{{instance}}")],
            lines=[(t.PREFIX_HIT_FLOOR, "orange")],
            description="Seed 004: below 75 % look at the cache first.",
        ),
        span=8,
    )
    b.add(
        ts(
            "Running and waiting",
            "short",
            [
                (engine_gauge(c.VLLM_REQUESTS_RUNNING), "running {{instance}}"),
                (engine_gauge(c.VLLM_REQUESTS_WAITING), "waiting {{instance}}"),
            ],
            lines=[(t.QUEUE_BACKLOG, "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Preemptions per second",
            "short",
            [(engine_rate(c.VLLM_NUM_PREEMPTIONS), "{{instance}}")],
            lines=[(t.PREEMPTION_RATE, "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Time to first token",
            "s",
            [(quantile(0.5, c.VLLM_TTFT), "p50 {{instance}}"), (quantile(0.99, c.VLLM_TTFT), "p99 {{instance}}")],
            lines=[(t.TTFT_P99, "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Inter-token latency",
            "s",
            [(quantile(0.5, c.VLLM_ITL), "p50 {{instance}}"), (quantile(0.99, c.VLLM_ITL), "p99 {{instance}}")],
            lines=[(t.ITL_P99, "red")],
        ),
        span=8,
    )
    b.add(ts("End-to-end latency p99", "s", [(quantile(0.99, c.VLLM_E2E_LATENCY), "{{instance}}")]), span=8)
    b.add(
        ts(
            "Queue, prefill and decode time p99 (ms buckets)",
            "s",
            [
                (quantile(0.99, c.REQUEST_QUEUE_SECONDS, by=E_BY), "queue {{instance}}"),
                (quantile(0.99, c.REQUEST_PREFILL_SECONDS, by=E_BY), "prefill {{instance}}"),
                (quantile(0.99, c.REQUEST_DECODE_SECONDS, by=E_BY), "decode {{instance}}"),
                (quantile(0.99, c.VLLM_QUEUE_TIME), "queue (vLLM) {{instance}}"),
            ],
            lines=[(t.QUEUE_TIME_P99, "red")],
            description="kvscope's stat logger histograms (ms buckets); vLLM's own start at 0.3 s.",
        )
    )
    b.add(
        hm(
            "Prompt length (tokens)",
            f"sum by (le) (increase({sel(c.VLLM_REQUEST_PROMPT_TOKENS.name + '_bucket', ENGINE_SEL)}[{RATE}]))",
            "Long-prompt tails make head-of-line blocking (seed 000: 2 % very long).",
        )
    )
    b.add(
        ts(
            "Tokens per engine step",
            "short",
            [
                (quantile(0.5, c.VLLM_ITERATION_TOKENS), "p50 {{instance}}"),
                (quantile(0.99, c.VLLM_ITERATION_TOKENS), "p99 {{instance}}"),
            ],
        )
    )
    b.add(
        ts(
            "KV capacity (tokens)",
            "short",
            [(f"max by (model_name) ({c.CACHE_CAPACITY_TOKENS.name})", "{{model_name}}")],
        )
    )
    b.row("Infrastructure")
    _gpu_basics(b)
    return b


def _gpu_basics(b: Board) -> None:
    used, free, reserved = (sel(s.name, GPU_SEL) for s in (c.DCGM_FB_USED, c.DCGM_FB_FREE, c.DCGM_FB_RESERVED))
    b.add(
        ts(
            "GPU utilisation",
            "percent",
            [(sel(c.DCGM_GPU_UTIL.name, GPU_SEL), "{{Hostname}} GPU {{gpu}}")],
            lines=[(t.GPU_UTIL_FLOOR, "orange")],
        ),
        span=8,
    )
    b.add(
        ts(
            "GPU memory used (share of the card)",
            "percentunit",
            [(f"{used} / ({used} + {free} + {reserved})", "{{Hostname}} GPU {{gpu}}")],
            lines=[(t.GPU_MEMORY_FULL, "red")],
            description="vLLM reserves gpu_memory_utilization of the card up front (see the engines' budgets): 90 % "
            "full is normal; above the budget is a leak or another process.",
        ),
        span=8,
    )
    b.add(
        tbl(
            "Engines' memory budgets (gpu_memory_utilization)",
            [(f"count by (gpu_memory_utilization, model_name) ({c.VLLM_CACHE_CONFIG_INFO.name})", "")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Power vs limit",
            "watt",
            [
                (sel(c.DCGM_POWER_USAGE.name, GPU_SEL), "{{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_POWER_LIMIT.name, GPU_SEL), "limit {{Hostname}} GPU {{gpu}}"),
            ],
        ),
        span=8,
    )
    b.add(
        ts(
            "SM clock",
            "hertz",
            [
                (f"{sel(c.DCGM_SM_CLOCK.name, GPU_SEL)} * 1e6", "{{Hostname}} GPU {{gpu}}"),
                (f"{sel(c.DCGM_APP_SM_CLOCK.name, GPU_SEL)} * 1e6", "base {{Hostname}} GPU {{gpu}}"),
            ],
        ),
        span=12,
    )
    b.add(
        ts(
            "PCIe traffic vs link capacity",
            "percentunit",
            [
                (
                    f"max by ({G_BY}) ({sel(c.DCGM_PCIE_RX_BYTES.name, GPU_SEL)}) / on (gpu) group_left max by (gpu) "
                    f"({sel(c.GPU_PCIE_LINK_CAPACITY.name, 'gpu=~' + chr(34) + '$gpu' + chr(34))})",
                    "rx {{Hostname}} GPU {{gpu}}",
                ),
                (
                    f"max by ({G_BY}) ({sel(c.DCGM_PCIE_TX_BYTES.name, GPU_SEL)}) / on (gpu) group_left max by (gpu) "
                    f"({sel(c.GPU_PCIE_LINK_CAPACITY.name, 'gpu=~' + chr(34) + '$gpu' + chr(34))})",
                    "tx {{Hostname}} GPU {{gpu}}",
                ),
            ],
            lines=[(t.PCIE_SATURATION, "red")],
        ),
        span=12,
    )


def gpu_fleet() -> Board:
    b = _gpu_variables(
        Board(
            "GPU fleet",
            "kvscope-gpu-fleet",
            "dcgm-exporter-compatible GPU panels plus XIDs, PCIe, clock events, remapped rows, NVLink, "
            "topology and processes.",
            ["gpu", "dcgm"],
        )
    )
    b.row("Utilisation, memory, power, clocks")
    _gpu_basics(b)
    b.add(
        ts(
            "Temperature",
            "celsius",
            [(sel(c.DCGM_GPU_TEMP.name, GPU_SEL), "{{Hostname}} GPU {{gpu}}")],
            lines=[(t.GPU_TEMP_HIGH, "red")],
        ),
        span=12,
    )
    b.add(
        ts(
            "HBM and tensor activity (DCGM profiling)",
            "percentunit",
            [
                (sel(c.DCGM_DRAM_ACTIVE.name, GPU_SEL), "DRAM {{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_TENSOR_ACTIVE.name, GPU_SEL), "tensor {{Hostname}} GPU {{gpu}}"),
            ],
            lines=[(t.DRAM_ACTIVE_HIGH, "orange")],
        ),
        span=12,
    )
    b.row("Faults")
    xid = c.GPU_XID_ERRORS.name
    b.add(
        tbl(
            "XIDs in the range (with meaning and action)",
            [
                (
                    f"(sum by (Hostname, instance, gpu, xid) (increase({xid}[$__range])) > 0) "
                    "* on (xid) group_left (meaning, action, bucket) "
                    f"max by (xid, meaning, action, bucket) ({c.GPU_XID_INFO.name})",
                    "",
                )
            ],
            "Counted one by one by kvscope's XID watcher; repeats show.",
        ),
        span=12,
    )
    b.add(
        tbl(
            "Last XID reported by dcgm-exporter (sticky)",
            [(f"{sel(c.DCGM_XID_ERRORS.name, GPU_SEL)} > 0", "")],
            "dcgm-exporter holds the last XID until another arrives: look at when it changed.",
        ),
        span=12,
    )
    b.add(
        ts(
            "Clock-event reasons active",
            "short",
            [(f'max by (gpu, reason) ({c.GPU_CLOCK_EVENT_ACTIVE.name}{{gpu=~"$gpu"}}) > 0', "GPU {{gpu}} {{reason}}")],
        ),
        span=12,
    )
    b.add(
        ts(
            "Remapped rows and remap failures",
            "short",
            [
                (sel(c.DCGM_UNCORRECTABLE_REMAPPED_ROWS.name, GPU_SEL), "uncorrectable {{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_CORRECTABLE_REMAPPED_ROWS.name, GPU_SEL), "correctable {{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_ROW_REMAP_FAILURE.name, GPU_SEL), "failure {{Hostname}} GPU {{gpu}}"),
            ],
        ),
        span=12,
    )
    b.row("PCIe and NVLink")
    b.add(
        ts(
            "PCIe link generation and width vs max",
            "short",
            [
                (sel(c.DCGM_PCIE_LINK_GEN.name, GPU_SEL), "gen {{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_PCIE_MAX_LINK_GEN.name, GPU_SEL), "max gen {{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_PCIE_LINK_WIDTH.name, GPU_SEL), "width {{Hostname}} GPU {{gpu}}"),
                (sel(c.DCGM_PCIE_MAX_LINK_WIDTH.name, GPU_SEL), "max width {{Hostname}} GPU {{gpu}}"),
            ],
        ),
        span=8,
    )
    b.add(
        ts(
            "PCIe replays per second",
            "short",
            [(f"rate({sel(c.DCGM_PCIE_REPLAY.name, GPU_SEL)}[{RATE}])", "{{Hostname}} GPU {{gpu}}")],
            lines=[(t.PCIE_REPLAY_RATE, "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "NVLink bandwidth",
            "Bps",
            [(f"rate({sel(c.DCGM_NVLINK_BANDWIDTH.name, GPU_SEL)}[{RATE}])", "{{Hostname}} GPU {{gpu}}")],
        ),
        span=8,
    )
    b.row("Topology and processes")
    b.add(
        tbl(
            "GPU pairs: common ancestor (NVLink, PCIe switch, host bridge, NUMA, system)",
            [(f"max by (instance, gpu, peer_gpu, level) ({c.GPU_TOPOLOGY_LEVEL.name})", "")],
            "Seed 004 section 4.2: tensor parallelism across NUMA nodes ran 3.8x slower.",
        ),
        span=8,
    )
    b.add(tbl("Engines spanning NUMA nodes", [(f"{c.GPU_ENGINE_NUMA_NODES.name} > 0", "")]), span=8)
    b.add(
        tbl(
            "Processes on GPUs",
            [
                (f"max by (instance, gpu, pid, process_name, engine) ({c.GPU_PROCESS_INFO.name})", ""),
                (f"max by (instance, gpu, pid) ({c.GPU_PROCESS_MEMORY.name})", ""),
            ],
            unit="bytes",
        ),
        span=8,
    )
    return b


def triage() -> Board:
    b = _engine_variables(
        Board(
            "Five-step triage",
            "kvscope-triage",
            "Seed 000's triage, one row per step, with the thresholds the diagnosis uses.",
            ["triage"],
        )
    )
    _gpu_variables(b)
    command = (
        "kvscope diagnose --prometheus <this Prometheus> --at ${__to:date:seconds} --window ${__range_s}s "
        "--selector '{namespace=~\"$namespace\"}'"
    )
    b.add(
        text.Panel()
        .title("Run the diagnosis for this range")
        .content(
            f"Name the bottleneck with evidence and the fix:\n\n```\n{command}\n```\n\n"
            "Steps: 1 KV-cache usage, 2 waiting queue and queue time, 3 GPU memory and utilisation, "
            "4 preemption / swap, 5 kernels (profile next)."
        )
        .mode(text_model.TextMode.MARKDOWN),
        span=24,
        height=5,
    )
    b.row("1. KV-cache usage")
    b.add(
        ts(
            "KV-cache usage",
            "percentunit",
            [(engine_gauge(c.VLLM_KV_CACHE_USAGE), "{{instance}}")],
            lines=[(t.KV_USAGE_WARNING, "orange"), (t.KV_USAGE_CRITICAL, "red")],
        ),
        span=24,
    )
    b.row("2. Waiting queue and queue time")
    b.add(
        ts(
            "Waiting requests",
            "short",
            [(engine_gauge(c.VLLM_REQUESTS_WAITING), "{{instance}}")],
            lines=[(t.QUEUE_BACKLOG, "red")],
        )
    )
    b.add(
        ts(
            "Queue time p99",
            "s",
            [(quantile(0.99, c.VLLM_QUEUE_TIME), "{{instance}}")],
            lines=[(t.QUEUE_TIME_P99, "red")],
        )
    )
    b.row("3. GPU memory and utilisation")
    _gpu_basics(b)
    b.row("4. Preemption / swap")
    b.add(
        ts(
            "Preemptions per second",
            "short",
            [(engine_rate(c.VLLM_NUM_PREEMPTIONS), "{{instance}}")],
            lines=[(t.PREEMPTION_RATE, "red")],
        )
    )
    b.add(ts("Swapped requests (vLLM V0)", "short", [(engine_gauge(c.VLLM_REQUESTS_SWAPPED), "{{instance}}")]))
    b.row("5. Kernels")
    b.add(
        ts(
            "HBM activity (decode is bound by it)",
            "percentunit",
            [(sel(c.DCGM_DRAM_ACTIVE.name, GPU_SEL), "{{Hostname}} GPU {{gpu}}")],
            lines=[(t.DRAM_ACTIVE_HIGH, "orange")],
        )
    )
    b.add(
        text.Panel()
        .title("Capture next")
        .content(
            "```\nVLLM_TORCH_PROFILER_DIR=/tmp/vllm-prof  # then POST /start_profile, load, POST /stop_profile\n"
            "nsys profile -t cuda,nvtx,osrt -o vllm-%p --delay 60 --duration 30 <vllm command>\n"
            "ncu --target-processes all -k regex:attention --launch-count 20 -o attn <vllm command>\n```"
        )
        .mode(text_model.TextMode.MARKDOWN)
    )
    return b


def tenants() -> Board:
    b = Board(
        "Tenants and QoS",
        "kvscope-tenants",
        "Per-tenant and per-priority latency, quota use and rejections (kvscope serve's gateway).",
        ["tenants", "qos"],
    )
    b.query_variable("tenant", "Tenant", f"label_values({c.GATEWAY_REQUESTS.name}, tenant)")
    tsel = 'tenant=~"$tenant"'
    b.row("Latency")
    b.add(
        ts(
            "TTFT p99 by tenant",
            "s",
            [(quantile(0.99, c.REQUEST_TTFT_SECONDS, by="tenant", selector=tsel), "{{tenant}}")],
            lines=[(t.TTFT_P99, "red")],
        )
    )
    b.add(
        ts(
            "TTFT p99 by priority class",
            "s",
            [(quantile(0.99, c.REQUEST_TTFT_SECONDS, by="priority_class", selector=tsel), "{{priority_class}}")],
            lines=[(t.TTFT_P99, "red")],
        )
    )
    b.add(
        ts(
            "Queue time p99 by priority class",
            "s",
            [(quantile(0.99, c.REQUEST_QUEUE_SECONDS, by="priority_class", selector=tsel), "{{priority_class}}")],
            lines=[(t.QUEUE_TIME_P99, "red")],
        )
    )
    b.add(
        ts(
            "Requests by tenant and tier",
            "reqps",
            [(f"sum by (tenant, tier) (rate({c.GATEWAY_REQUESTS.name}{{{tsel}}}[{RATE}]))", "{{tenant}} ({{tier}})")],
            stack=True,
        )
    )
    b.row("Quota and rejections")
    b.add(
        ts(
            "Token budget left (per minute)",
            "short",
            [
                (f"{c.GATEWAY_QUOTA_REMAINING.name}{{{tsel}}}", "left {{tenant}}"),
                (f"{c.GATEWAY_QUOTA_LIMIT.name}{{{tsel}}}", "limit {{tenant}}"),
            ],
        )
    )
    b.add(
        ts(
            "Rejections by reason and tenant",
            "reqps",
            [
                (
                    f"sum by (reason, tenant) (rate({c.GATEWAY_REJECTIONS.name}{{{tsel}}}[{RATE}]))",
                    "{{tenant}} {{reason}}",
                )
            ],
            stack=True,
        )
    )
    b.add(
        ts(
            "Tokens by tenant",
            "short",
            [(f"sum by (tenant, kind) (rate({c.GATEWAY_TOKENS.name}{{{tsel}}}[{RATE}]))", "{{tenant}} {{kind}}")],
            stack=True,
        )
    )
    b.add(
        ts("In flight by tenant", "short", [(f"sum by (tenant) ({c.GATEWAY_INFLIGHT.name}{{{tsel}}})", "{{tenant}}")])
    )
    b.add(
        ts(
            "Held at the gateway for their class's KV share",
            "short",
            [
                (
                    f"sum by (priority_class) ({c.GATEWAY_LANE_WAITING.name})",
                    "{{priority_class}} waiting",
                ),
                (
                    f'sum by (priority_class) ({c.GATEWAY_LANE_TOKENS.name}{{kind="used"}})'
                    f' / sum by (priority_class) ({c.GATEWAY_LANE_TOKENS.name}{{kind="capacity"}})',
                    "{{priority_class}} share used",
                ),
            ],
            description="Tuned profile: long prompts (the bulk class) together hold at most half of the KV "
            "pool; more wait here, in priority order, instead of being preempted in the engine.",
        )
    )
    b.add(
        ts(
            "Wait at the gateway p99 by class",
            "s",
            [
                (
                    f"histogram_quantile(0.99, sum by (le, priority_class) "
                    f"(rate({c.GATEWAY_LANE_WAIT_SECONDS.name}_bucket[{RATE}])))",
                    "{{priority_class}}",
                )
            ],
        )
    )
    return b


BOARDS = {"llm-serving-overview": overview, "gpu-fleet": gpu_fleet, "triage": triage, "tenants-qos": tenants}


def render(name: str) -> str:
    return json.dumps(BOARDS[name]().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def write(out: Path = DASHBOARDS_DIR) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in BOARDS:
        path = out / f"{name}.json"
        path.write_text(render(name))
        paths.append(path)
    return paths
