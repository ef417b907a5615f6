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
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import text
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import text as text_model

from dashboards.engines import engines
from dashboards.panels import (
    G_BY,
    HOST,
    RATE,
    Board,
    Scope,
    _engine_variables,
    _gpu_variables,
    _variables,
    hm,
    st,
    tbl,
    ts,
)
from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.config import Config
from kvscope.promql import Expr, Matcher, Selector, either, label_values, le, metric, quantile, vector

# the description of a panel that reads the rollups rather than the histograms' buckets
ROLLUPS = (
    "From the kvscope-rollups recording rules (kvscope alerts build), per engine over 5 minutes, the worst "
    "engine of each instance: blank where those rules are not loaded."
)


def overview(sc: Scope) -> Board:
    b = _engine_variables(
        Board(
            "LLM serving overview",
            "kvscope-overview",
            "KV cache first, then business, engine and infrastructure layers (seed 000).",
            ["vllm"],
        )
    )
    _gpu_variables(b, sc.host)
    kv = sc.engine_gauge(c.VLLM_KV_CACHE_USAGE)
    kv_lines = [(sc.line(t.KV_USAGE_WARNING), "orange"), (sc.line(t.KV_USAGE_CRITICAL), "red")]
    b.row("KV cache")
    b.add(
        st(
            "KV-cache usage (peak instance)",
            "percentunit",
            kv.collapse().max(),
            "The core signal: above 90 % with preemptions is the avalanche.",
            kv_lines,
        ),
        span=6,
    )
    b.add(ts("KV-cache usage per instance", "percentunit", [(kv, "{{instance}} {{pod}}")], lines=kv_lines), span=18)
    _slo_tiles(b, sc)
    b.row("Business")
    b.add(
        ts(
            "Requests by finish reason",
            "reqps",
            [(sc.engine_rate(c.VLLM_REQUEST_SUCCESS, by=("finished_reason",)), "{{finished_reason}}")],
            stack=True,
        ),
        span=8,
    )
    failed = Selector.any_of("finished_reason", c.FINISHED_FAILED)
    errors = sc.e(c.VLLM_REQUEST_SUCCESS, failed).rate(RATE).sum() / sc.e(c.VLLM_REQUEST_SUCCESS).rate(RATE).sum()
    b.add(
        ts("Error ratio (abort + error)", "percentunit", [(errors, "errors")], lines=[(sc.line(t.ERROR_RATIO), "red")]),
        span=8,
    )
    b.add(
        ts(
            "Tokens per second",
            "short",
            [
                (sc.e(c.VLLM_PROMPT_TOKENS).rate(RATE).sum(), "prompt"),
                (sc.e(c.VLLM_GENERATION_TOKENS).rate(RATE).sum(), "generated"),
            ],
        ),
        span=8,
    )
    b.add(
        ts(
            "Tokens per tenant",
            "short",
            [(sc.ke(c.GATEWAY_TOKENS).rate(RATE).sum(("tenant", "kind")), "{{tenant}} {{kind}}")],
            stack=True,
        )
    )
    b.add(
        ts(
            "Gateway rejections by reason",
            "reqps",
            [(sc.ke(c.GATEWAY_REJECTIONS).rate(RATE).sum(("reason",)), "{{reason}}")],
            stack=True,
        )
    )
    b.row("Engine")
    hit = sc.engine_rate(c.VLLM_PREFIX_CACHE_HITS) / sc.engine_rate(c.VLLM_PREFIX_CACHE_QUERIES)
    b.add(
        ts(
            "Prefix-cache hit rate",
            "percentunit",
            [(hit, "{{instance}}")],
            lines=[(sc.line(t.PREFIX_HIT_FLOOR), "orange")],
            description="Seed 004: below 75 % look at the cache first.",
        ),
        span=8,
    )
    b.add(
        ts(
            "Running and waiting",
            "short",
            [
                (sc.engine_gauge(c.VLLM_REQUESTS_RUNNING), "running {{instance}}"),
                (sc.engine_gauge(c.VLLM_REQUESTS_WAITING), "waiting {{instance}}"),
            ],
            lines=[(sc.line(t.QUEUE_BACKLOG), "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Preemptions per second",
            "short",
            [(sc.engine_rate(c.VLLM_NUM_PREEMPTIONS), "{{instance}}")],
            lines=[(sc.line(t.PREEMPTION_RATE), "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Time to first token",
            "s",
            [(sc.rollup(c.ROLLUP_TTFT_P50), "p50 {{instance}}"), (sc.rollup(c.ROLLUP_TTFT_P99), "p99 {{instance}}")],
            lines=[(sc.line(t.TTFT_P99), "red")],
            description=ROLLUPS,
        ),
        span=8,
    )
    b.add(
        ts(
            "Inter-token latency",
            "s",
            [(sc.rollup(c.ROLLUP_ITL_P50), "p50 {{instance}}"), (sc.rollup(c.ROLLUP_ITL_P99), "p99 {{instance}}")],
            lines=[(sc.line(t.ITL_P99), "red")],
            description=ROLLUPS,
        ),
        span=8,
    )
    b.add(ts("End-to-end latency p99", "s", [(sc.quantile(0.99, c.VLLM_E2E_LATENCY), "{{instance}}")]), span=8)
    b.add(
        ts(
            "Queue, prefill and decode time p99",
            "s",
            [
                (sc.quantile(0.99, c.REQUEST_QUEUE_SECONDS), "queue {{instance}}"),
                (sc.quantile(0.99, c.VLLM_PREFILL_TIME), "prefill {{instance}}"),
                (sc.quantile(0.99, c.VLLM_DECODE_TIME), "decode {{instance}}"),
                (sc.quantile(0.99, c.VLLM_QUEUE_TIME), "queue (vLLM) {{instance}}"),
            ],
            lines=[(sc.line(t.QUEUE_TIME_P99), "red")],
            description="vLLM's phase histograms: millisecond edges under the tuned profile "
            "(--custom-histogram-buckets), 0.3 s and up with vLLM's defaults; queue also from kvscope's per-tenant "
            "histogram (ms).",
        )
    )
    b.add(
        hm(
            "Prompt length (tokens)",
            sc.e(c.VLLM_REQUEST_PROMPT_TOKENS, suffix="_bucket").increase(RATE).sum(("le",)),
            "Long-prompt tails make head-of-line blocking (seed 000: 2 % very long).",
        )
    )
    b.add(
        ts(
            "Tokens per engine step",
            "short",
            [
                (sc.quantile(0.5, c.VLLM_ITERATION_TOKENS), "p50 {{instance}}"),
                (sc.quantile(0.99, c.VLLM_ITERATION_TOKENS), "p99 {{instance}}"),
            ],
        )
    )
    b.add(
        ts(
            "KV capacity (tokens)",
            "short",
            [(sc.ke(c.CACHE_CAPACITY_TOKENS).max(("model_name",)), "{{model_name}}")],
        )
    )
    b.row("Infrastructure")
    _gpu_basics(b, sc)
    return b


def _gpu_basics(b: Board, sc: Scope) -> None:
    used, free, reserved = sc.g(c.DCGM_FB_USED), sc.g(c.DCGM_FB_FREE), sc.g(c.DCGM_FB_RESERVED)
    b.add(
        ts(
            "GPU utilisation",
            "percent",
            [(sc.g(c.DCGM_GPU_UTIL), HOST + " GPU {{gpu}}")],
            lines=[(sc.line(t.GPU_UTIL_FLOOR), "orange")],
        ),
        span=8,
    )
    b.add(
        ts(
            "GPU memory used (share of the card)",
            "percentunit",
            [(used / (used + free + reserved.or_(used * 0)), HOST + " GPU {{gpu}}")],
            lines=[(sc.line(t.GPU_MEMORY_FULL), "red")],
            description="vLLM reserves gpu_memory_utilization of the card up front (see the engines' budgets): 90 % "
            "full is normal; above an engine's budget (plus gpu_memory_over_budget) is a leak or another process, "
            "and GPUMemoryFull fires.",
        ),
        span=8,
    )
    b.add(
        tbl(
            "Engines' memory budgets (gpu_memory_utilization)",
            [(sc.ke(c.VLLM_CACHE_CONFIG_INFO).count(("gpu_memory_utilization", "model_name")), "")],
        ),
        span=8,
    )
    b.add(
        ts(
            "Power vs limit",
            "watt",
            [
                (sc.g(c.DCGM_POWER_USAGE), HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_POWER_LIMIT), "limit " + HOST + " GPU {{gpu}}"),
            ],
        ),
        span=8,
    )
    b.add(
        ts(
            "SM clock",
            "hertz",
            [
                (sc.g(c.DCGM_SM_CLOCK) * 1e6, HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_APP_SM_CLOCK) * 1e6, "base " + HOST + " GPU {{gpu}}"),
            ],
        ),
        span=12,
    )
    capacity = sc.kg(c.GPU_PCIE_LINK_CAPACITY, _variables({"gpu": "gpu"})).max(("gpu",))

    def link_share(signal: c.Signal) -> Expr:
        return sc.g(signal).max(G_BY).binop("/", capacity, on=("gpu",), group_left=())

    b.add(
        ts(
            "PCIe traffic vs link capacity",
            "percentunit",
            [
                (link_share(c.DCGM_PCIE_RX_BYTES), "rx " + HOST + " GPU {{gpu}}"),
                (link_share(c.DCGM_PCIE_TX_BYTES), "tx " + HOST + " GPU {{gpu}}"),
            ],
            lines=[(sc.line(t.PCIE_SATURATION), "red")],
        ),
        span=12,
    )


def _slo_tiles(b: Board, sc: Scope) -> None:
    """Share of requests (tokens) within the SLOs of kvscope.yaml over the dashboard's range,
    from vLLM's own buckets: the bound must be one of their edges (KvscopeSLO*BoundNotABucket)."""
    b.row("Service levels (kvscope.yaml slo)")
    window = "$__range"

    def within(signal: c.Signal, bound: float) -> Expr:
        good = sc.e(signal, Selector((le(bound),)), "_bucket").rate(window).sum()
        return good / sc.e(signal, suffix="_count").rate(window).sum()

    failed = Selector.any_of("finished_reason", c.FINISHED_FAILED)
    failures = sc.e(c.VLLM_REQUEST_SUCCESS, failed).rate(window).sum().or_(vector(0))  # none failed: no series
    ok = 1 - failures / sc.e(c.VLLM_REQUEST_SUCCESS).rate(window).sum()
    slo = sc.slo
    for title, expr, objective, what in (
        (f"TTFT within {slo.ttft.seconds:g} s", within(c.VLLM_TTFT, slo.ttft.seconds), slo.ttft.objective, "requests"),
        (f"ITL within {slo.itl.seconds:g} s", within(c.VLLM_ITL, slo.itl.seconds), slo.itl.objective, "tokens"),
        ("Requests without error", ok, slo.errors.objective, "requests"),
    ):
        b.add(
            st(
                title,
                "percentunit",
                expr,
                f"Share of {what} within the objective ({objective:.2%}) over the dashboard's range.",
                [(objective, "green")],
                base="red",
            ),
            span=8,
            height=5,
        )


def _mig(b: Board, sc: Scope) -> None:
    b.row("MIG instances")
    on_mig = Selector((Matcher(c.DCGM_MIG_LABELS[1], "!=", ""),))
    legend = HOST + " GPU {{gpu}} " + "/".join(f"{{{{{label}}}}}" for label in c.DCGM_MIG_LABELS)
    b.add(
        ts(
            "Memory used per MIG instance",
            "mbytes",
            [(metric(c.DCGM_FB_USED, sc.gpu & on_mig), legend)],
            "A MIG instance is a device of its own (dcgm-exporter's GPU_I_PROFILE, GPU_I_ID); utilisation is not "
            "reported under MIG.",
        ),
        span=12,
    )
    b.add(
        tbl(
            "MIG layout",
            [(metric(c.DCGM_FB_USED, sc.gpu & on_mig).count((*c.DCGM_HOST_LABELS, "gpu", *c.DCGM_MIG_LABELS)), "")],
        ),
        span=12,
    )


def gpu_fleet(sc: Scope) -> Board:
    b = _gpu_variables(
        Board(
            "GPU fleet",
            "kvscope-gpu-fleet",
            "dcgm-exporter-compatible GPU panels plus XIDs, PCIe, clock events, remapped rows, NVLink, "
            "topology and processes.",
            ["gpu", "dcgm"],
        ),
        sc.host,
    )
    b.row("Utilisation, memory, power, clocks")
    _gpu_basics(b, sc)
    b.add(
        ts(
            "Temperature",
            "celsius",
            [(sc.g(c.DCGM_GPU_TEMP), HOST + " GPU {{gpu}}")],
            lines=[(sc.line(t.GPU_TEMP_HIGH), "red")],
        ),
        span=12,
    )
    b.add(
        ts(
            "HBM and tensor activity (DCGM profiling)",
            "percentunit",
            [
                (sc.g(c.DCGM_DRAM_ACTIVE), "DRAM " + HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_TENSOR_ACTIVE), "tensor " + HOST + " GPU {{gpu}}"),
            ],
            lines=[(sc.line(t.DRAM_ACTIVE_HIGH), "orange")],
        ),
        span=12,
    )
    b.row("Faults")
    xids = sc.kg(c.GPU_XID_ERRORS).increase("$__range").sum((*c.DCGM_HOST_LABELS, "instance", "gpu", "xid")).gt(0)
    meaning = sc.kg(c.GPU_XID_INFO).max(("xid", "meaning", "action", "bucket"))
    b.add(
        tbl(
            "XIDs in the range (with meaning and action)",
            [(xids.binop("*", meaning, on=("xid",), group_left=("meaning", "action", "bucket")), "")],
            "Counted one by one by kvscope's XID watcher; repeats show.",
        ),
        span=12,
    )
    b.add(
        tbl(
            "Last XID reported by dcgm-exporter (sticky)",
            [(sc.g(c.DCGM_XID_ERRORS).gt(0), "")],
            "dcgm-exporter holds the last XID until another arrives: look at when it changed.",
        ),
        span=12,
    )
    b.add(
        ts(
            "Clock-event reasons active",
            "short",
            [
                (
                    sc.kg(c.GPU_CLOCK_EVENT_ACTIVE, _variables({"gpu": "gpu"})).max(("gpu", "reason")).gt(0),
                    "GPU {{gpu}} {{reason}}",
                )
            ],
        ),
        span=12,
    )
    b.add(
        ts(
            "Remapped rows and remap failures",
            "short",
            [
                (sc.g(c.DCGM_UNCORRECTABLE_REMAPPED_ROWS), "uncorrectable " + HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_CORRECTABLE_REMAPPED_ROWS), "correctable " + HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_ROW_REMAP_FAILURE), "failure " + HOST + " GPU {{gpu}}"),
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
                (sc.g(c.DCGM_PCIE_LINK_GEN), "gen " + HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_PCIE_MAX_LINK_GEN), "max gen " + HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_PCIE_LINK_WIDTH), "width " + HOST + " GPU {{gpu}}"),
                (sc.g(c.DCGM_PCIE_MAX_LINK_WIDTH), "max width " + HOST + " GPU {{gpu}}"),
            ],
            description="An idle GPU lowers its link (Gen1, sometimes fewer lanes) to save power and trains it "
            "back up for work: a link is degraded when it stays below its max while the GPU is busy "
            "(GPUPCIeLinkDegraded).",
        ),
        span=8,
    )
    b.add(
        ts(
            "PCIe replays per second",
            "short",
            [(sc.g(c.DCGM_PCIE_REPLAY).rate(RATE), HOST + " GPU {{gpu}}")],
            lines=[(sc.line(t.PCIE_REPLAY_RATE), "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "NVLink bandwidth",
            "Bps",
            # 4.8 writes a byte counter, 4.9 a rate in B/s (another kind, so another signal)
            [(either(sc.g(c.DCGM_NVLINK_BANDWIDTH).rate(RATE), sc.g(c.DCGM_NVLINK_THROUGHPUT)), HOST + " GPU {{gpu}}")],
        ),
        span=8,
    )
    _mig(b, sc)
    b.row("Topology and processes")
    b.add(
        tbl(
            "GPU pairs: common ancestor (NVLink, PCIe switch, host bridge, NUMA, system)",
            [(sc.kg(c.GPU_TOPOLOGY_LEVEL).max(("instance", "gpu", "peer_gpu", "level")), "")],
            "Seed 004 section 4.2: tensor parallelism across NUMA nodes ran 3.8x slower.",
        ),
        span=8,
    )
    b.add(tbl("Engines spanning NUMA nodes", [(sc.kg(c.GPU_ENGINE_NUMA_NODES).gt(0), "")]), span=8)
    b.add(
        tbl(
            "Processes on GPUs",
            [
                (sc.kg(c.GPU_PROCESS_INFO).max(("instance", "gpu", "pid", "process_name", "engine")), ""),
                (sc.kg(c.GPU_PROCESS_MEMORY).max(("instance", "gpu", "pid")), ""),
            ],
            unit="bytes",
        ),
        span=8,
    )
    return b


def triage(sc: Scope) -> Board:
    b = _engine_variables(
        Board(
            "Five-step triage",
            "kvscope-triage",
            "Seed 000's triage, one row per step, with the thresholds the diagnosis uses.",
            ["triage"],
        )
    )
    _gpu_variables(b, sc.host)
    namespace = _variables({"namespace": "namespace"})
    command = (
        "kvscope diagnose --prometheus <this Prometheus> --at ${__to:date:seconds} --window ${__range_s}s "
        f"--selector '{namespace}'"
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
            [(sc.engine_gauge(c.VLLM_KV_CACHE_USAGE), "{{instance}}")],
            lines=[(sc.line(t.KV_USAGE_WARNING), "orange"), (sc.line(t.KV_USAGE_CRITICAL), "red")],
        ),
        span=24,
    )
    b.row("2. Waiting queue and queue time")
    b.add(
        ts(
            "Waiting requests",
            "short",
            [(sc.engine_gauge(c.VLLM_REQUESTS_WAITING), "{{instance}}")],
            lines=[(sc.line(t.QUEUE_BACKLOG), "red")],
        )
    )
    b.add(
        ts(
            "Queue time p99",
            "s",
            [(sc.rollup(c.ROLLUP_QUEUE_P99), "{{instance}}")],
            lines=[(sc.line(t.QUEUE_TIME_P99), "red")],
            description=ROLLUPS,
        )
    )
    b.row("3. GPU memory and utilisation")
    _gpu_basics(b, sc)
    b.row("4. Preemption / swap")
    b.add(
        ts(
            "Preemptions per second",
            "short",
            [(sc.engine_rate(c.VLLM_NUM_PREEMPTIONS), "{{instance}}")],
            lines=[(sc.line(t.PREEMPTION_RATE), "red")],
        )
    )
    b.add(ts("Swapped requests (vLLM V0)", "short", [(sc.engine_gauge(c.VLLM_REQUESTS_SWAPPED), "{{instance}}")]))
    b.row("5. Kernels")
    b.add(
        ts(
            "HBM activity (decode is bound by it)",
            "percentunit",
            [(sc.g(c.DCGM_DRAM_ACTIVE), HOST + " GPU {{gpu}}")],
            lines=[(sc.line(t.DRAM_ACTIVE_HIGH), "orange")],
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


def tenants(sc: Scope) -> Board:
    b = Board(
        "Tenants and QoS",
        "kvscope-tenants",
        "Per-tenant and per-priority latency, quota use and rejections (kvscope serve's gateway).",
        ["tenants", "qos"],
    )
    b.query_variable("tenant", "Tenant", label_values(metric(c.GATEWAY_REQUESTS), "tenant"))
    tsel = _variables({"tenant": "tenant"})
    ttft, queue = sc.line(t.TTFT_P99), sc.line(t.QUEUE_TIME_P99)
    b.row("Latency")
    b.add(
        ts(
            "TTFT p99 by tenant",
            "s",
            [(sc.quantile(0.99, c.REQUEST_TTFT_SECONDS, by=("tenant",), selector=tsel), "{{tenant}}")],
            lines=[(ttft, "red")],
        )
    )
    b.add(
        ts(
            "TTFT p99 by priority class",
            "s",
            [(sc.quantile(0.99, c.REQUEST_TTFT_SECONDS, by=("priority_class",), selector=tsel), "{{priority_class}}")],
            lines=[(ttft, "red")],
        )
    )
    b.add(
        ts(
            "Queue time p99 by priority class",
            "s",
            [(sc.quantile(0.99, c.REQUEST_QUEUE_SECONDS, by=("priority_class",), selector=tsel), "{{priority_class}}")],
            lines=[(queue, "red")],
        )
    )
    b.add(
        ts(
            "Requests by tenant and tier",
            "reqps",
            [(sc.ke(c.GATEWAY_REQUESTS, tsel).rate(RATE).sum(("tenant", "tier")), "{{tenant}} ({{tier}})")],
            stack=True,
        )
    )
    b.row("Quota and rejections")
    b.add(
        ts(
            "Token budget left (per minute)",
            "short",
            [
                (sc.ke(c.GATEWAY_QUOTA_REMAINING, tsel), "left {{tenant}}"),
                (sc.ke(c.GATEWAY_QUOTA_LIMIT, tsel), "limit {{tenant}}"),
            ],
        )
    )
    b.add(
        ts(
            "Rejections by reason and tenant",
            "reqps",
            [(sc.ke(c.GATEWAY_REJECTIONS, tsel).rate(RATE).sum(("reason", "tenant")), "{{tenant}} {{reason}}")],
            stack=True,
        )
    )
    b.add(
        ts(
            "Tokens by tenant",
            "short",
            [(sc.ke(c.GATEWAY_TOKENS, tsel).rate(RATE).sum(("tenant", "kind")), "{{tenant}} {{kind}}")],
            stack=True,
        )
    )
    b.add(ts("In flight by tenant", "short", [(sc.ke(c.GATEWAY_INFLIGHT, tsel).sum(("tenant",)), "{{tenant}}")]))
    lane_tokens = sc.ke(c.GATEWAY_LANE_TOKENS, Selector.of(kind="used")).sum(("priority_class",))
    lane_capacity = sc.ke(c.GATEWAY_LANE_TOKENS, Selector.of(kind="capacity")).sum(("priority_class",))
    b.add(
        ts(
            "Held at the gateway for their class's KV share",
            "short",
            [
                (sc.ke(c.GATEWAY_LANE_WAITING).sum(("priority_class",)), "{{priority_class}} waiting"),
                (lane_tokens / lane_capacity, "{{priority_class}} share used"),
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
                    quantile(
                        0.99, c.GATEWAY_LANE_WAIT_SECONDS, window=RATE, by=("priority_class",), selector=sc.own_engine
                    ),
                    "{{priority_class}}",
                )
            ],
        )
    )
    return b


BOARDS: dict[str, Callable[[Scope], Board]] = {
    "llm-serving-overview": overview,
    "vllm-engines": engines,
    "gpu-fleet": gpu_fleet,
    "triage": triage,
    "tenants-qos": tenants,
}


def render(name: str, config: Config | None = None) -> str:
    board = BOARDS[name](Scope.of(config or Config()))
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def write(out: Path, config: Config | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in BOARDS:
        path = out / f"{name}.json"
        path.write_text(render(name, config))
        paths.append(path)
    return paths
