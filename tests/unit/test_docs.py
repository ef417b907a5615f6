"""docs/metrics.md and docs/tuning.md are generated from the catalog, the thresholds, the config
schema and the tuned profile's numbers, and committed up to date."""

from pathlib import Path

from kvscope import catalog, docs, tuning

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_committed_metrics_doc_matches_the_catalog():
    assert (DOCS / docs.METRICS_FILE).read_text() == docs.render(), "run `make generate`"


def test_committed_tuning_doc_matches_the_profile():
    assert (DOCS / docs.TUNING_FILE).read_text() == docs.render_tuning(), "run `make generate`"


def test_every_gpu_number_cites_a_source_or_says_it_is_not_measured_on_a_gpu():
    for table in (tuning.PREFILL_BUDGET, tuning.LONG_PREFILL_SHARE, tuning.WATERMARK, tuning.KV_LANE_SHARE):
        for platform, number in table.items():
            if platform is tuning.Platform.CPU:
                assert "drill" in number.source  # the demo profile's numbers are the drills'
            else:
                assert number.measured_on_gpu or tuning.NOT_MEASURED_ON_GPU in number.source, (platform, number)
                assert "seed" in number.source or "vLLM" in number.source or tuning.NOT_MEASURED_ON_GPU in number.source


def test_metrics_doc_lists_every_signal_and_threshold():
    text = docs.render()
    for signal in catalog.all_signals():
        assert f"`{signal.name}`" in text
    assert "`kv_usage_critical` | 0.9" in text


def test_metrics_doc_says_who_reads_each_signal_and_what_is_passed_through():
    rows = {line.split("|")[1].strip(" `"): line for line in docs.render().splitlines() if line.startswith("| `")}
    assert "dashboards" in rows[catalog.VLLM_KV_CACHE_USAGE.name].split("|")[5]
    assert "diagnosis" in rows[catalog.VLLM_KV_CACHE_USAGE.name].split("|")[5]
    passed = next(iter(catalog.VLLM_PASSED_THROUGH.values()))
    assert rows[passed.name].split("|")[5].strip() == docs.PASSED_THROUGH
    assert "in the default counters" in rows[catalog.DCGM_GPU_UTIL.name]
