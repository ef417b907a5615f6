"""The ceiling benchmark's side-by-side profile: samples attributed to whose code they ran in,
per request served (bench/frontend_ceiling.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.frontend_ceiling import Profiled, by_package, compare_table, package

SITE = "/work/.venv/lib/python3.12/site-packages"
BARE = f"""\
process 1:"vllm";thread (0x1);run (/usr/lib/python3.12/asyncio/runners.py:118);send ({SITE}/uvicorn/protocols/http/httptools_impl.py:500) 40
process 1:"vllm";thread (0x1);run (/usr/lib/python3.12/asyncio/runners.py:118);generate ({SITE}/vllm/v1/engine/async_llm.py:400) 60
"""
GATEWAY = f"""\
process 1:"kvscope";thread (0x1);run (/usr/lib/python3.12/asyncio/runners.py:118);send ({SITE}/uvicorn/protocols/http/httptools_impl.py:500) 40
process 1:"kvscope";thread (0x1);run (/usr/lib/python3.12/asyncio/runners.py:118);generate ({SITE}/vllm/v1/engine/async_llm.py:400) 60
process 1:"kvscope";thread (0x1);__call__ (serving/gateway.py:340);send_tracked (serving/gateway.py:563) 20
process 1:"kvscope";thread (0x1);run (/usr/lib/python3.12/asyncio/base_events.py:1900) 10
"""


def test_a_frame_belongs_to_kvscope_a_package_vllm_by_sub_package_or_the_standard_library() -> None:
    assert package("serving/gateway.py") == "kvscope"
    assert package("/repo/serving/gateway.py") == "kvscope"
    assert package(f"{SITE}/vllm/v1/engine/async_llm.py") == "vllm/v1/engine"
    assert package(f"{SITE}/vllm/envs.py") == "vllm"
    assert package(f"{SITE}/uvicorn/protocols/http/httptools_impl.py") == "uvicorn"
    assert package(f"{SITE}/typing_extensions.py") == "typing_extensions"
    assert package("/usr/lib/python3.12/asyncio/base_events.py") == "stdlib asyncio"
    assert package("/usr/lib/python3.12/json/encoder.py") == "stdlib json"
    assert package("bench/mock_engine.py") == "bench (mock engine)"
    assert package("<frozen importlib._bootstrap>") == "stdlib importlib"
    # py-spy's own spelling: the module path, no directory
    assert package("vllm/v1/metrics/loggers.py") == "vllm/v1/metrics"
    assert package("fastapi/routing.py") == "fastapi"
    assert package("asyncio/locks.py") == "stdlib asyncio"
    assert package("copy.py") == "stdlib copy"
    assert package("<unknown>") == "other"


def test_self_samples_add_up_by_package() -> None:
    found = by_package(GATEWAY)
    assert found == {"uvicorn": 40, "vllm/v1/engine": 60, "kvscope": 20, "stdlib asyncio": 10}


def test_the_comparison_gives_each_package_its_microseconds_per_request_and_the_difference() -> None:
    bare = Profiled("bare", BARE, Path("bare.collapsed"), requests=100, cpu_ms_per_request=5.2)
    gateway = Profiled("default", GATEWAY, Path("default.collapsed"), requests=100, cpu_ms_per_request=6.7)
    table = compare_table([bare, gateway])
    rows = {line.split(" | ")[0]: line for line in table.splitlines()}
    # 5 ms a sample over 100 requests: 20 samples of kvscope's code are 1,000 us a request
    assert rows["| `kvscope`"] == "| `kvscope` | 0 | 1000 | +1000 |"
    assert rows["| `uvicorn`"] == "| `uvicorn` | 2000 | 2000 | +0 |"
    assert rows["| all sampled"] == "| all sampled | **5000** | **6500** | **+1500** |"
    assert rows["| process CPU from /proc"] == "| process CPU from /proc | 5200 | 6700 | +1500 |"


def _run(rps: float, cpu: float, p99: float) -> dict[str, dict[str, float]]:
    ceiling = {"req_per_s": rps, "cpu_ms_per_request": cpu, "rss_mib": 600.0, "failed": 0}
    half = {"p50_ms": p99 / 2, "p99_ms": p99, "cpu_ms_per_request": cpu, "failed": 0}
    return {"ceiling": ceiling, "half": half}


def test_with_passthrough_measured_the_gateway_is_also_set_against_it_round_by_round() -> None:
    from bench.frontend_ceiling import summarise, table

    rounds = [
        {"bare": _run(100, 10.0, 50.0), "passthrough": _run(200, 5.0, 20.0), "default": _run(180, 5.5, 21.0)},
        {"passthrough": _run(190, 5.2, 22.0), "default": _run(171, 5.6, 22.5), "bare": _run(95, 10.4, 55.0)},
    ]
    for offered, found in zip((50.0, 47.5), rounds, strict=True):
        found["rate_at_half"] = offered  # type: ignore[assignment]
    found = summarise(rounds)
    mine = found["against_passthrough"]["default"]
    assert mine["ratio"] == {"median": 0.9, "min": 0.9, "max": 0.9}
    assert mine["p99_delta_ms"]["min"] == 0.5 and mine["p99_delta_ms"]["max"] == 1.0
    assert found["default"]["p99_delta_ms"]["max"] == -29.0  # against bare: faster (renders in place)
    assert found["bare_busy_at_half"] == pytest.approx(0.497)  # 50/s x 10 ms and 47.5/s x 10.4 ms: CPU s a second
    text = table({"completions, streaming": found}, rounds=2)
    assert "| completions, streaming | default (against passthrough) | 195 | 176 | 0.900 (0.900 to 0.900) |" in text
    assert "| 0.25, 0.27 | +0.38 (+0.25 to +0.50) ms | +0.75 (+0.50 to +1.00) ms |" in text  # busy; p50, p99
    assert "| completions, streaming | passthrough | 98 |" in text
    assert "| added p99 at half |" in text
    assert "| added p99 at 0.25 of bare's ceiling |" in table({"completions, streaming": found}, rounds=2, at=0.25)
    assert "| added p99 at 40 req/s |" in table({"completions, streaming": found}, rounds=2, fixed=40.0)  # --rate


def test_pinned_the_servers_get_one_cpu_and_the_client_the_rest() -> None:
    from bench.frontend_ceiling import split_cpus

    assert split_cpus([0, 1]) == ([1], [0])
    assert split_cpus([2, 5, 7]) == ([7], [2, 5])
    assert split_cpus([3]) == ([3], [])  # too few: main() refuses --pin
