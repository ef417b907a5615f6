"""Emulated H100/H200 GPUs for machines without one (`--gpu emulated`, never chosen silently).

Their readings follow the live vLLM engine(s) the exporter scrapes: memory is what vLLM
reserves up front (gpu_memory_utilization of the card, so a healthy node reads ~90 % full),
utilisation, power, temperature and clocks follow token throughput, PCIe traffic follows
prompt tokens and preemptions. Faults (exporter/faults.py) bend them the way real faults do.
Every series carries emulated="true".

With a MIG layout (`--emulated-mig 3g.40gb,2g.20gb`) every emulated GPU is in MIG mode the way
NVML shows one: the GPU keeps its device-level readings but has no utilisation, and each MIG
instance is a device of its own (GPU_I_PROFILE, GPU_I_ID) with its memory and processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

import psutil

from exporter.collectors.xid import XidCounts
from exporter.faults import Fault
from exporter.nvml_api import GpuIdentity, GpuReading
from kvscope import catalog, promtext
from kvscope.gpu_models import DEFAULT_MODELS, EMULATED_FIELDS, GpuModels, pcie_capacity

_MIB = 1 << 20
_IDLE, _SW_POWER_CAP, _SW_THERMAL, _HW_THERMAL = 0x1, 0x4, 0x20, 0x40
_MIG_PROFILE = re.compile(r"(\d)g\.(\d+)gb")
MIG_SLICES = 7  # compute slices of an H100/H200


def parse_mig_layout(layout: str | Sequence[str] | None, memory_mib: float) -> list[tuple[str, int, float]]:
    """[(profile, compute slices, memory MiB)] of a layout such as "3g.40gb,2g.20gb"; ValueError
    when a profile is malformed or the layout does not fit one GPU."""
    if not layout:
        return []
    profiles = [p.strip().lower() for p in (layout.split(",") if isinstance(layout, str) else layout) if p.strip()]
    out = []
    for profile in profiles:
        found = _MIG_PROFILE.fullmatch(profile)
        if found is None:
            raise ValueError(f"MIG profile {profile!r} is not like 1g.10gb")
        out.append((profile, int(found.group(1)), int(found.group(2)) * 1024.0))
    slices, memory = sum(s for _, s, _ in out), sum(m for _, _, m in out)
    if slices > MIG_SLICES or memory > memory_mib * 1.05:  # profile names round memory up (4g.40gb+3g.40gb: 80 GB)
        raise ValueError(
            f"MIG layout {','.join(profiles)} needs {slices} slices and {memory / 1024:.0f} GiB: "
            f"one GPU has {MIG_SLICES} slices and {memory_mib / 1024:.0f} GiB"
        )
    return out


@dataclass
class EngineActivity:
    """What the attached engine is doing, from its /metrics (rates over the last interval)."""

    running: float = 0.0
    kv_usage: float = 0.0
    prompt_tps: float = 0.0
    generation_tps: float = 0.0
    preemptions_per_s: float = 0.0
    memory_share: float | None = None  # gpu_memory_utilization the engine was started with
    port: int | None = None


@dataclass
class _GpuState:
    energy_mj: float = 0.0
    replays: float = 0.0
    leaked_mib: float = 0.0
    remapped_uncorrectable: float = 0.0
    nvlink_bytes: float = 0.0
    last_xid: int | None = None
    lost: bool = False


@dataclass(frozen=True)
class _Board:
    """What emulating a GPU model needs (gpu_models.EMULATED_FIELDS), all known."""

    memory_mib: float
    tdp_w: float
    idle_w: float
    max_sm_clock: float
    base_sm_clock: float
    idle_sm_clock: float
    mem_clock: float
    slowdown_temp: float
    pcie_gen: int
    pcie_width: int


class EmulatedSource:
    backend = "emulated"

    def __init__(
        self,
        count: int = 4,
        model: str = "H100",
        engine_samples: Callable[[], Mapping[str, list[promtext.Sample]]] | None = None,
        xid_counts: XidCounts | None = None,
        clock: Callable[[], float] = time.monotonic,
        models: GpuModels = DEFAULT_MODELS,
        mig: str | Sequence[str] | None = None,
    ) -> None:
        if model not in models.table:
            raise ValueError(f"unknown emulated GPU model {model!r}: choose one of {', '.join(models.table)}")
        self.model = models[model]
        if not self.model.emulatable:
            raise ValueError(f"emulated GPU model {model!r}: the table does not hold all it needs to emulate it")
        self.board = _Board(**{f: getattr(self.model, f) for f in EMULATED_FIELDS})
        self.mig_layout = parse_mig_layout(mig, self.board.memory_mib)
        self.extra_labels = {"emulated": "true"}
        self.engine_samples = engine_samples or dict
        self.xid_counts = xid_counts or XidCounts()
        self.clock = clock
        host = socket.gethostname()
        per_socket = max(4, (count + 1) // 2)
        self.identities = [
            GpuIdentity(
                index=i,
                uuid=f"GPU-e0000000-0000-4000-8000-{i:012d}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                model_name=self.model.name,
                hostname=host,
                numa_node=i // per_socket,
            )
            for i in range(count)
        ]
        self.mig = [
            (
                parent.index,
                memory,
                dataclasses.replace(
                    parent,
                    mig_profile=profile,
                    gpu_instance_id=slot + 1,
                    mig_uuid=f"MIG-e0000000-0000-4000-8000-{parent.index:06d}{slot:06d}",
                ),
            )
            for parent in self.identities
            for slot, (profile, _slices, memory) in enumerate(self.mig_layout)
        ]
        self._states = [_GpuState() for _ in range(count)]
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._previous: dict[str, tuple[float, dict[str, float]]] = {}
        self._stamp = clock()
        self._last: list[tuple[GpuIdentity, GpuReading]] = []

    # -- faults --------------------------------------------------------------------------
    def inject(self, fault: Fault) -> None:
        if fault.gpu >= len(self.identities):
            raise ValueError(
                f"gpu {fault.gpu} does not exist: this node has {len(self.identities)} GPUs "
                f"(0-{len(self.identities) - 1})"
            )
        with self._lock:
            state = self._states[fault.gpu]
            if fault.fault == "xid":
                assert fault.xid is not None
                self.xid_counts.record(fault.gpu, self.identities[fault.gpu].uuid, fault.xid)
                state.last_xid = fault.xid
                state.lost = state.lost or fault.xid == 79  # fallen off the bus: it stops answering
            elif fault.fault == "row_remap_failure":
                state.remapped_uncorrectable += 1
            self._faults = [f for f in self._faults if (f.gpu, f.fault) != (fault.gpu, fault.fault)]
            self._faults.append(fault)

    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def clear(self) -> int:
        """Remove every fault; GPUs come back (counters such as XID counts keep their values)."""
        with self._lock:
            cleared = len(self._faults)
            self._faults = []
            for state in self._states:
                state.lost, state.leaked_mib = False, 0.0
            return cleared

    # -- readings ------------------------------------------------------------------------
    def read(self) -> list[tuple[GpuIdentity, GpuReading]]:
        now = self.clock()
        dt, self._stamp = max(now - self._stamp, 1e-6), now
        engines = self._activity(now)
        with self._lock:
            faults: dict[tuple[int, str], Fault] = {(f.gpu, str(f.fault)): f for f in self._faults}
            out = []
            for identity, state in zip(self.identities, self._states, strict=True):
                engine = engines[identity.index % len(engines)] if engines else None
                reading = self._gpu(identity.index, state, engine, faults, dt)
                out.append((identity, reading))
            out += self._mig_readings(out, engines)
        self._last = out
        return out

    def _mig_readings(
        self, gpus: list[tuple[GpuIdentity, GpuReading]], engines: list[EngineActivity]
    ) -> list[tuple[GpuIdentity, GpuReading]]:
        """MIG mode: the GPU loses its utilisation and its processes to its instances; the engine
        runs on each GPU's first instance and takes its memory share of it."""
        if not self.mig:
            return []
        out = []
        for _identity, reading in gpus:
            reading.gpu_util = reading.mem_copy_util = None
        first_process = {ident.index: list(reading.processes) for ident, reading in gpus}
        for _identity, reading in gpus:
            reading.processes = []
        lost = {ident.index for ident, reading in gpus if reading.lost}
        for parent, memory, identity in self.mig:
            if parent in lost:
                continue
            engine = engines[parent % len(engines)] if engines else None
            first = identity.gpu_instance_id == 1
            share = engine.memory_share if first and engine is not None and engine.memory_share else None
            used = memory * share if share is not None else 256.0
            processes = first_process.get(parent, []) if first else []
            out.append(
                (
                    identity,
                    GpuReading(fb_used_mib=used, fb_free_mib=memory - used, fb_reserved_mib=0.0, processes=processes),
                )
            )
        return out

    def last(self) -> list[tuple[GpuIdentity, GpuReading]]:
        return self._last or self.read()

    def pairs(self) -> list[tuple[int, int, int | None, bool]]:
        # HGX boards: every GPU pair talks over NVLink through NVSwitch.
        n = len(self.identities)
        return [(a, b, 0, True) for a in range(n) for b in range(a + 1, n)]

    def _gpu(
        self,
        i: int,
        state: _GpuState,
        engine: EngineActivity | None,
        faults: Mapping[tuple[int, str], Fault],
        dt: float,
    ) -> GpuReading:
        m = self.board
        if state.lost:
            return GpuReading(lost=True)
        busy = 0.0
        if engine is not None and engine.running > 0:
            busy = min(1.0, 0.35 + engine.running / 16 + (engine.prompt_tps + engine.generation_tps) / 6000)
        util = 100.0 * busy
        limit = m.tdp_w
        if f := faults.get((i, "power_cap")):
            limit = min(limit, f.limit_w)
        demand = m.idle_w + (m.tdp_w - m.idle_w) * busy
        power = min(demand, limit)
        clock = m.max_sm_clock if busy > 0.05 else m.idle_sm_clock
        reasons = _IDLE if busy <= 0.05 else 0
        if demand > limit:
            clock = max(m.idle_sm_clock, m.max_sm_clock * limit / demand)
            reasons |= _SW_POWER_CAP
        temp = 32.0 + 45.0 * busy
        if f := faults.get((i, "thermal")):
            temp = f.temp_c
            clock = min(clock, 0.55 * m.max_sm_clock) if busy > 0.05 else clock
            reasons |= _SW_THERMAL | _HW_THERMAL
        state.energy_mj += power * dt * 1000.0
        share = engine.memory_share if engine is not None and engine.memory_share is not None else None
        used = m.memory_mib * share if share is not None else 512.0
        if f := faults.get((i, "memory_leak")):
            state.leaked_mib += f.mib_per_minute * dt / 60.0
        used += state.leaked_mib
        processes: list[tuple[int, int | None]] = []
        if engine is not None and engine.port is not None and (pid := _listening_pid(engine.port)):
            processes.append((pid, int((used - state.leaked_mib) * _MIB)))
        if f := faults.get((i, "colocated_process")):
            used += f.mib
            processes.append((900_000 + i, int(f.mib * _MIB)))
        reserved = 512.0
        used = min(used, m.memory_mib - reserved)
        gen, width = m.pcie_gen, m.pcie_width
        if f := faults.get((i, "pcie_degraded")):
            gen, width = f.generation, f.width
            state.replays += 40.0 * dt
        if busy <= 0.05:  # idle: the link drops to Gen1 to save power, as NVIDIA's GPUs do (nvidia-smi)
            gen = 1
        capacity = pcie_capacity(gen, width) or 0.0
        prompt_tps = engine.prompt_tps if engine else 0.0
        gen_tps = engine.generation_tps if engine else 0.0
        preempt = engine.preemptions_per_s if engine else 0.0
        rx = min(capacity, 2e6 + prompt_tps * 8e3 + preempt * 4e8)
        tx = min(capacity, 1e6 + gen_tps * 2e4 + preempt * 4e8)
        if f := faults.get((i, "pcie_saturated")):
            rx = tx = f.ratio * capacity
        remap_failed = (i, "row_remap_failure") in faults
        state.nvlink_bytes += (5e8 * busy + 1e6) * dt  # tensor-parallel all-reduce traffic
        return GpuReading(
            gpu_util=util,
            mem_copy_util=util * 0.6,
            enc_util=0.0,
            dec_util=0.0,
            fb_used_mib=used,
            fb_free_mib=m.memory_mib - reserved - used,
            fb_reserved_mib=reserved,
            gpu_temp=temp,
            memory_temp=temp + 4.0,
            slowdown_temp=m.slowdown_temp,
            power_w=power,
            power_limit_w=limit,
            energy_mj=state.energy_mj,
            sm_clock=clock,
            mem_clock=m.mem_clock,
            app_sm_clock=m.base_sm_clock,
            max_sm_clock=m.max_sm_clock,
            clock_event_reasons=reasons,
            pcie_tx_bytes=tx,
            pcie_rx_bytes=rx,
            pcie_gen=gen,
            pcie_width=width,
            pcie_max_gen=m.pcie_gen,
            pcie_max_width=m.pcie_width,
            pcie_replays=state.replays,
            ecc_sbe=0.0,
            ecc_dbe=0.0,
            remapped_correctable=0.0,
            remapped_uncorrectable=state.remapped_uncorrectable,
            remap_failure=1.0 if remap_failed else 0.0,
            processes=processes,
            xid_last=state.last_xid,
            dram_active=0.85 * busy,
            tensor_active=0.55 * busy,
            nvlink_bytes=state.nvlink_bytes,
        )

    def _activity(self, now: float) -> list[EngineActivity]:
        engines = []
        for target, samples in sorted(self.engine_samples().items()):
            counters = {
                name: promtext.total(samples, name)
                for name in (
                    catalog.VLLM_PROMPT_TOKENS.name,
                    catalog.VLLM_GENERATION_TOKENS.name,
                    catalog.VLLM_NUM_PREEMPTIONS.name,
                )
            }
            before = self._previous.get(target)
            self._previous[target] = (now, counters)
            rates = dict.fromkeys(counters, 0.0)
            if before is not None and now > before[0]:
                rates = {k: max(0.0, v - before[1].get(k, 0.0)) / (now - before[0]) for k, v in counters.items()}
            config = promtext.select(samples, catalog.VLLM_CACHE_CONFIG_INFO.name)
            share = None
            with contextlib.suppress(IndexError, KeyError, ValueError):
                share = float(config[0].labels["gpu_memory_utilization"])
            engines.append(
                EngineActivity(
                    running=promtext.total(samples, catalog.VLLM_REQUESTS_RUNNING.name),
                    kv_usage=max(
                        (s.value for s in promtext.select(samples, catalog.VLLM_KV_CACHE_USAGE.name)),
                        default=0.0,
                    ),
                    prompt_tps=rates[catalog.VLLM_PROMPT_TOKENS.name],
                    generation_tps=rates[catalog.VLLM_GENERATION_TOKENS.name],
                    preemptions_per_s=rates[catalog.VLLM_NUM_PREEMPTIONS.name],
                    memory_share=share,
                    port=urlparse(target).port,
                )
            )
        return engines


_PID_CACHE: dict[int, tuple[float, int | None]] = {}


def _listening_pid(port: int, ttl: float = 30.0) -> int | None:
    """The process listening on a local TCP port (the engine's API server), cached briefly."""
    now = time.monotonic()
    cached = _PID_CACHE.get(port)
    if cached and now - cached[0] < ttl:
        return cached[1]
    pid = None
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                pid = conn.pid
                break
    _PID_CACHE[port] = (now, pid)
    return pid
