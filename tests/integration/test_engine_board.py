"""The vLLM engines board and the overview's SLO tiles on a real Prometheus holding what one
vLLM 0.32 server with two data-parallel engines and every family on writes: each panel shows
data, and the numbers are the ones an engineer would work out by hand."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from dashboards import build as dash_build
from kvscope import catalog as c
from kvscope.config import Slo
from kvscope.prometheus import PrometheusClient
from tests.scenarios.backfill import backfilled

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]

STEP, MINUTES = 15, 30
INSTANCE = "node-1:9408"
ENGINE = {"namespace": "prod", "pod": "vllm-0", "instance": INSTANCE, "model_name": "m", "job": "kvscope"}
PEAK, BANDWIDTH = 989.4e12, 4.8e12
FLOPS_PER_S = {"0": 300e12, "1": 100e12}  # engine 0 at ~30 % MFU, engine 1 at ~10 %
BYTES_PER_S = {"0": 1.2e12, "1": 2.4e12}
DRAFTS_PER_S, DRAFT_TOKENS_PER_S, ACCEPTED_PER_S = 10.0, 30.0, 18.0
CACHED = {"device": 300.0, "host": 100.0}  # tokens/s per tier
QUERIED = 1000.0
EDGES = c.VLLM_KV_RESIDENCY_BUCKETS
SLO = Slo()


def _series() -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value per second or constant) for every series, before time is applied."""
    for engine in ("0", "1"):
        e = {**ENGINE, "engine": engine}
        yield c.VLLM_ESTIMATED_FLOPS.name, e, FLOPS_PER_S[engine]
        yield c.VLLM_ESTIMATED_READ_BYTES.name, e, BYTES_PER_S[engine] * 0.75
        yield c.VLLM_ESTIMATED_WRITE_BYTES.name, e, BYTES_PER_S[engine] * 0.25
        yield c.VLLM_SPEC_DECODE_DRAFTS.name, e, DRAFTS_PER_S
        yield c.VLLM_SPEC_DECODE_DRAFT_TOKENS.name, e, DRAFT_TOKENS_PER_S
        yield c.VLLM_SPEC_DECODE_ACCEPTED_TOKENS.name, e, ACCEPTED_PER_S
        for pos, share in (("0", 0.8), ("1", 0.6), ("2", 0.4)):
            yield c.VLLM_SPEC_DECODE_ACCEPTED_PER_POS.name, {**e, "position": pos}, DRAFTS_PER_S * share
        for source, rate in CACHED.items():
            yield c.VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE.name, {**e, "source": source}, rate / 2
        yield c.VLLM_PREFIX_CACHE_QUERIES.name, e, QUERIED / 2
        yield c.VLLM_KV_OFFLOAD_LOAD_BYTES.name, e, 5e8
        yield c.VLLM_KV_OFFLOAD_STORE_BYTES.name, e, 7e8
        yield c.VLLM_KV_OFFLOAD_ALLOCATION_FAILURES.name, e, 0.0
        yield c.VLLM_NIXL_FAILED_TRANSFERS.name, e, 0.02
        yield c.VLLM_NIXL_EXPIRED_REQUESTS.name, e, 0.0
        yield c.VLLM_NIXL_NOTIFICATIONS_AFTER_EXPIRY.name, e, 0.0
        yield c.VLLM_CORRUPTED_REQUESTS.name, e, 0.0
        # residency: every sampled block lives 20-30 s, sits idle 1-2 s, is reused after 60-120 s
        for signal, hi in (  # the buckets' edges below the upper one: 20, 1 and 60 s
            (c.VLLM_KV_BLOCK_LIFETIME, 30.0),
            (c.VLLM_KV_BLOCK_IDLE_BEFORE_EVICT, 2.0),
            (c.VLLM_KV_BLOCK_REUSE_GAP, 120.0),
        ):
            for edge in (*EDGES, float("inf")):
                le = "+Inf" if edge == float("inf") else repr(edge)
                yield signal.name + "_bucket", {**e, "le": le}, 2.0 if edge >= hi else 0.0
            yield signal.name + "_count", e, 2.0
        yield c.VLLM_REQUESTS_RUNNING.name, e, -(12.0 if engine == "0" else 2.0)  # negative: a gauge
        yield c.VLLM_KV_CACHE_USAGE.name, e, -(0.8 if engine == "0" else 0.2)
        yield c.VLLM_REQUESTS_KV_FETCH_BY_STAGE.name, {**e, "stage": "in_progress"}, -3.0
        yield c.VLLM_NIXL_XFER_TIME.name + "_bucket", {**e, "le": "0.05"}, 1.0
        yield c.VLLM_NIXL_XFER_TIME.name + "_bucket", {**e, "le": "+Inf"}, 1.0
        yield c.VLLM_KV_OFFLOAD_CPU_USAGE.name, e, -0.4
        # TTFT: 98 % of requests within the SLO's bound; ITL: every token within it
        yield c.VLLM_TTFT.name + "_bucket", {**e, "le": repr(SLO.ttft.seconds)}, 0.98
        yield c.VLLM_TTFT.name + "_bucket", {**e, "le": "+Inf"}, 1.0
        yield c.VLLM_TTFT.name + "_count", e, 1.0
        yield c.VLLM_ITL.name + "_bucket", {**e, "le": repr(SLO.itl.seconds)}, 20.0
        yield c.VLLM_ITL.name + "_bucket", {**e, "le": "+Inf"}, 20.0
        yield c.VLLM_ITL.name + "_count", e, 20.0
        yield c.VLLM_REQUEST_SUCCESS.name, {**e, "finished_reason": "stop"}, 1.0
        # progress and per-token time: tokens flow, requests wait, a token within 10 ms
        yield c.VLLM_GENERATION_TOKENS.name, e, 300.0
        yield c.VLLM_PROMPT_TOKENS.name, e, 2000.0
        yield c.VLLM_REQUESTS_WAITING.name, e, -3.0
        yield c.VLLM_TPOT.name + "_bucket", {**e, "le": "0.01"}, 1.0
        yield c.VLLM_TPOT.name + "_bucket", {**e, "le": "+Inf"}, 1.0
        yield c.VLLM_TPOT.name + "_count", e, 1.0
    server = {k: v for k, v in ENGINE.items() if k != "pod"}
    yield c.VLLM_ADMISSION_REJECTIONS.name, {**server, "reason": "max_num_queued_reqs"}, 0.5
    for gpu in ("0", "1"):
        g = {"instance": INSTANCE, "job": "kvscope", "gpu": gpu, "UUID": f"GPU-{gpu}"}
        yield c.GPU_PEAK_FLOPS.name, g, -PEAK
        yield c.GPU_MEMORY_BANDWIDTH.name, g, -BANDWIDTH


def _openmetrics(end: float) -> str:
    """Counters (positive rates) grow at their rate; gauges (negative) hold their value."""
    families: dict[str, list[str]] = {}
    for i in range(MINUTES * 60 // STEP + 1):
        t = end - MINUTES * 60 + i * STEP
        for name, labels, value in _series():
            current = -value if value < 0 else value * i * STEP
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            families.setdefault(name, []).append(f"{name}{{{text}}} {current} {t:.3f}")
    lines = []
    for name, samples in families.items():
        lines += [f"# TYPE {name} gauge", *samples]
    return "\n".join([*lines, "# EOF"]) + "\n"


def _promql(expr: str) -> str:
    expr = expr.replace("$__rate_interval", "2m").replace("$__range", "20m")
    return re.sub(r"\$\{?[a-z_]+\}?", ".*", expr)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[tuple[PrometheusClient, float]]:
    end = float(int(time.time()) // 60 * 60 - 600)
    work = tmp_path_factory.mktemp("engine-board")
    with backfilled(work, _openmetrics(end)) as ready, PrometheusClient(ready.base_url) as client:
        yield client, end


def _panels(board: str) -> dict[str, dict]:
    data = json.loads(dash_build.render(board))
    out = {}
    for p in data["panels"]:
        for q in (p, *p.get("panels", [])):
            if q.get("targets"):
                out[q["title"]] = q
    return out


def _answer(client: PrometheusClient, at: float, panel: dict, ref: int = 0) -> dict[str, float]:
    target = panel["targets"][ref]
    vector = client.query(_promql(target["expr"]), at=at)
    legend = target.get("legendFormat", "")

    def name(labels: dict[str, str]) -> str:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend)

    return {name(labels): value for labels, value in vector}


def test_every_panel_of_the_engines_board_shows_data(prometheus):
    client, end = prometheus
    empty = []
    for title, panel in _panels("vllm-engines").items():
        for ref in range(len(panel["targets"])):
            if not _answer(client, end, panel, ref):
                empty.append(f"{title} [{ref}]")
    assert not empty, "panels without data: " + ", ".join(empty)


def test_the_engines_board_reads_the_numbers_an_engineer_would(prometheus):
    client, end = prometheus
    panels = _panels("vllm-engines")
    mfu = _answer(client, end, panels["MFU"])
    assert mfu[f"{INSTANCE} engine 0"] == pytest.approx(FLOPS_PER_S["0"] / PEAK, rel=0.02)
    assert mfu[f"{INSTANCE} engine 1"] == pytest.approx(FLOPS_PER_S["1"] / PEAK, rel=0.02)
    hbm = _answer(client, end, panels["Memory bandwidth used"])
    assert hbm[f"{INSTANCE} engine 1"] == pytest.approx(BYTES_PER_S["1"] / BANDWIDTH, rel=0.02)
    assert _answer(client, end, panels["Acceptance rate"])[f"{INSTANCE} engine 0"] == pytest.approx(0.6, rel=0.02)
    assert _answer(client, end, panels["Mean acceptance length"])[f"{INSTANCE} engine 0"] == pytest.approx(
        2.8, rel=0.02
    )
    tiers = _answer(client, end, panels["Hit rate by tier"])
    assert tiers == pytest.approx({"device": 0.3, "host": 0.1}, rel=0.02)
    lifetime = _answer(client, end, panels["Block lifetime"])
    assert 20.0 <= lifetime[f"p50 {INSTANCE} engine 0"] <= 30.0
    gap = _answer(client, end, panels["Reuse gap"])
    assert gap[f"p50 {INSTANCE} engine 0"] > lifetime[f"p50 {INSTANCE} engine 0"]  # the cache thrashes
    spread = _answer(client, end, panels["Load spread across an instance's engines"])
    assert spread == {INSTANCE: pytest.approx(10.0)}
    refused = _answer(client, end, panels["Admission refusals (the queue cap)"])
    assert refused == {f"{INSTANCE} max_num_queued_reqs": pytest.approx(0.5, rel=0.02)}


def test_the_overview_slo_tiles_read_the_attained_share(prometheus):
    client, end = prometheus
    panels = _panels("llm-serving-overview")
    ttft = next(p for t, p in panels.items() if t.startswith("TTFT within"))
    itl = next(p for t, p in panels.items() if t.startswith("ITL within"))
    assert _answer(client, end, ttft)[""] == pytest.approx(0.98, rel=0.01)
    assert _answer(client, end, itl)[""] == pytest.approx(1.0, rel=0.01)
    assert _answer(client, end, panels["Requests without error"])[""] == pytest.approx(1.0)
