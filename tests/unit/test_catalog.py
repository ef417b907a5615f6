"""The signal catalog is the one place metric names live, and its names follow the rules."""

import re

import pytest

from kvscope import catalog
from kvscope.catalog import Kind, Source
from kvscope.promql import metric

SIGNALS = catalog.all_signals()
OWN = [s for s in SIGNALS if s.source is Source.KVSCOPE]


def test_no_name_or_alias_is_defined_twice():
    seen: dict[str, str] = {}
    for signal in SIGNALS:
        for name in signal.names:
            assert name not in seen, f"{name} defined by {seen[name]} and {signal.name}"
            seen[name] = signal.name


@pytest.mark.parametrize("signal", OWN, ids=lambda s: s.name)
def test_kvscope_names_never_contain_vllm(signal):
    # vLLM unregisters every default-registry metric whose name contains "vllm" at start-up.
    assert "vllm" not in signal.name.lower()


@pytest.mark.parametrize("signal", OWN, ids=lambda s: s.name)
def test_kvscope_names_follow_the_naming_scheme(signal):
    assert re.fullmatch(r"kvscope_[a-z]+(_[a-z0-9]+)+", signal.name), signal.name
    if signal.kind is Kind.COUNTER:
        assert signal.name.endswith("_total")
    if signal.kind is Kind.INFO:
        assert signal.name.endswith("_info")
    if signal.kind is Kind.HISTOGRAM:
        assert signal.buckets and list(signal.buckets) == sorted(signal.buckets)


@pytest.mark.parametrize("signal", SIGNALS, ids=lambda s: s.name)
def test_every_signal_says_what_it_measures(signal):
    assert signal.help.strip() and signal.unit.strip()


def test_vllm_counters_are_named_as_queried():
    for signal in SIGNALS:
        if signal.source is Source.VLLM and signal.kind is Kind.COUNTER:
            assert signal.name.endswith("_total"), signal.name


def test_renamed_vllm_series_are_queried_under_both_names_current_first():
    for signal, old in (
        (catalog.VLLM_KV_CACHE_USAGE, "vllm:gpu_cache_usage_perc"),
        (catalog.VLLM_ITL, "vllm:time_per_output_token_seconds"),
        (catalog.VLLM_PREFIX_CACHE_HITS, "vllm:gpu_prefix_cache_hits_total"),
    ):
        query = str(metric(signal).max())
        assert query.index(signal.name) < query.index(old) and " or " in query


def test_the_vllm_bucket_bounds_are_the_pinned_vllms():
    buckets = pytest.importorskip("vllm.v1.metrics.buckets")
    assert catalog.VLLM_TTFT.buckets == buckets.TIME_TO_FIRST_TOKEN_BUCKETS
    assert catalog.VLLM_ITL.buckets == buckets.INTER_TOKEN_LATENCY_BUCKETS
    assert catalog.VLLM_QUEUE_TIME.buckets == buckets.REQUEST_LATENCY_BUCKETS


def test_removed_v0_series_are_kept_for_reading_old_deployments():
    legacy = {s.name for s in SIGNALS if s.legacy}
    assert {"vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc"} <= legacy


def test_dcgm_series_carry_dcgm_exporter_labels_in_order():
    for signal in SIGNALS:
        if signal.source is Source.DCGM:
            assert signal.labels[:6] == (
                "gpu",
                "UUID",
                "pci_bus_id",
                "device",
                "modelName",
                "hostname",
            )


def test_the_host_label_is_spelled_as_the_current_dcgm_exporter_release_and_both_spellings_are_named():
    # dcgm-exporter 4.6.0-4.8.3 (PR #655) renamed Hostname to hostname; older exporters still write Hostname
    assert catalog.DCGM_HOST_LABELS == ("hostname", "Hostname")
    assert catalog.DCGM_GPU_UTIL.labels[5] == catalog.DCGM_HOST_LABELS[0]
    assert catalog.DCGM_MIG_LABELS == ("GPU_I_PROFILE", "GPU_I_ID")


def test_prometheus_client_family_names_drop_the_suffix_it_adds():
    assert catalog.GATEWAY_REJECTIONS.family == "kvscope_gateway_rejections"
    assert catalog.GPU_XID_INFO.family == "kvscope_gpu_xid_info"
    assert catalog.REQUEST_QUEUE_SECONDS.family == "kvscope_request_queue_seconds"
