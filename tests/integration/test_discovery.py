"""`kvscope export` with no --vllm finds the engines running on its machine (procfs discovery):
a `kvscope serve` and a bare `python -m vllm.entrypoints.openai.api_server`, and drops the one
that stops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drill.launcher import (
    ServerProcess,
    kvscope_exporter,
    kvscope_server,
    running,
    vllm_openai_server,
)
from kvscope import catalog, promtext
from serving.demo_model import SERVED_NAME
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INTERVAL = 2.0
SCRAPE_TIMEOUT = 3.0  # the exporter's default per-pass scrape deadline
# "Within one collection interval": the pass after the engine became ready, which starts at most
# one interval (plus a pass already in flight, bounded by the scrape deadline) later.
WITHIN = 2 * INTERVAL + 2 * SCRAPE_TIMEOUT
ENGINE_START = 600.0  # two vLLM engines at once on two shared cores


@pytest.fixture(scope="module")
def engines(demo_model_path: Path, tmp_path_factory) -> Iterator[dict[str, ServerProcess]]:
    """Both engines started at once (each takes minutes here); stopped at the end whatever happens."""
    logs = tmp_path_factory.mktemp("engines")
    serve = kvscope_server(logs / "serve.log", extra_args=["--enforce-eager"])
    bare = vllm_openai_server(
        demo_model_path, logs / "vllm.log", served_name=SERVED_NAME, extra_args=["--enforce-eager"]
    )
    try:
        yield {"serve": serve, "vllm": bare}
    finally:
        serve.stop()
        bare.stop()


@pytest.fixture(scope="module")
def exporter(tmp_path_factory) -> Iterator[ServerProcess]:
    args = ("--gpu", "emulated", "--emulated-gpus", "2", "--collect-interval", str(INTERVAL))
    server = kvscope_exporter(tmp_path_factory.mktemp("export") / "export.log", *args)
    with running(server, ready_path="/-/healthy", timeout=120) as ready:
        yield ready


def _discovered(exporter: ServerProcess) -> dict[str, set[str]]:
    """target -> the names of its vLLM series on the exporter's page, for discovered targets."""
    page = httpx.get(exporter.base_url + "/metrics", timeout=10).text
    out: dict[str, set[str]] = {}
    for sample in promtext.parse(page):
        if sample.labels.get("discovered") == "procfs" and sample.name.startswith("vllm:"):
            out.setdefault(sample.labels["target"], set()).add(sample.name)
    return out


def test_both_engines_are_found_and_the_stopped_one_is_dropped(engines, exporter):
    serve, bare = engines["serve"], engines["vllm"]
    urls = {name: server.base_url + "/metrics" for name, server in engines.items()}
    started = time.monotonic()
    serve.wait_ready("/ready", timeout=ENGINE_START)
    bare.wait_ready("/health", timeout=max(60.0, ENGINE_START - (time.monotonic() - started)))
    ready_at = time.monotonic()

    def both() -> dict[str, set[str]]:
        found = _discovered(exporter)
        return found if all(catalog.VLLM_KV_CACHE_USAGE.name in found.get(u, set()) for u in urls.values()) else {}

    eventually(both, timeout=WITHIN, interval=0.2, what="both engines' vLLM series on the exporter's page")
    found_after = time.monotonic() - ready_at
    page = promtext.parse(httpx.get(exporter.base_url + "/metrics", timeout=10).text)
    for url in urls.values():  # the up gauge is the static targets' one: target label only
        (up,) = promtext.select(page, catalog.TARGET_UP.name, target=url)
        assert up.value == 1 and set(up.labels) == {"target"}
    assert promtext.total(page, catalog.DISCOVERY_TARGETS.name, method="procfs") >= 2

    bare.stop()
    stopped_at = time.monotonic()
    eventually(lambda: urls["vllm"] not in _discovered(exporter), timeout=WITHIN, what="the stopped engine dropped")
    dropped_after = time.monotonic() - stopped_at
    assert catalog.VLLM_KV_CACHE_USAGE.name in _discovered(exporter).get(urls["serve"], set())
    assert not promtext.select(
        promtext.parse(httpx.get(exporter.base_url + "/metrics", timeout=10).text),
        catalog.TARGET_UP.name,
        target=urls["vllm"],
    ), "a discovered target that is gone has no up series either"
    print(f"found {found_after:.1f} s after both were ready, dropped {dropped_after:.1f} s after the stop")
