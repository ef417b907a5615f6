"""The alert and recording rules, as data: expressions from the catalog's names, limits from the
thresholds table, so the alert, the dashboard's red line and the diagnosis move together.

Conventions (monitoring-mixins): CamelCase names prefixed by component, a `severity` label,
a static `summary`, a templated `description` that ends with the `kvscope diagnose` command to
run, and a `runbook_url` into docs/runbooks.md. Every alert carries two promtool cases: one
where it fires (and, with `for:`, not before), one just below its threshold where it stays
silent. The seeds' set (seed 002 section 6: GPUMemoryFull, GPUUtilLow, GPUXIDError,
VLLMQueueBacklog, TTFTHigh) is here under kvscope's names, with the seed's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.xid_catalog import Bucket, codes

ENGINE = "namespace, pod, instance, target, model_name"
GPU_BY = "instance, Hostname, gpu"
RUNBOOK_BASE = "https://github.com/kvscope/kvscope/blob/main/docs/runbooks.md"
# vLLM's TTFT histogram bounds (vllm/v1/metrics/buckets.py): an SLO threshold must be one of them.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


def either(*exprs: str) -> str:
    """`A or B`: the current vLLM name first, legacy names after."""
    return " or ".join(f"({e})" for e in exprs)


@dataclass(frozen=True)
class Case:
    """A promtool test: input series (selector -> values), when the alert is checked, what it holds."""

    series: dict[str, str]
    at: str
    labels: dict[str, str] = field(default_factory=dict)  # labels the alert carries beyond name/severity
    value: float | None = None  # the alert's $value at `at` (None: the case expects no alert)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str
    summary: str
    description: str  # Go template: {{ $labels.x }}, {{ $value | printf "%.3g" }}, ...
    fires: Case
    silent: Case
    for_: str = "0m"
    diagnose_scope: str = "namespace"  # label the diagnose command narrows to ("" = none)
    group: str = "kvscope-engine"

    @property
    def anchor(self) -> str:
        return self.name.lower()


def _w(v: float) -> str:
    return f"{v:g}"


E_LABELS = {"namespace": "prod", "pod": "vllm-0", "instance": "10.0.0.1:8000", "model_name": "m"}
E_SEL = '{namespace="prod",pod="vllm-0",instance="10.0.0.1:8000",model_name="m"}'


def e_series(metric: str, **extra: str) -> str:
    """`metric{...}` of the engine in the test cases, with `extra` labels appended."""
    more = "".join(f',{k}="{v}"' for k, v in extra.items())
    return metric + E_SEL[:-1] + more + "}"


G_LABELS = {"instance": "node-1:9400", "Hostname": "node-1", "gpu": "3"}
G_SEL = '{instance="node-1:9400",Hostname="node-1",gpu="3",UUID="GPU-3"}'


def _engine_alerts() -> list[Alert]:
    kv = either(*(f"max by ({ENGINE}) ({name})" for name in c.VLLM_KV_CACHE_USAGE.names))
    preempt = f"sum by ({ENGINE}) (rate({c.VLLM_NUM_PREEMPTIONS.name}[5m]))"
    swapped = f"max by ({ENGINE}) ({c.VLLM_REQUESTS_SWAPPED.name})"
    waiting = f"max by ({ENGINE}) ({c.VLLM_REQUESTS_WAITING.name})"
    queue_p99 = either(
        *(
            f"histogram_quantile(0.99, sum by (le, {ENGINE}) (rate({s.name}_bucket[5m])))"
            for s in (c.VLLM_QUEUE_TIME, c.REQUEST_QUEUE_SECONDS)
        )
    )
    ttft_p99 = f"histogram_quantile(0.99, sum by (le, {ENGINE}) (rate({c.VLLM_TTFT.name}_bucket[5m])))"
    hits, queries = c.VLLM_PREFIX_CACHE_HITS, c.VLLM_PREFIX_CACHE_QUERIES

    def hit_ratio(span: str, offset: str = "") -> str:
        return either(
            *(
                f"sum by ({ENGINE}) (rate({h}[{span}]{offset})) / sum by ({ENGINE}) (rate({q}[{span}]{offset}))"
                for h, q in zip(hits.names, queries.names, strict=True)
            )
        )

    success = c.VLLM_REQUEST_SUCCESS.name
    errors = (
        f'sum by ({ENGINE}) (rate({success}{{finished_reason=~"abort|error"}}[5m])) / '
        f"sum by ({ENGINE}) (rate({success}[5m]))"
    )
    ttft_bucket = c.VLLM_TTFT.name + "_bucket"
    queue_bucket = c.VLLM_QUEUE_TIME.name + "_bucket"
    return [
        Alert(
            "VLLMKVCacheNearlyFull",
            f"({kv}) >= {_w(t.KV_USAGE_WARNING.value)}",
            "warning",
            "vLLM KV cache nearly full.",
            "KV-cache usage of {{ $labels.instance }} is {{ $value | humanizePercentage }}: "
            "the next burst of long prompts starts preemptions.",
            fires=Case({c.VLLM_KV_CACHE_USAGE.name + E_SEL: "0.87x10"}, "5m", E_LABELS, 0.87),
            silent=Case({c.VLLM_KV_CACHE_USAGE.name + E_SEL: "0.84x10"}, "5m"),
            for_=t.KV_USAGE_WARNING.for_,
        ),
        Alert(
            "VLLMKVCacheExhausted",
            f"(({kv}) >= {_w(t.KV_USAGE_CRITICAL.value)}) and (({preempt} > 0) or ({swapped} > 0))",
            "critical",
            "vLLM KV cache exhausted: requests are being preempted.",
            "KV-cache usage of {{ $labels.instance }} is {{ $value | humanizePercentage }} and "
            "requests are preempted (or swapped): they recompute their prefill and the queue grows (seed 000).",
            fires=Case(
                {c.VLLM_KV_CACHE_USAGE.name + E_SEL: "0.95x10", c.VLLM_NUM_PREEMPTIONS.name + E_SEL: "0+3x10"},
                "4m",
                E_LABELS,
                0.95,
            ),
            silent=Case(
                {c.VLLM_KV_CACHE_USAGE.name + E_SEL: "0.95x10", c.VLLM_NUM_PREEMPTIONS.name + E_SEL: "0+0x10"}, "4m"
            ),
            for_=t.KV_USAGE_CRITICAL.for_,
        ),
        Alert(
            "VLLMPreemptionsHigh",
            f"{preempt} > {_w(t.PREEMPTION_RATE.value)}",
            "warning",
            "vLLM is preempting requests.",
            '{{ $labels.instance }} preempts {{ $value | printf "%.3g" }} requests per second: '
            "the KV pool is too small for the running set.",
            fires=Case({c.VLLM_NUM_PREEMPTIONS.name + E_SEL: "0+6x15"}, "10m", E_LABELS, 0.1),
            silent=Case({c.VLLM_NUM_PREEMPTIONS.name + E_SEL: "0+2.4x15"}, "10m"),
            for_=t.PREEMPTION_RATE.for_,
        ),
        Alert(
            "VLLMQueueBacklog",
            f"{waiting} > {_w(t.QUEUE_BACKLOG.value)}",
            "warning",
            "vLLM queue backlog: more load than capacity.",
            '{{ $labels.instance }} has {{ $value | printf "%.3g" }} requests waiting (seed 002: add capacity).',
            fires=Case({c.VLLM_REQUESTS_WAITING.name + E_SEL: "150x10"}, "3m", E_LABELS, 150),
            silent=Case({c.VLLM_REQUESTS_WAITING.name + E_SEL: "100x10"}, "3m"),
            for_=t.QUEUE_BACKLOG.for_,
        ),
        Alert(
            "VLLMQueueTimeHigh",
            f"({queue_p99}) > {_w(t.QUEUE_TIME_P99.value)}",
            "warning",
            "vLLM requests wait long in the queue.",
            'p99 time in queue on {{ $labels.instance }} is {{ $value | printf "%.3g" }} s.',
            fires=Case(
                {
                    e_series(queue_bucket, le="0.5"): "0x15",
                    e_series(queue_bucket, le="2.5"): "0+10x15",
                    e_series(queue_bucket, le="+Inf"): "0+10x15",
                },
                "10m",
                E_LABELS,
                2.48,
            ),
            silent=Case(
                {
                    e_series(queue_bucket, le="0.5"): "0+10x15",
                    e_series(queue_bucket, le="+Inf"): "0+10x15",
                },
                "10m",
            ),
            for_=t.QUEUE_TIME_P99.for_,
        ),
        Alert(
            "VLLMTTFTHigh",
            f"{ttft_p99} > {_w(t.TTFT_P99.value)}",
            "warning",
            "vLLM time to first token is high.",
            'p99 TTFT on {{ $labels.instance }} is {{ $value | printf "%.3g" }} s (seed 002: above 3 s users leave).',
            fires=Case(
                {
                    e_series(ttft_bucket, le="2.5"): "0x15",
                    e_series(ttft_bucket, le="5"): "0+10x15",
                    e_series(ttft_bucket, le="+Inf"): "0+10x15",
                },
                "10m",
                E_LABELS,
                4.975,
            ),
            silent=Case(
                {
                    e_series(ttft_bucket, le="2.5"): "0+10x15",
                    e_series(ttft_bucket, le="+Inf"): "0+10x15",
                },
                "10m",
            ),
            for_=t.TTFT_P99.for_,
        ),
        Alert(
            "VLLMPrefixCacheHitRateDrop",
            # "it was healthy at some point in the hour before": a plain [1h] ratio would be
            # diluted by the drop itself and resolve the alert while the drop goes on.
            f"(({hit_ratio('10m')}) < {_w(t.PREFIX_HIT_FLOOR.value)}) and "
            f"(max_over_time(({hit_ratio('10m')})[1h:1m] offset 10m) >= {_w(t.PREFIX_HIT_FLOOR.value)})",
            "warning",
            "vLLM prefix-cache hit rate dropped.",
            "The prefix-cache hit rate of {{ $labels.instance }} fell to {{ $value | humanizePercentage }} "
            "(it was above 75 % the hour before): shared prefixes stopped being shared (seed 004).",
            fires=Case(
                {hits.name + E_SEL: "0+90x60 5400+10x30", queries.name + E_SEL: "0+100x90"}, "80m", E_LABELS, 0.1
            ),
            silent=Case({hits.name + E_SEL: "0+90x60 5400+80x30", queries.name + E_SEL: "0+100x90"}, "80m"),
            for_=t.PREFIX_HIT_FLOOR.for_,
        ),
        Alert(
            "VLLMErrorRatioHigh",
            f"({errors}) > {_w(t.ERROR_RATIO.value)}",
            "warning",
            "vLLM requests are failing.",
            "{{ $value | humanizePercentage }} of requests on {{ $labels.instance }} end in an abort or error.",
            fires=Case(
                {
                    e_series(success, finished_reason="length"): "0+90x15",
                    e_series(success, finished_reason="error"): "0+10x15",
                },
                "10m",
                E_LABELS,
                0.1,
            ),
            silent=Case(
                {
                    e_series(success, finished_reason="length"): "0+96x15",
                    e_series(success, finished_reason="error"): "0+4x15",
                },
                "10m",
            ),
            for_=t.ERROR_RATIO.for_,
        ),
        Alert(
            "KvscopeTargetDown",
            f"{c.TARGET_UP.name} == 0",
            "warning",
            "A vLLM target of kvscope export does not answer.",
            "kvscope export on {{ $labels.instance }} cannot scrape {{ $labels.target }}: its engine metrics are gone.",
            fires=Case(
                {c.TARGET_UP.name + '{instance="node-1:9400",target="http://10.0.0.1:8000/metrics"}': "0x10"},
                "2m",
                {"instance": "node-1:9400", "target": "http://10.0.0.1:8000/metrics"},
                0,
            ),
            silent=Case(
                {c.TARGET_UP.name + '{instance="node-1:9400",target="http://10.0.0.1:8000/metrics"}': "1x10"}, "2m"
            ),
            for_=t.TARGET_DOWN_FOR.for_,
            diagnose_scope="",
        ),
        Alert(
            "KvscopeCollectorFailing",
            f"{c.EXPORTER_COLLECTOR_SUCCESS.name} == 0",
            "warning",
            "A kvscope export collector is failing.",
            "The {{ $labels.collector }} collector of kvscope export on {{ $labels.instance }} fails: "
            "its series are missing.",
            fires=Case(
                {c.EXPORTER_COLLECTOR_SUCCESS.name + '{instance="node-1:9400",collector="nvml"}': "0x10"},
                "5m",
                {"instance": "node-1:9400", "collector": "nvml"},
                0,
            ),
            silent=Case(
                {c.EXPORTER_COLLECTOR_SUCCESS.name + '{instance="node-1:9400",collector="nvml"}': "1x10"}, "5m"
            ),
            for_="5m",
            diagnose_scope="",
        ),
    ]


def _gpu_alerts() -> list[Alert]:
    used, free = c.DCGM_FB_USED.name, c.DCGM_FB_FREE.name
    xid = c.GPU_XID_ERRORS.name
    reasons = "sw_power_cap|hw_slowdown|sw_thermal_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown"

    def xid_alert(name: str, bucket: Bucket, severity: str, what: str, code: int) -> Alert:
        pattern = "|".join(str(x) for x in codes(bucket))
        return Alert(
            name,
            f'sum by ({GPU_BY}, xid) (increase({xid}{{xid=~"{pattern}"}}[5m])) > 0',
            severity,
            f"GPU XID error: {what}.",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $labels.xid }} "
            f'({what}) {{{{ $value | printf "%.3g" }}}} time(s) in 5 minutes; '
            "see the XID table on the GPU fleet dashboard.",
            fires=Case(
                {
                    xid
                    + f'{{instance="node-1:9400",Hostname="node-1",gpu="3",UUID="GPU-3",xid="{code}"}}': "0 0 0 1 1 1"
                },
                "4m",
                {**G_LABELS, "xid": str(code)},
                1.0,
            ),
            silent=Case(
                {
                    xid
                    + f'{{instance="node-1:9400",Hostname="node-1",gpu="3",UUID="GPU-3",xid="{code}"}}': "0 0 0 0 0 0"
                },
                "4m",
            ),
            diagnose_scope="",
            group="kvscope-gpu",
        )

    tx, rx, cap = c.DCGM_PCIE_TX_BYTES.name, c.DCGM_PCIE_RX_BYTES.name, c.GPU_PCIE_LINK_CAPACITY.name
    pcie = " or ".join(
        f"(max by (instance, gpu) ({m}) / on (instance, gpu) max by (instance, gpu) ({cap}) "
        f"> {_w(t.PCIE_SATURATION.value)})"
        for m in (tx, rx)
    )
    return [
        Alert(
            "GPUMemoryFull",
            f"{used} / ({used} + {free}) > {_w(t.GPU_MEMORY_FULL.value)}",
            "critical",
            "GPU memory nearly exhausted.",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is {{ $value | humanizePercentage }} full: vLLM reserves "
            "its share up front, so this is more than the engine took (a leak or another process); CUDA OOM is near.",
            fires=Case(
                {used + G_SEL: "78000x10", free + G_SEL: "3000x10"}, "2m", {**G_LABELS, "UUID": "GPU-3"}, 78000 / 81000
            ),
            silent=Case({used + G_SEL: "76000x10", free + G_SEL: "5000x10"}, "2m"),
            for_=t.GPU_MEMORY_FULL.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUUtilLow",
            f"{c.DCGM_GPU_UTIL.name} < {_w(t.GPU_UTIL_FLOOR.value)}",
            "info",
            "GPU mostly idle.",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} has been "
            '{{ $value | printf "%.3g" }} % busy for 10 minutes '
            "(seed 002: consolidate or scale down).",
            fires=Case({c.DCGM_GPU_UTIL.name + G_SEL: "10x20"}, "10m", {**G_LABELS, "UUID": "GPU-3"}, 10),
            silent=Case({c.DCGM_GPU_UTIL.name + G_SEL: "20x20"}, "10m"),
            for_=t.GPU_UTIL_FLOOR.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        xid_alert("GPUXidAppLevel", Bucket.APP, "warning", "an application fault; restart the app", 13),
        xid_alert("GPUXidResetRequired", Bucket.RESET_GPU, "critical", "the GPU needs a reset", 48),
        xid_alert("GPUXidDrainNode", Bucket.DRAIN_NODE, "critical", "drain the node", 79),
        Alert(
            "GPUXIDReported",
            f"(max by ({GPU_BY}) ({c.DCGM_XID_ERRORS.name}) > 0 "
            f"unless max by ({GPU_BY}) ({c.DCGM_XID_ERRORS.name} offset 5m)) "
            f"or (max by ({GPU_BY}) (changes({c.DCGM_XID_ERRORS.name}[5m])) > 0)",
            "critical",
            "GPU XID error reported by dcgm-exporter.",
            "dcgm-exporter's last-XID value on GPU {{ $labels.gpu }} of {{ $labels.Hostname }} changed in the last "
            "5 minutes (seed 002: XIDs are hardware faults). The gauge is sticky, so only changes count.",
            fires=Case({c.DCGM_XID_ERRORS.name + G_SEL: "0 0 0 79 79 79"}, "4m", G_LABELS, 79),
            silent=Case({c.DCGM_XID_ERRORS.name + G_SEL: "79 79 79 79 79 79 79 79 79 79"}, "9m"),
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPURowRemapFailure",
            f"{c.DCGM_ROW_REMAP_FAILURE.name} > 0",
            "critical",
            "GPU row remap failed.",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} failed to remap a row of HBM: reset the GPU and "
            "contact support.",
            fires=Case({c.DCGM_ROW_REMAP_FAILURE.name + G_SEL: "0 1 1"}, "2m", {**G_LABELS, "UUID": "GPU-3"}, 1),
            silent=Case({c.DCGM_ROW_REMAP_FAILURE.name + G_SEL: "0 0 0"}, "2m"),
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUThrottled",
            f'(max by (instance, gpu) (avg_over_time({c.GPU_CLOCK_EVENT_ACTIVE.name}{{reason=~"{reasons}"}}[5m])) '
            f"> {_w(t.THROTTLE_SHARE.value)}) and on (instance, gpu) "
            f"(max by (instance, gpu) ({c.DCGM_GPU_UTIL.name}) > {_w(t.GPU_UTIL_FLOOR.value)})",
            "warning",
            "GPU clocks held down by power or temperature.",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} was throttled {{ $value | humanizePercentage }} of the "
            "last 5 minutes while busy: latency follows the clock.",
            fires=Case(
                {
                    c.GPU_CLOCK_EVENT_ACTIVE.name
                    + '{instance="node-1:9400",gpu="3",reason="sw_thermal_slowdown"}': "1x15",
                    c.DCGM_GPU_UTIL.name + G_SEL: "90x15",
                },
                "10m",
                {"instance": "node-1:9400", "gpu": "3"},
                1,
            ),
            silent=Case(
                {
                    c.GPU_CLOCK_EVENT_ACTIVE.name
                    + '{instance="node-1:9400",gpu="3",reason="sw_thermal_slowdown"}': "1x15",
                    c.DCGM_GPU_UTIL.name + G_SEL: "5x15",
                },
                "10m",
            ),
            for_=t.CLOCK_BELOW_BASE.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUTemperatureHigh",
            f"{c.DCGM_GPU_TEMP.name} >= {_w(t.GPU_TEMP_HIGH.value)}",
            "warning",
            "GPU running hot.",
            'GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is at {{ $value | printf "%.3g" }} C: it slows its clocks '
            "near 87 C.",
            fires=Case({c.DCGM_GPU_TEMP.name + G_SEL: "90x10"}, "5m", {**G_LABELS, "UUID": "GPU-3"}, 90),
            silent=Case({c.DCGM_GPU_TEMP.name + G_SEL: "84x10"}, "5m"),
            for_="5m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUPCIeLinkDegraded",
            f"({c.DCGM_PCIE_LINK_GEN.name} < {c.DCGM_PCIE_MAX_LINK_GEN.name}) or "
            f"({c.DCGM_PCIE_LINK_WIDTH.name} < {c.DCGM_PCIE_MAX_LINK_WIDTH.name})",
            "warning",
            "GPU PCIe link degraded.",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} runs its PCIe link below its generation or width: "
            "reseat or replace the card or riser.",
            fires=Case(
                {
                    c.DCGM_PCIE_LINK_GEN.name + G_SEL: "3x10",
                    c.DCGM_PCIE_MAX_LINK_GEN.name + G_SEL: "5x10",
                    c.DCGM_PCIE_LINK_WIDTH.name + G_SEL: "16x10",
                    c.DCGM_PCIE_MAX_LINK_WIDTH.name + G_SEL: "16x10",
                },
                "5m",
                {**G_LABELS, "UUID": "GPU-3"},
                3,
            ),
            silent=Case(
                {
                    c.DCGM_PCIE_LINK_GEN.name + G_SEL: "5x10",
                    c.DCGM_PCIE_MAX_LINK_GEN.name + G_SEL: "5x10",
                    c.DCGM_PCIE_LINK_WIDTH.name + G_SEL: "16x10",
                    c.DCGM_PCIE_MAX_LINK_WIDTH.name + G_SEL: "16x10",
                },
                "5m",
            ),
            for_="5m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUPCIeSaturated",
            pcie,
            "warning",
            "GPU PCIe link saturated.",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} moves {{ $value | humanizePercentage }} "
            "of its PCIe link's "
            "capacity (seed 002: host-device copies stall the engine).",
            fires=Case(
                {
                    tx + G_SEL: "10e9x10",
                    rx + G_SEL: "55e9x10",
                    cap + '{instance="node-1:9400",gpu="3",UUID="GPU-3"}': "63e9x10",
                },
                "5m",
                {"instance": "node-1:9400", "gpu": "3"},
                55 / 63,
            ),
            silent=Case(
                {
                    tx + G_SEL: "10e9x10",
                    rx + G_SEL: "50e9x10",
                    cap + '{instance="node-1:9400",gpu="3",UUID="GPU-3"}': "63e9x10",
                },
                "5m",
            ),
            for_=t.PCIE_SATURATION.for_,
            diagnose_scope="",
            group="kvscope-gpu",
        ),
        Alert(
            "GPUPCIeReplays",
            f"rate({c.DCGM_PCIE_REPLAY.name}[5m]) > {_w(t.PCIE_REPLAY_RATE.value)}",
            "warning",
            "GPU PCIe link is retrying.",
            'GPU {{ $labels.gpu }} on {{ $labels.Hostname }} replays {{ $value | printf "%.3g" }} PCIe packets per '
            "second: the link is failing.",
            fires=Case({c.DCGM_PCIE_REPLAY.name + G_SEL: "0+120x15"}, "10m", {**G_LABELS, "UUID": "GPU-3"}, 2),
            silent=Case({c.DCGM_PCIE_REPLAY.name + G_SEL: "0+60x15"}, "10m"),
            for_="5m",
            diagnose_scope="",
            group="kvscope-gpu",
        ),
    ]


@dataclass(frozen=True)
class Slo:
    """A service-level objective over vLLM's own counters, 30-day budget."""

    name: str
    objective: float
    good: str  # expr: good events per second over [W]
    total: str  # expr: all events per second over [W]
    description: str


SLO_BY = "namespace, model_name"
BURN_RATES = (  # (severity, long window, short window, factor): Google SRE workbook, 30-day budget
    ("critical", "1h", "5m", 14.4),
    ("critical", "6h", "30m", 6.0),
    ("warning", "1d", "2h", 3.0),
    ("warning", "3d", "6h", 1.0),
)


def slos(ttft_objective: float = 0.99, ttft_seconds: float = 2.5, error_objective: float = 0.995) -> list[Slo]:
    ttft, success = c.VLLM_TTFT.name, c.VLLM_REQUEST_SUCCESS.name
    return [
        Slo(
            "ttft",
            ttft_objective,
            good=f'sum by ({SLO_BY}) (rate({ttft}_bucket{{le="{_w(ttft_seconds)}"}}[W]))',
            total=f"sum by ({SLO_BY}) (rate({ttft}_count[W]))",
            description=f"{ttft_objective:.2%} of requests get their first token within {ttft_seconds:g} s",
        ),
        Slo(
            "errors",
            error_objective,
            good=f'sum by ({SLO_BY}) (rate({success}{{finished_reason=~"stop|length|repetition"}}[W]))',
            total=f"sum by ({SLO_BY}) (rate({success}[W]))",
            description=f"{error_objective:.2%} of requests finish without abort or error",
        ),
    ]


def engine_alerts() -> list[Alert]:
    return _engine_alerts()


def gpu_alerts() -> list[Alert]:
    return _gpu_alerts()
