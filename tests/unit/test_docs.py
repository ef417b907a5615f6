"""docs/metrics.md is generated from the catalog and committed up to date."""

from kvscope import catalog, docs


def test_committed_metrics_doc_matches_the_catalog():
    assert docs.METRICS_MD.read_text() == docs.render(), "run `make generate`"


def test_metrics_doc_lists_every_signal_and_threshold():
    text = docs.render()
    for signal in catalog.all_signals():
        assert f"`{signal.name}`" in text
    assert "`kv_usage_critical` | 0.9" in text
