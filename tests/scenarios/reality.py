"""The reality split: fleets recorded the way real exporters write them, with several things wrong
at once, written before the checks were changed to pass them (issue 12).

Where `library.py` gives one fault per fleet in kvscope's own favourite shape, these carry what
plain dcgm-exporter and vLLM 0.32 emit in production: default counters only (no power limit, no
slowdown temperature, no link generation), `hostname` as well as `Hostname`, MIG instances,
data-parallel engines, Kubernetes pod mapping on GPU series, counter resets from restarts,
scrape gaps, DCGM blank sentinels, a capped queue, repeated XIDs that the sticky gauge hides,
GPU-only nodes, pages without a KV gauge, and an incident that began before the window.

Each scenario names every incident it expects as (vocabulary id, a pod or host the incident
names as affected); the diagnosis must give exactly that set (healthy: none at all).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from diagnosis.run import Request, run
from diagnosis.verdict import Diagnosis
from kvscope.promql import Selector
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Behaviour, Instance, Simulation, State, after, fleet, openmetrics
from tests.scenarios.library import AVALANCHE, HOL

DIAGNOSE_AT = 57.0
WINDOW = "15m"
H = State()


@dataclass
class Case:
    name: str
    expected: set[tuple[str, str]]  # (incident id, pod or host it names); empty: healthy
    instances: list[Instance] = field(default_factory=list)
    note: str = ""
    trigger: str | None = None  # a word the first incident's trigger signal must contain


def _at(minute: float, faulty: State) -> Behaviour:
    return after(minute, H, faulty)


def _dp(name: str, engines: list[Behaviour], **kw: object) -> Instance:
    return Instance(name, engines[0], gpus=len(engines), engines=tuple(engines), **kw)  # type: ignore[arg-type]


def _with(instances: list[Instance], **kw: object) -> list[Instance]:
    return [replace(i, **kw) for i in instances]  # type: ignore[arg-type]


def cases() -> list[Case]:
    swamped = replace(
        H,
        rate=9.0,
        waiting=40,
        kv=0.96,
        running=60,
        preempt_rate=0.5,
        queue=(2.5, 8.0),
        ttft=(2.8, 9.5),
        util=97,
    )
    idle_engine = replace(H, rate=0.2, waiting=0, kv=0.04, running=1, util=8, queue=(0.01, 0.05))
    even = replace(H, rate=4.0, waiting=1, kv=0.5, running=18)
    return [
        Case(
            "xid-and-avalanche",
            {("gpu_hardware_fault", "node-xa-0"), ("kv_cache_exhaustion", "vllm-xa-2")},
            fleet("xa", {0: _at(50, replace(H, xid=79, engine_up=False)), 2: _at(35, AVALANCHE)}),
            "an XID 79 on one node, a KV avalanche on another: two incidents, not one verdict",
        ),
        Case(
            "powercap-and-hol",
            {("thermal_power_throttling", "node-ph-1"), ("prefill_head_of_line", "vllm-ph-0")},
            fleet(
                "ph",
                {
                    0: _at(35, HOL),
                    1: _at(35, replace(H, power=696, sm_clock=1250, util=97, temp=71, itl=(0.035, 0.09))),
                },
            ),
            "a power cap on node B beside head-of-line blocking on node A, default counters only",
        ),
        Case(
            "hot-hostname",
            {("thermal_power_throttling", "node-hot-2")},
            _with(
                fleet("hot", {2: _at(35, replace(H, temp=86, sm_clock=1350, util=95, power=560))}),
                host_label="hostname",
            ),
            "dcgm-exporter main spells the host label `hostname`; a GPU 1 C below its slowdown point, "
            "its clock 32 % below maximum while busy",
        ),
        Case(
            "t4-at-its-cap",
            {("thermal_power_throttling", "node-t4-0")},
            _with(
                fleet("t4", {0: _at(35, replace(H, power=68.2, sm_clock=660, util=91, temp=74))}),
                gpu_model="Tesla T4",
            ),
            "the shape of real-pages/dcgm-t4-ericsson-1.prom: 68.2 W of 70 W at 660 MHz, 91 % busy",
        ),
        Case(
            "pcie-gen4-practical",
            {("pcie_bottleneck", "node-pg4-1")},
            _with(
                fleet("pg4", {1: _at(35, replace(H, pcie_rx=25.5e9, pcie_tx=6e9, util=93))}),
                gpu_model="NVIDIA A100-SXM4-80GB",
            ),
            "25.5 GB/s on a Gen4 x16 link: what the link carries in practice, 81 % of its nominal rate",
        ),
        Case(
            "prefix-fell-before-the-window",
            {("prefix_cache_miss", "vllm-early-1")},
            fleet(
                "early",
                {1: after(40, replace(H, hit=0.86), replace(H, hit=0.08, ttft=(0.3, 1.2), prefill=(0.25, 0.9)))},
                base=replace(H, hit=0.86),
            ),
            "the hit rate fell 17 minutes before --at and stayed low: only a baseline before the window sees it",
        ),
        Case(
            "dp-one-engine-swamped",
            {("load_imbalance", "vllm-dp-0")},
            [
                _dp("vllm-dp-0", [_at(35, swamped), _at(35, idle_engine), _at(35, idle_engine), _at(35, idle_engine)]),
                Instance("vllm-dp-1", lambda m: H),
            ],
            "four data-parallel engines: one swamped, its three siblings idle",
        ),
        Case(
            "dp-even-healthy",
            set(),
            [_dp("vllm-dpe-0", [lambda m: even] * 4)],
            "four data-parallel engines evenly loaded",
        ),
        Case(
            "mig-healthy",
            set(),
            _with(fleet("mig", base=replace(H, dram_active=0.55)), mig=("3g.40gb", "2g.20gb", "2g.20gb")),
            "MIG: three instances each 55 % HBM-active; summed into the parent they would read 165 %",
        ),
        Case(
            "capped-queue",
            {("capacity_saturation", "vllm-cap-1")},
            fleet(
                "cap",
                {
                    1: _at(
                        35,
                        replace(
                            H,
                            rate=6,
                            waiting=128,
                            rejections=3.0,
                            running=64,
                            queue=(4.0, 9.5),
                            ttft=(4.2, 10.5),
                            util=97,
                            kv=0.72,
                        ),
                    )
                },
            ),
            "--max-num-queued-reqs 128: the queue cannot grow, vLLM 0.32 refuses 3 requests/s",
        ),
        Case(
            "restart-healthy",
            set(),
            fleet("rst", {0: lambda m: replace(H, epoch=1) if m >= 50 else H}),
            "an engine restarted 7 minutes before --at: its counters start again",
        ),
        Case(
            "avalanche-through-a-gap-and-a-restart",
            {("kv_cache_exhaustion", "vllm-gapr-1")},
            fleet(
                "gapr",
                {
                    1: lambda m: (
                        replace(AVALANCHE, scraped=not 47 <= m < 51, epoch=1 if m >= 53 else 0) if m >= 35 else H
                    )
                },
            ),
            "a KV avalanche whose node went unscraped for four minutes, then whose engine restarted: neither hides it",
        ),
        Case(
            "gap-healthy",
            set(),
            fleet("gap", {2: lambda m: replace(H, scraped=False) if 46 <= m < 52 else H}),
            "six minutes without a scrape of one node",
        ),
        Case(
            "repeated-xid",
            {("gpu_hardware_fault", "node-rx-1")},
            _with(
                fleet(
                    "rx",
                    {
                        0: lambda m: replace(H, xid=13) if m >= 5 else H,
                        1: lambda m: replace(H, xid=48, xid_burst=1.0 if m >= 50 else 0.0) if m >= 5 else H,
                    },
                ),
                exp_counts=True,
            ),
            "XID 48 (double-bit ECC) again on node 1: the sticky gauge already read 48, only "
            "DCGM_EXP_XID_ERRORS_COUNT shows it; node 0's XID 13 is 50 minutes old",
        ),
        Case(
            "gpu-only-nodes",
            {("thermal_power_throttling", "node-gonly-1")},
            _with(
                fleet("gonly", {1: _at(35, replace(H, temp=89, sm_clock=1200, util=90))}),
                no_vllm=True,
                host_label="hostname",
            ),
            "GPU nodes without vLLM: hardware, throttling and idleness are still found",
        ),
        Case(
            "no-kv-gauge",
            {("capacity_saturation", "vllm-nokv-0")},
            _with(
                fleet(
                    "nokv",
                    {
                        0: lambda m: (
                            replace(
                                H,
                                rate=11,
                                waiting=10 + 8 * (m - 35),
                                queue=(3.0, 9.0),
                                ttft=(3.2, 10.0),
                                util=97,
                                running=64,
                            )
                            if m >= 35
                            else H
                        )
                    },
                ),
                no_kv_gauge=True,
            ),
            "a page without vllm:kv_cache_usage_perc, running and waiting present",
        ),
        Case(
            "seed-000-longer-prompts",
            {("kv_cache_exhaustion", "vllm-seed-1")},
            fleet("seed", {1: _at(40, replace(AVALANCHE, prompt_median=1500, prompt_p99=5800))}),
            "seed 000: the same request rate, prompts 1.8x longer",
            trigger="prompt",
        ),
        Case(
            "sentinel-healthy",
            set(),
            fleet("snt", {0: lambda m: replace(H, sentinel=True)}),
            "DCGM blank sentinels (9223372036854775794, 140737488355328) where temperature and power should be",
        ),
        Case(
            "busy-healthy",
            set(),
            fleet("busy", base=replace(H, util=98, power=610, temp=76, sm_clock=1980)),
            "GPUs 98 % busy at full clock, power and temperature within their limits",
        ),
        Case(
            "three-at-once",
            {
                ("gpu_hardware_fault", "node-three-0"),
                ("thermal_power_throttling", "node-three-1"),
                ("prefix_cache_miss", "vllm-three-2"),
            },
            fleet(
                "three",
                {
                    0: _at(50, replace(H, xid=79, engine_up=False)),
                    1: _at(35, replace(H, temp=91, sm_clock=1100, util=92, itl=(0.045, 0.11))),
                    2: lambda m: replace(H, hit=0.07, ttft=(0.3, 1.2)) if m >= 44 else replace(H, hit=0.85),
                },
            ),
            "an XID, a hot GPU and a prefix-cache collapse on three nodes",
        ),
        Case(
            "xid-explains-its-engine",
            {("gpu_hardware_fault", "node-xe-1")},
            _with(
                fleet(
                    "xe",
                    {
                        1: _at(
                            45,
                            replace(
                                H,
                                xid=94,
                                error_share=0.25,
                                waiting=10 + 5,
                                queue=(1.0, 6.0),
                                ttft=(1.2, 7.0),
                            ),
                        )
                    },
                ),
                pod_mapping=True,
            ),
            "XID 94 (contained ECC) on the GPU of pod vllm-xe-1 (dcgm-exporter's pod mapping): its errors "
            "and its queue are symptoms of the one incident",
        ),
    ]


def names_of(affected: list[dict[str, str]]) -> set[str]:
    """The pods and hosts an incident names as affected."""
    out = set()
    for a in affected:
        out |= {a[k] for k in ("pod", "Hostname", "hostname") if a.get(k)}
    return out


def scored(case: Case, result: Diagnosis) -> tuple[bool, str]:
    """score() of a diagnosis's active incidents (a recovered one is history)."""
    return score(case, [(i.id, names_of(i.affected)) for i in result.incidents if i.status == "active"])


def score(case: Case, incidents: list[tuple[str, set[str]]]) -> tuple[bool, str]:
    """Right when every expected incident is found and nothing else is: (ok, why not)."""
    missing = [e for e in case.expected if not any(i == e[0] and e[1] in n for i, n in incidents)]
    extra = [(i, sorted(n)) for i, n in incidents if not any(i == e[0] and e[1] in n for e in case.expected)]
    why = []
    if missing:
        why.append("missing " + ", ".join(f"{i} on {n}" for i, n in sorted(missing)))
    if extra:
        why.append("extra " + ", ".join(f"{i} on {'/'.join(n) or 'fleet'}" for i, n in extra))
    return not why, "; ".join(why)


@contextlib.contextmanager
def recorded(work: Path, split: list[Case]) -> Iterator[tuple[str, float]]:
    """A real Prometheus holding every case of a split an hour back, one `scenario` label each:
    (its URL, the recording's start)."""
    start = time.time() - 62 * 60
    sims = [Simulation(c.instances, {"scenario": c.name}, start=start) for c in split]
    with backfilled(work, openmetrics(sims, start, 60)) as ready:
        yield ready.base_url, start


def diagnosed(prometheus: tuple[str, float], case: Case) -> Diagnosis:
    """The diagnosis of one case at DIAGNOSE_AT over the split's window."""
    url, start = prometheus
    return run(
        Request(prometheus=url, at=start + DIAGNOSE_AT * 60, window=900, selector=Selector.of(scenario=case.name))
    )
