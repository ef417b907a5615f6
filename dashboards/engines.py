"""The vLLM 0.32 engine board: what an engine's own counters say beyond load and latency.

- KV residency (`--kv-cache-metrics`): how long blocks live, how long they sit idle before
  eviction, how long until they are used again. Short lives with short idle times: the pool is
  too small (blocks are evicted while still warm). Reuse gaps longer than lifetimes: the prefix
  cache thrashes (a block is gone before its next use).
- Prefix-cache hits by tier (device, host, disk, p2p) and KV transfers (offload, NIXL).
- Admission refusals (a queue cap) and corrupted requests (NaN logits): both are pages.
- Speculative decoding: acceptance rate, mean acceptance length, acceptance per position.
- MFU and memory traffic (`--enable-mfu-metrics`) against the GPU's roofline, which
  `kvscope export` writes from the GPU model table on the same page.
- Data-parallel engines: every panel keeps the `engine` label.
"""

from __future__ import annotations

from dashboards.panels import RATE, Board, Scope, _engine_variables, st, ts
from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.promql import Expr, Selector

PER_ENGINE = ("namespace", "instance", "pod", "engine")
ENGINE_LEGEND = "{{instance}} engine {{engine}}"
ON_NODE = ("instance",)


def _peak(sc: Scope, signal: c.Signal) -> Expr:
    return sc.kg(signal).max(ON_NODE)


def _residency(b: Board, sc: Scope) -> None:
    b.row("KV-cache residency (--kv-cache-metrics)")
    for signal, title, what in (
        (c.VLLM_KV_BLOCK_LIFETIME, "Block lifetime", "allocation to eviction"),
        (c.VLLM_KV_BLOCK_IDLE_BEFORE_EVICT, "Idle before eviction", "last use to eviction"),
        (c.VLLM_KV_BLOCK_REUSE_GAP, "Reuse gap", "between two uses of a block"),
    ):
        b.add(
            ts(
                title,
                "s",
                [
                    (sc.quantile(0.5, signal, by=PER_ENGINE), "p50 " + ENGINE_LEGEND),
                    (sc.quantile(0.9, signal, by=PER_ENGINE), "p90 " + ENGINE_LEGEND),
                ],
                f"Sampled blocks ({what}). Short lifetimes and short idle times: the pool is too small. "
                "Reuse gaps longer than lifetimes: the prefix cache thrashes.",
            ),
            span=8,
        )


def _cache_tiers(b: Board, sc: Scope) -> None:
    b.row("Prefix cache by tier, KV transfers")
    cached = sc.engine_rate(c.VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE, by=("source",))
    queried = sc.engine_rate(c.VLLM_PREFIX_CACHE_QUERIES, by=())
    b.add(
        ts(
            "Cached prompt tokens by tier",
            "short",
            [(cached, "{{source}}")],
            "Tokens per second served from device (HBM), host, disk or p2p caches instead of prefill.",
            stack=True,
        ),
        span=8,
    )
    b.add(
        ts(
            "Hit rate by tier",
            "percentunit",
            [(cached.binop("/", queried, ignoring=("source",), group_left=()), "{{source}}")],
            lines=[(sc.line(t.PREFIX_HIT_FLOOR), "orange")],
            stack=True,
        ),
        span=8,
    )
    b.add(
        ts(
            "Requests waiting on a KV fetch",
            "short",
            [(sc.e(c.VLLM_REQUESTS_KV_FETCH_BY_STAGE).sum(("stage",)), "{{stage}}")],
            "KV consumers only (P/D decode side, offload loads).",
            stack=True,
        ),
        span=8,
    )
    b.add(
        ts(
            "KV offload traffic",
            "Bps",
            [
                (sc.engine_rate(c.VLLM_KV_OFFLOAD_LOAD_BYTES, by=PER_ENGINE), "load " + ENGINE_LEGEND),
                (sc.engine_rate(c.VLLM_KV_OFFLOAD_STORE_BYTES, by=PER_ENGINE), "store " + ENGINE_LEGEND),
            ],
        ),
        span=8,
    )
    b.add(
        ts(
            "KV transfer failures",
            "short",
            [
                (sc.engine_rate(c.VLLM_NIXL_FAILED_TRANSFERS, by=PER_ENGINE), "NIXL failed " + ENGINE_LEGEND),
                (sc.engine_rate(c.VLLM_NIXL_EXPIRED_REQUESTS, by=PER_ENGINE), "NIXL expired " + ENGINE_LEGEND),
                (
                    sc.engine_rate(c.VLLM_NIXL_NOTIFICATIONS_AFTER_EXPIRY, by=PER_ENGINE),
                    "after expiry " + ENGINE_LEGEND,
                ),
                (
                    sc.engine_rate(c.VLLM_KV_OFFLOAD_ALLOCATION_FAILURES, by=PER_ENGINE),
                    "offload allocation " + ENGINE_LEGEND,
                ),
            ],
            lines=[(sc.line(t.KV_TRANSFER_FAILURE_RATE), "red")],
        ),
        span=8,
    )
    b.add(
        ts(
            "NIXL transfer time p99 and CPU offload tier",
            "s",
            [
                (sc.quantile(0.99, c.VLLM_NIXL_XFER_TIME, by=PER_ENGINE), "p99 " + ENGINE_LEGEND),
                (sc.engine_gauge(c.VLLM_KV_OFFLOAD_CPU_USAGE), "CPU tier in use {{instance}}"),
            ],
        ),
        span=8,
    )


def _refusals(b: Board, sc: Scope) -> None:
    b.row("Refused and corrupted requests")
    b.add(
        ts(
            "Admission refusals (the queue cap)",
            "reqps",
            [(sc.engine_rate(c.VLLM_ADMISSION_REJECTIONS, by=("instance", "reason")), "{{instance}} {{reason}}")],
            "vLLM's API server refuses requests once --max-num-queued-reqs / --max-num-queued-tokens is reached; "
            "VLLMAdmissionRejections pages.",
            lines=[(sc.line(t.ADMISSION_REJECTION_RATE), "red")],
        ),
        span=12,
    )
    b.add(
        ts(
            "Corrupted requests (NaN logits)",
            "short",
            [(sc.e(c.VLLM_CORRUPTED_REQUESTS).increase(RATE).sum(PER_ENGINE), ENGINE_LEGEND)],
            "Only with VLLM_COMPUTE_NANS_IN_LOGITS=1. Any is a page (VLLMCorruptedRequests).",
            lines=[(0.5, "red")],
        ),
        span=12,
    )


def _spec_decode(b: Board, sc: Scope) -> None:
    b.row("Speculative decoding")
    accepted = sc.engine_rate(c.VLLM_SPEC_DECODE_ACCEPTED_TOKENS, by=PER_ENGINE)
    drafted = sc.engine_rate(c.VLLM_SPEC_DECODE_DRAFT_TOKENS, by=PER_ENGINE)
    drafts = sc.engine_rate(c.VLLM_SPEC_DECODE_DRAFTS, by=PER_ENGINE)
    per_pos = sc.engine_rate(c.VLLM_SPEC_DECODE_ACCEPTED_PER_POS, by=(*PER_ENGINE, "position"))
    b.add(ts("Acceptance rate", "percentunit", [(accepted / drafted, ENGINE_LEGEND)]), span=6)
    b.add(
        ts(
            "Mean acceptance length",
            "short",
            [(accepted / drafts + 1, ENGINE_LEGEND)],
            "Tokens per verification step: 1 + accepted tokens per draft (vLLM's own definition).",
        ),
        span=6,
    )
    b.add(
        ts(
            "Acceptance by draft position",
            "percentunit",
            [(per_pos.binop("/", drafts, on=PER_ENGINE, group_left=()), "pos {{position}} " + ENGINE_LEGEND)],
        ),
        span=6,
    )
    b.add(
        ts(
            "Time per output token vs engine step",
            "s",
            [
                (sc.quantile(0.5, c.VLLM_TPOT, by=PER_ENGINE), "per token " + ENGINE_LEGEND),
                (sc.quantile(0.5, c.VLLM_ITL, by=PER_ENGINE), "per step " + ENGINE_LEGEND),
            ],
            "vLLM's inter-token histogram is per engine step, and a step yields 1 + accepted tokens: per-token "
            "time rising while the step time holds is spec_decode_inefficient (the drafts are rejected).",
        ),
        span=6,
    )


def _progress(b: Board, sc: Scope) -> None:
    b.row("Progress")
    in_flight = sc.e(c.VLLM_REQUESTS_RUNNING).max(PER_ENGINE) + sc.e(c.VLLM_REQUESTS_WAITING).max(PER_ENGINE)
    b.add(
        ts(
            "Tokens per second with requests in flight",
            "short",
            [
                (sc.engine_rate(c.VLLM_GENERATION_TOKENS, by=PER_ENGINE), "generated tok/s " + ENGINE_LEGEND),
                (sc.engine_rate(c.VLLM_PROMPT_TOKENS, by=PER_ENGINE), "prefilled tok/s " + ENGINE_LEGEND),
                (in_flight, "in flight " + ENGINE_LEGEND),
            ],
            "Requests in flight while no token is prefilled or generated for 5 minutes is a hang /health does "
            "not see: VLLMEngineStalled (engine_stall).",
        ),
        span=24,
    )


def _roofline(b: Board, sc: Scope) -> None:
    b.row("MFU and memory traffic (--enable-mfu-metrics) against the roofline")
    flops = sc.e(c.VLLM_ESTIMATED_FLOPS).rate(RATE).sum(PER_ENGINE)
    traffic = sc.e(c.VLLM_ESTIMATED_READ_BYTES).rate(RATE).sum(PER_ENGINE) + sc.e(c.VLLM_ESTIMATED_WRITE_BYTES).rate(
        RATE
    ).sum(PER_ENGINE)
    peak, bandwidth = _peak(sc, c.GPU_PEAK_FLOPS), _peak(sc, c.GPU_MEMORY_BANDWIDTH)
    note = (
        "vLLM's analytic per-GPU estimates against the GPU model's datasheet peak (kvscope export writes it; "
        "kvscope.yaml gpu_models overrides it)."
    )
    b.add(
        ts(
            "MFU",
            "percentunit",
            [(flops.binop("/", peak, on=ON_NODE, group_left=()), ENGINE_LEGEND)],
            note,
        ),
        span=8,
    )
    b.add(
        ts(
            "Memory bandwidth used",
            "percentunit",
            [(traffic.binop("/", bandwidth, on=ON_NODE, group_left=()), ENGINE_LEGEND)],
            "Decode is memory-bound: near 1 the engine runs at the HBM roofline.",
        ),
        span=8,
    )
    intensity = flops / traffic
    ridge = peak / bandwidth
    b.add(
        ts(
            "Arithmetic intensity vs the ridge point",
            "short",
            [(intensity, ENGINE_LEGEND), (ridge, "ridge {{instance}}")],
            "FLOP per byte moved. Below the ridge the engine is memory-bound (decode), above it compute-bound "
            "(prefill).",
        ),
        span=8,
    )


def _data_parallel(b: Board, sc: Scope) -> None:
    b.row("Data-parallel engines")
    running = sc.e(c.VLLM_REQUESTS_RUNNING).max(PER_ENGINE)
    b.add(ts("Running per engine", "short", [(running, ENGINE_LEGEND)]), span=8)
    b.add(
        ts(
            "KV-cache usage per engine",
            "percentunit",
            [(sc.e(c.VLLM_KV_CACHE_USAGE).max(PER_ENGINE), ENGINE_LEGEND)],
            lines=[(sc.line(t.KV_USAGE_CRITICAL), "red")],
        ),
        span=8,
    )
    spread = running.aggregate("max", ON_NODE) - running.aggregate("min", ON_NODE)
    b.add(
        ts(
            "Load spread across an instance's engines",
            "short",
            [(spread, "{{instance}}")],
            "Most minus fewest running requests among one server's DP engines: a balancer that ignores load.",
        ),
        span=8,
    )


def engines(sc: Scope) -> Board:
    b = _engine_variables(
        Board(
            "vLLM engines: KV cache, transfers, efficiency",
            "kvscope-engines",
            "vLLM 0.32's engine counters: KV residency, cache tiers, KV transfers, refusals, speculative "
            "decoding, MFU against the roofline, data-parallel engines.",
            ["vllm"],
        )
    )
    b.add(
        st(
            "Admission refusals now",
            "reqps",
            sc.e(c.VLLM_ADMISSION_REJECTIONS, Selector()).rate(RATE).sum(),
            lines=[(sc.line(t.ADMISSION_REJECTION_RATE), "red")],
        ),
        span=12,
    )
    b.add(
        st(
            "Corrupted requests in range",
            "short",
            sc.e(c.VLLM_CORRUPTED_REQUESTS).increase("$__range").sum(),
            lines=[(0.5, "red")],
        ),
        span=12,
    )
    _residency(b, sc)
    _cache_tiers(b, sc)
    _refusals(b, sc)
    _progress(b, sc)
    _spec_decode(b, sc)
    _roofline(b, sc)
    _data_parallel(b, sc)
    return b
