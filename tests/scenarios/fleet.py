"""A recorded-style fleet: plain vLLM (V1, or 0.6-era legacy names) and plain dcgm-exporter
series, step by step, as Prometheus would have scraped them.

Each engine instance runs on its own node with one GPU. Its state at time t (load, latency
distributions, KV usage, GPU readings) comes from a behaviour function; counters integrate
rates, histograms accumulate lognormal observations into vLLM's own bucket boundaries, so
histogram_quantile recovers the intended medians and p99s. Written as OpenMetrics with
timestamps for `promtool tsdb create-blocks-from openmetrics`, or as a /metrics page at one
moment for the scrape path.
"""

from __future__ import annotations

import functools
import io
import math
import zlib
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TextIO

from vllm.v1.metrics.buckets import (
    INTER_TOKEN_LATENCY_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    histogram_buckets,
)

from kvscope import catalog as c
from kvscope.gpu_models import pcie_capacity

PROMPT_BUCKETS = tuple(float(b) for b in histogram_buckets("request_tokens", max_model_len=32768))
MODEL = "llama-3.1-70b"
GPU_MODEL = "NVIDIA H100 80GB HBM3"
FB_TOTAL_MIB = 81559.0
FB_RESERVED_MIB = 512.0


@dataclass(frozen=True)
class State:
    """One instance (and its GPU) at one moment."""

    rate: float = 5.0  # requests/s
    prompt_median: float = 800.0
    prompt_p99: float = 3000.0
    output: float = 200.0
    kv: float = 0.45
    waiting: float = 1.0
    running: float = 20.0
    preempt_rate: float = 0.0
    swapped: float = 0.0
    queue: tuple[float, float] = (0.02, 0.2)  # median, p99 (s)
    ttft: tuple[float, float] = (0.12, 0.6)
    itl: tuple[float, float] = (0.025, 0.06)
    prefill: tuple[float, float] = (0.08, 0.4)
    hit: float = 0.55
    error_share: float = 0.002
    memory_share: float = 0.92
    gateway_mean: float | None = None
    # GPU
    util: float = 65.0
    fb_used: float = 0.92 * FB_TOTAL_MIB
    temp: float = 62.0
    power: float = 480.0
    sm_clock: float = 1980.0
    pcie_rx: float = 2e9
    pcie_tx: float = 1e9
    xid: float = 0.0
    remap_failure: float = 0.0
    dram_active: float | None = None
    engine_up: bool = True
    # shapes real systems add
    epoch: int = 0  # the engine restarted each time this changes: its counters start again
    scraped: bool = True  # False: a scrape gap, no series at all from the node
    rejections: float = 0.0  # admission rejections per second (vLLM 0.32, a capped queue)
    clock_events: tuple[str, ...] = ()  # active clock-event reasons (bitmask and EXP counts)
    xid_burst: float = 0.0  # XIDs per minute (DCGM_EXP_XID_ERRORS_COUNT, 5-minute window)
    sentinel: bool = False  # DCGM blank sentinels where temperature and power should be
    gr_active: float | None = None  # DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1); None: util / 100
    # what vLLM 0.32 fleets add
    tpot: tuple[float, float] | None = None  # request_time_per_output_token (median, p99); None: from itl
    spec_tokens: int = 0  # num_speculative_tokens (0: no speculative decoding)
    spec_accept: float = 0.7  # the share of draft tokens accepted
    stalled: bool = False  # the engine answers /metrics but makes no progress: its counters stop
    kv_transfers: float = 0.0  # NIXL KV transfers per second (0: no KV connector)
    kv_transfer_failures: float = 0.0  # of which failed, per second
    kv_transfer_time: tuple[float, float] = (0.02, 0.08)  # NIXL transfer time (median, p99)
    # the PCIe link as NVML reads it: None writes no link series (dcgm-exporter's default counters)
    pcie_link: tuple[int, int] | None = None  # current (generation, width): lower while idle
    pcie_capable: tuple[int, int] = (5, 16)  # the link's maximum (generation, width)


Behaviour = Callable[[float], State]  # minutes since the start -> state


@dataclass
class Instance:
    name: str
    behaviour: Behaviour
    legacy: bool = False  # vLLM 0.5/0.6 names
    gpus: int = 1  # GPUs on the instance's node (all behave alike)
    host_label: str = "Hostname"  # dcgm-exporter main spells it `hostname`
    gpu_model: str = GPU_MODEL
    pod_mapping: bool = False  # dcgm-exporter's Kubernetes mapping: the engine's pod on its GPUs
    engines: tuple[Behaviour, ...] = ()  # data-parallel engines (vLLM's `engine` label), GPU i <- engine i
    mig: tuple[str, ...] = ()  # MIG profiles of GPU 0 (GPU_I_ID, GPU_I_PROFILE); no GPU_UTIL then
    exp_counts: bool = False  # DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT enabled
    no_vllm: bool = False  # a GPU node that serves no vLLM
    no_kv_gauge: bool = False  # a page without vllm:kv_cache_usage_perc
    model: str = MODEL  # the served model (model_name)
    # "host": instance is host:port (the engine's pod, the GPUs' node); "pod": relabelled to the
    # pod's name; "bare": bare metal, the engine at <node>:8000 beside dcgm-exporter at <node>:9400
    instance_style: str = "host"
    mig_zero_util: bool = False  # dcgm-exporter 3.x writes DCGM_FI_DEV_GPU_UTIL 0 on MIG instances
    host: str = ""  # the node's name (default: the instance's, vllm- read as node-)
    first_gpu: int = 0  # the index of its first GPU on the node (two engines of 4 GPUs on one node)
    node_label: bool = False  # Kubernetes service discovery relabelled the engine's node into `node`

    @property
    def engine_labels(self) -> dict[str, str]:
        if self.instance_style == "bare":
            return {"instance": f"{self.node}:8000", "job": "vllm", "model_name": self.model}
        labels = {
            "instance": self.name if self.instance_style == "pod" else f"{self.name}:8000",
            "job": "vllm",
            "model_name": self.model,
            "namespace": "prod",
            "pod": self.name,
        }
        return labels | {"node": self.node} if self.node_label else labels

    @property
    def gpu_labels(self) -> dict[str, str]:
        return self.gpu(0)

    @property
    def node(self) -> str:
        return self.host or self.name.replace("vllm", "node")

    @property
    def units(self) -> list[tuple[str | None, Behaviour]]:
        """(engine label or None, behaviour) for each engine core of the instance."""
        if self.engines:
            return [(str(i), b) for i, b in enumerate(self.engines)]
        return [(None, self.behaviour)]

    def gpu(self, index: int) -> dict[str, str]:
        index += self.first_gpu
        labels = {
            "instance": f"dcgm-exporter-{self.node}" if self.instance_style == "pod" else f"{self.node}:9400",
            "job": "dcgm-exporter",
            "gpu": str(index),
            "UUID": f"GPU-{zlib.crc32(self.name.encode()) % 10**8:08d}-0000-4000-8000-{index:012d}",
            "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
            "device": f"nvidia{index}",
            "modelName": self.gpu_model,
            self.host_label: self.node,
        }
        if self.pod_mapping:
            labels |= {"namespace": "prod", "pod": self.name, "container": "vllm"}
        return labels


def _lognormal_cdf(x: float, median: float, p99: float) -> float:
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    sigma = max(math.log(max(p99, median * 1.0001) / median) / 2.326, 1e-6)
    return 0.5 * (1 + math.erf(math.log(x / median) / (sigma * math.sqrt(2))))


# a state holds its latencies for minutes: a histogram's bucket shares are worked out once a shape
@functools.lru_cache(maxsize=4096)
def _shape(bounds: tuple[float, ...], median: float, p99: float) -> tuple[tuple[float, ...], float]:
    """The cumulative share of a lognormal (median, p99) at each bound and +Inf, and its mean."""
    cdf = tuple(_lognormal_cdf(bound, median, p99) for bound in (*bounds, math.inf))
    sigma = math.log(max(p99, median * 1.0001) / median) / 2.326
    return cdf, median * math.exp(sigma * sigma / 2)


@functools.cache
def _les(bounds: tuple[float, ...]) -> tuple[str, ...]:
    return tuple("+Inf" if math.isinf(bound) else repr(float(bound)) for bound in (*bounds, math.inf))


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    n: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, count: float, median: float, p99: float) -> None:
        cdf, mean = _shape(self.bounds, median, p99)
        for i, share in enumerate(cdf):
            self.counts[i] += count * share
        self.total += count * mean
        self.n += count

    def samples(self, name: str, labels: dict[str, str]) -> Iterable[tuple[str, dict[str, str], float]]:
        for le, count in zip(_les(self.bounds), self.counts, strict=True):
            yield name + "_bucket", {**labels, "le": le}, round(count, 3)
        yield name + "_sum", labels, round(self.total, 6)
        yield name + "_count", labels, round(self.n, 3)


@dataclass
class _Counters:
    prompt: float = 0.0
    generation: float = 0.0
    finished: dict[str, float] = field(default_factory=lambda: {"stop": 0.0, "length": 0.0, "abort": 0.0, "error": 0.0})
    preemptions: float = 0.0
    rejections: float = 0.0
    queries: float = 0.0
    hits: float = 0.0
    energy: float = 0.0
    gateway_sum: float = 0.0
    gateway_count: float = 0.0
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    transfers_failed: float = 0.0


Unit = tuple[str, str | None]  # (instance name, engine label or None)

# DCGM's blank values (dcgm_structs.h): what a field reads when the driver has nothing to say
INT64_BLANK = 9223372036854775794.0
FP64_BLANK = 140737488355328.0
MIG_PROFILE_MIB = {"1g.10gb": 9856.0, "2g.20gb": 19968.0, "3g.40gb": 40192.0, "4g.40gb": 40192.0, "7g.80gb": 80896.0}


def _histograms() -> dict[str, _Histogram]:
    return {
        "ttft": _Histogram(TIME_TO_FIRST_TOKEN_BUCKETS),
        "itl": _Histogram(INTER_TOKEN_LATENCY_BUCKETS),
        "queue": _Histogram(REQUEST_LATENCY_BUCKETS),
        "prefill": _Histogram(REQUEST_LATENCY_BUCKETS),
        "e2e": _Histogram(REQUEST_LATENCY_BUCKETS),
        "prompt": _Histogram(PROMPT_BUCKETS),
        "tpot": _Histogram(INTER_TOKEN_LATENCY_BUCKETS),
        "nixl": _Histogram(REQUEST_LATENCY_BUCKETS),
    }


class Simulation:
    """Steps a fleet through time; `series()` yields (name, labels, value) at the current step."""

    def __init__(
        self,
        instances: list[Instance],
        extra_labels: dict[str, str] | None = None,
        kvscope_extras: bool = False,
        start: float = 0.0,
        lead: float = 0.0,
    ) -> None:
        self.instances = instances
        self.extra = dict(extra_labels or {})
        self.kvscope_extras = kvscope_extras
        self.start = start  # unix time of minute 0 (process start times)
        self.minute = -lead  # `lead` minutes recorded before minute 0, in each behaviour's state then
        self.behaviours: dict[Unit, Behaviour] = {(i.name, engine): b for i in instances for engine, b in i.units}
        self.counters = {u: _Counters() for u in self.behaviours}
        self.histograms = {u: _histograms() for u in self.behaviours}
        self.states = {u: b(self.minute) for u, b in self.behaviours.items()}
        self.started = {u: self.minute for u in self.behaviours}  # minute of the last (re)start

    def step(self, seconds: float) -> None:
        self.minute += seconds / 60
        for unit, behaviour in self.behaviours.items():
            s = behaviour(self.minute)
            if s.epoch != self.states[unit].epoch:  # a restart: counters and histograms from zero
                self.counters[unit], self.histograms[unit] = _Counters(), _histograms()
                self.started[unit] = self.minute
            self.states[unit] = s
            if not s.engine_up or s.stalled:
                continue
            k, h, n = self.counters[unit], self.histograms[unit], s.rate * seconds
            prompt_mean = s.prompt_median * 1.3
            k.prompt += n * prompt_mean
            k.generation += n * s.output
            k.finished["length"] += n * (1 - s.error_share) * 0.7
            k.finished["stop"] += n * (1 - s.error_share) * 0.3
            k.finished["abort"] += n * s.error_share / 2
            k.finished["error"] += n * s.error_share / 2
            k.preemptions += s.preempt_rate * seconds
            k.rejections += s.rejections * seconds
            k.queries += n * prompt_mean
            k.hits += n * prompt_mean * s.hit
            k.energy += s.power * seconds * 1000
            if s.gateway_mean is not None:
                k.gateway_sum += n * s.gateway_mean
                k.gateway_count += n
            h["ttft"].observe(n, *s.ttft)
            h["itl"].observe(n * s.output, *s.itl)
            h["queue"].observe(n, *s.queue)
            h["prefill"].observe(n, *s.prefill)
            e2e = s.ttft[0] + s.output * s.itl[0]
            h["e2e"].observe(n, e2e, e2e * 3)
            h["prompt"].observe(n, s.prompt_median, s.prompt_p99)
            h["tpot"].observe(n, *(s.tpot or s.itl))
            if s.spec_tokens:  # one draft of spec_tokens per engine step; a step yields 1 + accepted
                steps = n * s.output / (1 + s.spec_tokens * s.spec_accept)
                k.drafts += steps
                k.draft_tokens += steps * s.spec_tokens
                k.accepted += steps * s.spec_tokens * s.spec_accept
            if s.kv_transfers:
                k.transfers_failed += s.kv_transfer_failures * seconds
                h["nixl"].observe(s.kv_transfers * seconds, *s.kv_transfer_time)

    def series(self) -> Iterable[tuple[str, str, dict[str, str], float]]:
        """(family type, name, labels, value) for every series now."""
        for inst in self.instances:
            units = [(inst.name, engine) for engine, _ in inst.units]
            if not self.states[units[0]].scraped:
                continue  # a scrape gap: nothing from the node
            for index in range(inst.gpus):
                unit = units[min(index, len(units) - 1)]
                yield from self._gpu(
                    inst, self.states[unit], {**inst.gpu(index), **self.extra}, self.counters[unit], index
                )
            if inst.no_vllm:
                continue
            for unit in units:
                yield from self._engine(inst, unit)

    def _engine(self, inst: Instance, unit: Unit) -> Iterable[tuple[str, str, dict[str, str], float]]:
        s, k = self.states[unit], self.counters[unit]
        labels = {**inst.engine_labels, **self.extra}
        if unit[1] is not None:
            labels["engine"] = unit[1]
        if not s.engine_up:
            return
        if unit[1] is not None:  # a V1 engine with an engine label: the process collector too
            yield "gauge", "process_start_time_seconds", labels, round(self.start + self.started[unit] * 60, 3)
        if not inst.no_kv_gauge:
            kv = c.VLLM_KV_CACHE_USAGE.aliases[0] if inst.legacy else c.VLLM_KV_CACHE_USAGE.name
            yield "gauge", kv, labels, s.kv
        yield "gauge", c.VLLM_REQUESTS_WAITING.name, labels, s.waiting
        yield "gauge", c.VLLM_REQUESTS_RUNNING.name, labels, s.running
        if inst.legacy:
            yield "gauge", c.VLLM_REQUESTS_SWAPPED.name, labels, s.swapped
        yield (
            "gauge",
            c.VLLM_CACHE_CONFIG_INFO.name,
            {
                **labels,
                "block_size": "16",
                "num_gpu_blocks": "20000",
                "gpu_memory_utilization": str(s.memory_share),
                "cache_dtype": "auto",
            },
            1.0,
        )
        yield "counter", c.VLLM_NUM_PREEMPTIONS.name, labels, round(k.preemptions, 3)
        yield "counter", c.VLLM_PROMPT_TOKENS.name, labels, round(k.prompt, 1)
        yield "counter", c.VLLM_GENERATION_TOKENS.name, labels, round(k.generation, 1)
        if s.rejections or k.rejections:
            yield (
                "counter",
                c.VLLM_ADMISSION_REJECTIONS.name,
                {**labels, "reason": "queue_full"},
                round(k.rejections, 3),
            )
        for reason, value in k.finished.items():
            yield (
                "counter",
                c.VLLM_REQUEST_SUCCESS.name,
                {**labels, "finished_reason": reason},
                round(value, 3),
            )
        if s.spec_tokens:
            yield "counter", c.VLLM_SPEC_DECODE_DRAFTS.name, labels, round(k.drafts, 3)
            yield "counter", c.VLLM_SPEC_DECODE_DRAFT_TOKENS.name, labels, round(k.draft_tokens, 3)
            yield "counter", c.VLLM_SPEC_DECODE_ACCEPTED_TOKENS.name, labels, round(k.accepted, 3)
        if s.kv_transfers:
            yield "counter", c.VLLM_NIXL_FAILED_TRANSFERS.name, labels, round(k.transfers_failed, 3)
        queries = c.VLLM_PREFIX_CACHE_QUERIES.aliases[0] if inst.legacy else c.VLLM_PREFIX_CACHE_QUERIES.name
        hits = c.VLLM_PREFIX_CACHE_HITS.aliases[0] if inst.legacy else c.VLLM_PREFIX_CACHE_HITS.name
        yield "counter", queries, labels, round(k.queries, 1)
        yield "counter", hits, labels, round(k.hits, 1)
        h = self.histograms[unit]
        for key, signal in (
            ("ttft", c.VLLM_TTFT),
            ("itl", c.VLLM_ITL),
            ("queue", c.VLLM_QUEUE_TIME),
            ("prefill", c.VLLM_PREFILL_TIME),
            ("e2e", c.VLLM_E2E_LATENCY),
            ("prompt", c.VLLM_REQUEST_PROMPT_TOKENS),
            *((("tpot", c.VLLM_TPOT),) if not inst.legacy else ()),
            *((("nixl", c.VLLM_NIXL_XFER_TIME),) if s.kv_transfers else ()),
        ):
            name = signal.aliases[0] if inst.legacy and signal.aliases else signal.name
            for sample_name, sample_labels, value in h[key].samples(name, labels):
                yield "histogram:" + name, sample_name, sample_labels, value
        if self.kvscope_extras and unit[1] in (None, "0"):
            # kvscope serve counts the instance's arrivals at its gateway (no engine label)
            gateway_labels = {k: v for k, v in labels.items() if k != "engine"}
            name = c.GATEWAY_ADMITTED_PROMPT_TOKENS.name
            for sample_name, sample_labels, value in h["prompt"].samples(name, gateway_labels):
                yield "histogram:" + name, sample_name, sample_labels, value
        if self.kvscope_extras and k.gateway_count:
            yield (
                "gauge",
                c.REQUEST_GATEWAY_SECONDS.name + "_sum",
                labels,
                round(k.gateway_sum, 6),
            )
            yield (
                "gauge",
                c.REQUEST_GATEWAY_SECONDS.name + "_count",
                labels,
                round(k.gateway_count, 3),
            )

    def _gpu(
        self, inst: Instance, s: State, labels: dict[str, str], k: _Counters, index: int
    ) -> Iterable[tuple[str, str, dict[str, str], float]]:
        if s.xid:
            yield (
                "gauge",
                c.DCGM_XID_ERRORS.name,
                {**labels, "err_code": str(int(s.xid)), "err_msg": ""},
                s.xid,
            )
        else:
            yield "gauge", c.DCGM_XID_ERRORS.name, {**labels, "err_code": "0", "err_msg": ""}, 0.0
        if inst.exp_counts and s.xid_burst and s.xid:
            window = {**labels, "xid": str(int(s.xid)), "window_size_in_ms": "300000"}
            yield "gauge", c.DCGM_EXP_XID_COUNT.name, window, s.xid_burst * 5
        if not s.engine_up and s.xid == 79:
            return  # fallen off the bus: the rest of the GPU's series stop
        free = FB_TOTAL_MIB - FB_RESERVED_MIB - s.fb_used
        mig = inst.mig if index == 0 else ()
        device = [
            (c.DCGM_GPU_TEMP, INT64_BLANK if s.sentinel else s.temp),
            (c.DCGM_MEMORY_TEMP, INT64_BLANK if s.sentinel else s.temp + 5),
            (c.DCGM_POWER_USAGE, FP64_BLANK if s.sentinel else s.power),
            (c.DCGM_SM_CLOCK, s.sm_clock),
            (c.DCGM_MEM_CLOCK, 2619.0),
            (c.DCGM_ROW_REMAP_FAILURE, s.remap_failure),
            (c.DCGM_TOTAL_ENERGY, round(k.energy)),
            (c.DCGM_PCIE_REPLAY, 0.0),
            (c.DCGM_PCIE_RX_BYTES, s.pcie_rx),
            (c.DCGM_PCIE_TX_BYTES, s.pcie_tx),
        ]
        if not mig:
            device += [
                (c.DCGM_GPU_UTIL, s.util),
                (c.DCGM_FB_USED, s.fb_used),
                (c.DCGM_FB_FREE, max(free, 0.0)),
                (c.DCGM_FB_RESERVED, FB_RESERVED_MIB),
            ]
        if s.pcie_link is not None:
            device += [
                (c.DCGM_PCIE_LINK_GEN, float(s.pcie_link[0])),
                (c.DCGM_PCIE_LINK_WIDTH, float(s.pcie_link[1])),
                (c.DCGM_PCIE_MAX_LINK_GEN, float(s.pcie_capable[0])),
                (c.DCGM_PCIE_MAX_LINK_WIDTH, float(s.pcie_capable[1])),
                # kvscope export's reading of what the link carries as it is trained now
                (c.GPU_PCIE_LINK_CAPACITY, pcie_capacity(*s.pcie_link) or 0.0),
            ]
        for signal, value in device:
            yield "gauge", signal.name, labels, value
        if s.gr_active is not None and not mig:
            yield "gauge", c.DCGM_GR_ENGINE_ACTIVE.name, labels, s.gr_active
        if s.dram_active is not None and not mig:
            yield "gauge", c.DCGM_DRAM_ACTIVE.name, labels, s.dram_active
        if s.clock_events or inst.exp_counts:
            mask = sum(bit for bit, name in c.CLOCK_EVENT_REASONS.items() if name in s.clock_events)
            yield "gauge", c.DCGM_CLOCK_EVENT_REASONS.name, labels, float(mask)
        if inst.exp_counts:
            for name in s.clock_events:
                yield "gauge", c.DCGM_EXP_CLOCK_EVENTS.name, {**labels, "clock_event": name}, 10.0
        for gi, profile in enumerate(mig):  # each MIG instance: its own slice of memory and engines
            size = MIG_PROFILE_MIB.get(profile, 9856.0)
            labels_i = {**labels, "GPU_I_ID": str(gi + 1), "GPU_I_PROFILE": profile}
            used = size * s.memory_share
            zero_util = ((c.DCGM_GPU_UTIL, 0.0),) if inst.mig_zero_util else ()
            for signal, value in (
                *zero_util,
                (c.DCGM_FB_USED, used),
                (c.DCGM_FB_FREE, size - used),
                (c.DCGM_GR_ENGINE_ACTIVE, s.gr_active if s.gr_active is not None else s.util / 100),
                (c.DCGM_DRAM_ACTIVE, s.dram_active if s.dram_active is not None else 0.5),
            ):
                yield "gauge", signal.name, labels_i, value


@dataclass
class _Series:
    """One series' samples: its text before the value, the steps it was sampled at and the values
    (arrays, 12 bytes a sample: a fleet of thousands of GPUs fits in memory)."""

    head: str
    steps: array = field(default_factory=lambda: array("i"))
    values: array = field(default_factory=lambda: array("d"))


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else str(value)


def write_openmetrics(
    out: TextIO, simulations: list[Simulation], start: float, minutes: float, step: float = 30.0
) -> tuple[int, int]:
    """Every series of every simulation at every step, grouped by family, as OpenMetrics written
    to `out`; (series, samples) written."""
    families: dict[str, tuple[str, dict[tuple, _Series]]] = {}
    # a series' labels come in the same order at every step: its samples are found by that
    # order, and its sorted label text is made once (the same series in another order joins it)
    known: dict[tuple, _Series] = {}
    stamps = []
    for index in range(int(minutes * 60 / step) + 1):
        stamps.append(f"{start + index * step:.3f}")
        for sim in simulations:
            for kind, name, labels, value in sim.series():
                seen = (name, *labels.items())
                series = known.get(seen)
                if series is None:
                    series = known[seen] = _series_of(families, kind, name, labels)
                series.steps.append(index)
                series.values.append(value)
        for sim in simulations:
            sim.step(step)
    count = 0
    for family, (omtype, members) in families.items():
        out.write(f"# TYPE {family} {omtype}\n")
        for series in members.values():
            head = series.head
            out.writelines(
                f"{head} {_number(v)} {stamps[i]}\n" for i, v in zip(series.steps, series.values, strict=True)
            )
            count += len(series.steps)
    out.write("# EOF\n")
    return sum(len(members) for _, members in families.values()), count


def openmetrics(simulations: list[Simulation], start: float, minutes: float, step: float = 30.0) -> str:
    """Every series of every simulation at every step, grouped by family, as OpenMetrics."""
    text = io.StringIO()
    write_openmetrics(text, simulations, start, minutes, step)
    return text.getvalue()


def _series_of(
    families: dict[str, tuple[str, dict[tuple, _Series]]], kind: str, name: str, labels: dict[str, str]
) -> _Series:
    """The series in its family (created on first sight)."""
    family_type, _, family = kind.partition(":")
    family = family or name
    omtype = "histogram" if family_type == "histogram" else "counter" if kind == "counter" else "gauge"
    if omtype == "counter":
        family = name.removesuffix("_total")
    entry = families.setdefault(family, (omtype, {}))[1]
    ordered = sorted(labels.items())
    key = (name, tuple(ordered))
    if key not in entry:
        text = ",".join(f'{lk}="{lv}"' for lk, lv in ordered)
        entry[key] = _Series(f"{name}{{{text}}}")
    return entry[key]


def page(sim: Simulation) -> str:
    """The /metrics text of every instance and GPU right now (no timestamps)."""
    lines = []
    for _kind, name, labels, value in sim.series():
        labels = {k: v for k, v in labels.items() if k not in ("instance", "job")}
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{text}}} {value}")
    return "\n".join(lines) + "\n"


def after(minute: float, healthy: State, faulty: State) -> Behaviour:
    """Healthy until `minute`, then the fault."""
    return lambda m: faulty if m >= minute else healthy


def fleet(
    name: str,
    faults: dict[int, Behaviour] | None = None,
    base: State | None = None,
    size: int = 3,
    legacy: bool = False,
) -> list[Instance]:
    """`size` instances vllm-<name>-<i>; instance i behaves per faults[i], else healthy."""
    healthy = base or State()
    return [Instance(f"vllm-{name}-{i}", (faults or {}).get(i, lambda m, h=healthy: h), legacy) for i in range(size)]


__all__ = ["Simulation", "State", "after", "fleet", "openmetrics", "page", "replace"]
