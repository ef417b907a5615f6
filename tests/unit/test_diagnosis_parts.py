"""Diagnosis plumbing: quantiles, PromQL, webhook scoping, reports, the scrape source."""

import json
import math

import pytest

from diagnosis import report
from diagnosis.measures import BY_NAME, Measurements, Value
from diagnosis.run import Request
from diagnosis.sources.prometheus import promql
from diagnosis.sources.scrape import ScrapeSource, histogram_quantile
from diagnosis.verdict import diagnose
from diagnosis.webhook import scoped
from kvscope import catalog, promtext
from kvscope.promql import Selector


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = [(0.1, 50.0), (0.5, 90.0), (1.0, 99.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.9, buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.5 + 0.5 * 5 / 9)
    assert histogram_quantile(0.999, buckets) == 1.0  # in the +Inf bucket: the last finite bound
    assert math.isnan(histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]))


def test_promql_falls_back_to_legacy_names_and_quantiles_are_per_instance():
    kv = promql(BY_NAME["kv_usage_max"], 900, Selector.parse('{namespace="prod"}'))
    assert 'max_over_time(vllm:kv_cache_usage_perc{namespace="prod"}[15m])' in kv
    assert " or " in kv and "vllm:gpu_cache_usage_perc" in kv
    ttft = promql(BY_NAME["ttft_p99"], 900)
    assert ttft.startswith("histogram_quantile(0.99, sum by (le, namespace, pod, instance, target, model_name, engine)")
    ratio = promql(BY_NAME["prefix_hit_before"], 1800)
    assert "[25m] offset 5m" in ratio


def test_a_webhook_alert_scopes_the_diagnosis_to_its_namespace_and_time():
    base = Request(prometheus="http://p", selector=Selector.parse('{cluster="a"}'))
    alert = {
        "labels": {"alertname": "VLLMKVCacheFull", "namespace": "prod", "pod": "x"},
        "startsAt": "2026-11-30T02:00:00Z",
    }
    request = scoped(base, alert, now=1796009999.0)
    assert str(request.selector) == '{cluster="a",namespace="prod"}'
    assert request.at == 1796004000.0 + 120


def test_json_report_keeps_the_contract_keys():
    m = Measurements(
        {
            n: [Value(v, {"pod": "p"}, "q")]
            for n, v in (
                ("kv_usage_max", 0.97),
                ("waiting_max", 3),
                ("running_max", 9),
                ("preemption_rate", 1.0),
            )
        }
    )
    data = json.loads(report.to_json(diagnose(m, 1796004000, 1800, "http://p")))
    assert data["schema"] == "kvscope.diagnosis/v1" and data["at"] == "2026-11-30T02:00:00Z"
    assert data["window"] == "30m" and data["bottleneck"] == "kv_cache_exhaustion" and data["severity"] == "critical"
    assert data["affected"] == [{"pod": "p"}]
    assert report.render_markdown(diagnose(m, 1796004000, 1800, "x")).startswith("### kvscope diagnosis: `kv_cache")


class _Pages(ScrapeSource):
    """A scrape source whose pages come from a list, one per snapshot, on a fake clock."""

    def __init__(self, pages: list[str], interval: float, step: float) -> None:
        self.now = 0.0
        super().__init__(
            ["http://engine:8000/metrics"], interval=interval, step=step, clock=self._clock, sleep=self._sleep
        )
        self.pages = iter(pages)
        self.taken = 0

    def _clock(self) -> float:
        return self.now

    def _sleep(self, seconds: float) -> None:
        self.now += seconds

    def snapshot(self) -> list[promtext.Sample]:
        self.taken += 1
        page = promtext.parse(next(self.pages))
        return [promtext.Sample(s.name, {"instance": "engine:8000", **s.labels}, s.value) for s in page]


def _engine_page(kv: float, preemptions: float) -> str:
    labels = '{engine="0",model_name="m"}'
    return (
        f"{catalog.VLLM_KV_CACHE_USAGE.name}{labels} {kv}\n"
        f"{catalog.VLLM_NUM_PREEMPTIONS.name}{labels} {preemptions}\n"
        f"{catalog.VLLM_REQUESTS_WAITING.name}{labels} 0\n"
    )


def test_the_scrape_source_samples_gauges_between_its_two_rate_samples():
    # the pool is full only in the middle of the interval, as on a busy engine whose KV usage
    # swings within seconds: the two end samples alone would report 40 %
    pages = [_engine_page(kv, p) for kv, p in [(0.4, 0), (0.5, 3), (1.0, 7), (0.6, 9), (0.4, 12)]]
    source = _Pages(pages, interval=4, step=1)
    measured = source.fetch([BY_NAME["kv_usage_max"], BY_NAME["preemption_rate"]])
    assert source.taken == 5
    assert measured.values["kv_usage_max"][0].value == 1.0
    assert measured.values["preemption_rate"][0].value == pytest.approx(12 / 4)


def test_the_scrape_source_without_a_step_takes_two_samples():
    source = _Pages([_engine_page(0.4, 0), _engine_page(0.5, 2)], interval=10, step=0)
    measured = source.fetch([BY_NAME["kv_usage_max"], BY_NAME["preemption_rate"]])
    assert source.taken == 2
    assert measured.values["kv_usage_max"][0].value == 0.5
    assert measured.values["preemption_rate"][0].value == pytest.approx(0.2)


def test_the_scrape_source_honours_the_selector():
    from diagnosis.measures import Entity

    two = "\n".join(
        f'{catalog.VLLM_KV_CACHE_USAGE.name}{{namespace="{ns}",model_name="m"}} {kv}'
        for ns, kv in (("a", 0.9), ("b", 0.2))
    )
    selectors = {Entity.ENGINE: Selector.parse('{namespace="b"}')}
    source = _Pages([two, two], interval=10, step=0)
    source.selectors = selectors
    measured = source.fetch([BY_NAME["kv_usage_max"]])
    assert [(v.labels["namespace"], v.value) for v in measured.values["kv_usage_max"]] == [("b", 0.2)]


def test_scopes_join_only_what_the_labels_join():
    from diagnosis.scopes import Scopes

    engine = {"namespace": "prod", "pod": "vllm-0", "instance": "10.0.0.1:8000"}
    sibling = {**engine, "engine": "1"}  # a data-parallel engine of the same pod
    plain_gpu = {"Hostname": "node-0", "gpu": "0", "instance": "node-0:9400"}
    mapped_gpu = {"hostname": "node-1", "gpu": "0", "pod": "vllm-0", "namespace": "prod"}
    exported = {"Hostname": "node-2", "gpu": "0", "instance": "10.0.0.9:9464"}
    kvscope_engine = {"pod": "vllm-9", "namespace": "prod", "instance": "10.0.0.9:9464"}
    scopes = Scopes.of([engine, sibling, kvscope_engine], [plain_gpu, mapped_gpu, exported])
    # named as the on-call searches: the machine, and the vLLM pod it concerns
    assert scopes.of_labels(engine) == scopes.of_labels(sibling) == scopes.of_labels(mapped_gpu) == "node-1 (vllm-0)"
    assert scopes.of_labels(plain_gpu) == "node-0"  # plain dcgm-exporter: nothing names the engine
    assert scopes.of_labels(kvscope_engine) == scopes.of_labels(exported) == "node-2 (vllm-9)"  # one kvscope exporter
    assert scopes.count() == 3


def test_a_kubernetes_scope_is_named_by_its_node_and_vllm_pod_not_the_exporters_pod():
    from diagnosis.scopes import Scopes

    # dcgm-exporter in a DaemonSet: its Hostname is its own pod; service discovery adds the node
    engine = {"namespace": "prod", "pod": "vllm-llama-1", "instance": "10.0.3.7:8000", "node": "gpu-node-b"}
    gpu = {
        "Hostname": "dcgm-exporter-bx7l2",
        "pod": "dcgm-exporter-bx7l2",
        "instance": "10.0.3.2:9400",
        "kubernetes_node": "gpu-node-b",
        "gpu": "0",
    }
    alone = {"Hostname": "dcgm-exporter-q9z4k", "pod": "dcgm-exporter-q9z4k", "instance": "10.0.4.2:9400", "gpu": "0"}
    scopes = Scopes.of([engine], [gpu, alone])
    assert scopes.of_labels(engine) == scopes.of_labels(gpu) == "gpu-node-b (vllm-llama-1)"
    assert scopes.of_labels(alone) == "10.0.4.2:9400"  # no node known: the target, never the exporter's pod


def test_mig_devices_are_their_own_entities():
    from diagnosis.measures import Entity, entity_key

    parent = {"Hostname": "n", "gpu": "0", "UUID": "GPU-1"}
    slice_1 = {**parent, "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
    slice_2 = {**parent, "GPU_I_ID": "2", "GPU_I_PROFILE": "2g.20gb"}
    keys = {entity_key(x, Entity.GPU) for x in (parent, slice_1, slice_2)}
    assert len(keys) == 3


def test_lenient_parsing_keeps_what_it_can_read():
    from kvscope import promtext

    page = (
        '# TYPE a gauge\na{x="1"} 1\n'
        'b{gpu="0",...,modelName="L40S",...} 2\n'  # a redacted paste
        "# TYPE c counter\nc_total 3\n"
    )
    samples, bad = promtext.parse_lenient(page)
    assert {s.name for s in samples} == {"a", "c_total"} and bad == 1


def test_one_machine_however_it_is_spelled():
    from diagnosis.scopes import Scopes, host_part

    engine = {"instance": "node-a:8000", "model_name": "m"}  # bare metal: vLLM beside dcgm-exporter
    gpu = {"instance": "node-a:9400", "Hostname": "node-a", "gpu": "0"}
    lower = {"instance": "10.0.0.7:9400", "hostname": "node-b", "gpu": "0"}
    by_node = {"pod": "vllm-b", "namespace": "prod", "instance": "10.1.2.3:8000", "node": "node-b"}
    other = {"instance": "node-c:9400", "Hostname": "node-c", "gpu": "0"}
    scopes = Scopes.of([engine, by_node], [gpu, lower, other])
    assert scopes.of_labels(engine) == scopes.of_labels(gpu) == "node-a"
    assert scopes.of_labels(by_node) == scopes.of_labels(lower) == "node-b (vllm-b)"
    assert scopes.of_labels(other) == "node-c" and scopes.count() == 3
    # loopback names no machine: two fake nodes served from 127.0.0.1 stay two
    local = Scopes.of([{"instance": "127.0.0.1:8000"}], [{"instance": "127.0.0.1:9400", "Hostname": "n1", "gpu": "0"}])
    assert local.count() == 2
    assert (host_part("[::1]:9400"), host_part("10.0.0.5:9400"), host_part("node")) == ("::1", "10.0.0.5", "node")
