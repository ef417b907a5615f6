"""Scraping vLLM pages: re-exposed with a target label; a slow, dead or malformed target costs
only its own series, and malformed pages are counted (prometheus_client's parser)."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.collectors.vllm import VllmCollector
from exporter.exposition import render
from exporter.registry import Exporter
from kvscope import catalog, promtext
from tests.fakes.pages import PageServer

VLLM_PAGE = f"""# HELP {catalog.VLLM_KV_CACHE_USAGE.name} KV usage
# TYPE {catalog.VLLM_KV_CACHE_USAGE.name} gauge
{catalog.VLLM_KV_CACHE_USAGE.name}{{engine="0",model_name="m"}} 0.42
# HELP {catalog.VLLM_NUM_PREEMPTIONS.family} preemptions
# TYPE {catalog.VLLM_NUM_PREEMPTIONS.family} counter
{catalog.VLLM_NUM_PREEMPTIONS.name}{{engine="0",model_name="m"}} 7.0
{catalog.VLLM_NUM_PREEMPTIONS.family}_created{{engine="0",model_name="m"}} 1.7e9
"""


@pytest.fixture
def healthy():
    server = PageServer(VLLM_PAGE)
    yield server
    server.close()


def test_series_are_re_exposed_unchanged_with_a_target_label(healthy):
    page = render(VllmCollector([healthy.url]).collect()).decode()
    samples = promtext.parse(page)
    kv = promtext.select(samples, catalog.VLLM_KV_CACHE_USAGE.name)[0]
    assert kv.value == 0.42 and kv.labels == {
        "engine": "0",
        "model_name": "m",
        "target": healthy.url,
    }
    assert promtext.total(samples, catalog.VLLM_NUM_PREEMPTIONS.name) == 7
    assert "_created" not in page
    assert promtext.total(samples, catalog.TARGET_UP.name, target=healthy.url) == 1


def test_the_emulated_gpus_follow_each_up_targets_own_samples(healthy):
    dead = "http://127.0.0.1:9/metrics"
    collector = VllmCollector([healthy.url, dead])
    assert collector.latest == {}
    list(collector.collect())
    assert set(collector.latest) == {healthy.url}
    kv = promtext.select(collector.latest[healthy.url], catalog.VLLM_KV_CACHE_USAGE.name)
    assert [(s.labels, s.value) for s in kv] == [({"engine": "0", "model_name": "m"}, 0.42)]
    assert promtext.total(collector.latest[healthy.url], catalog.VLLM_NUM_PREEMPTIONS.name) == 7
    assert not any(s.name.endswith("_created") for s in collector.latest[healthy.url])


def test_a_page_that_has_a_target_label_keeps_it_as_exported_target():
    page = f'# TYPE {catalog.VLLM_KV_CACHE_USAGE.name} gauge\n{catalog.VLLM_KV_CACHE_USAGE.name}{{target="a",engine="0"}} 0.5\n'
    server = PageServer(page)
    try:
        samples = promtext.parse(render(VllmCollector([server.url]).collect()).decode())
    finally:
        server.close()
    (kv,) = promtext.select(samples, catalog.VLLM_KV_CACHE_USAGE.name)
    assert kv.labels == {"target": server.url, "engine": "0", "exported_target": "a"}


def test_a_dead_target_costs_only_its_own_series(healthy):
    dead = "http://127.0.0.1:9/metrics"
    samples = promtext.parse(render(VllmCollector([healthy.url, dead]).collect()).decode())
    assert promtext.total(samples, catalog.TARGET_UP.name, target=dead) == 0
    assert promtext.total(samples, catalog.TARGET_UP.name, target=healthy.url) == 1
    assert {s.labels["target"] for s in promtext.select(samples, catalog.VLLM_KV_CACHE_USAGE.name)} == {healthy.url}


def test_a_slow_target_is_cut_at_the_timeout(healthy):
    slow = PageServer(VLLM_PAGE, delay=60.0)  # answers after a minute
    try:
        started = time.monotonic()
        samples = promtext.parse(render(VllmCollector([healthy.url, slow.url], timeout=0.3).collect()).decode())
        assert time.monotonic() - started < 30  # cut long before the minute, even on a busy machine
        assert promtext.total(samples, catalog.TARGET_UP.name, target=slow.url) == 0
        assert promtext.total(samples, catalog.TARGET_UP.name, target=healthy.url) == 1
    finally:
        slow.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    junk=st.one_of(
        st.text(max_size=300),
        st.builds(
            lambda a, b: VLLM_PAGE[: len(VLLM_PAGE) * a // 100] + b,
            st.integers(0, 100),
            st.text(max_size=40),
        ),
        st.sampled_from(['x{a="1" 2', "# TYPE x counter\nx_total{a=} 1", 'x{a="\\q"} NaNa', "x 1 2 3 4"]),
    )
)
def test_malformed_pages_never_break_the_exporter(healthy, junk):
    bad = PageServer(junk)
    try:
        collector = VllmCollector([bad.url, healthy.url])
        exporter = Exporter([collector], interval=0)
        samples = promtext.parse(exporter.page().decode())  # whatever the junk, the page parses
        assert promtext.total(samples, catalog.TARGET_UP.name, target=healthy.url) == 1
        up = promtext.total(samples, catalog.TARGET_UP.name, target=bad.url)
        errors = promtext.total(samples, catalog.EXPORTER_PARSE_ERRORS.name, target=bad.url)
        assert (up, errors) in ((1.0, 0.0), (0.0, 1.0))
        assert promtext.total(samples, catalog.EXPORTER_COLLECTOR_SUCCESS.name, collector="vllm") == 1
        collector.close()
    finally:
        bad.close()
