"""dcgm-exporter renamed its host label (`Hostname` before 4.6.0-4.8.3, `hostname` since): the
GPU alerts fire, with the host in their text, for series spelled either way."""

from __future__ import annotations

import pytest
import yaml

from alerts import build as alert_build
from alerts import definitions as d
from kvscope import catalog
from tests.promtool import rule_tests


@pytest.mark.parametrize("spelling", catalog.DCGM_HOST_LABELS)
def test_gpu_alerts_fire_for_either_host_label(spelling, tmp_path, monkeypatch):
    labels = {k: v for k, v in d.G_LABELS.items() if k not in catalog.DCGM_HOST_LABELS}
    monkeypatch.setattr(d, "G_LABELS", {**labels, spelling: "node-7"})
    rules, alerts = alert_build.build_rules()
    gpu = [a for a in alerts if a.group == "kvscope-gpu"]
    documents = alert_build.build_tests(gpu)
    assert list(documents) == [alert_build.TESTS_FILE]  # no GPU alert needs a day of data
    tests = documents[alert_build.TESTS_FILE]
    (tmp_path / alert_build.RULES_FILE).write_text(yaml.safe_dump(rules))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tests, width=1000))
    on_host = [
        c["exp_alerts"][0]
        for t in tests["tests"]
        for c in t["alert_rule_test"]
        if c["exp_alerts"] and spelling in c["exp_alerts"][0]["exp_labels"]
    ]
    assert len(on_host) >= 5  # the alerts on dcgm-exporter's series keep the host label
    assert all(
        "on node-7" in a["exp_annotations"]["description"] or "of node-7" in a["exp_annotations"]["description"]
        for a in on_host
    )
    result = rule_tests(tmp_path, "t.yaml")
    assert result.returncode == 0, result.stdout[-3000:]


def test_a_gpu_without_a_host_label_is_named_by_its_scrape_target():
    from alerts.templates import render

    assert render("on " + d.HOST, {"instance": "node-1:9408"}, 1.0) == "on node-1:9408"
    assert render("on " + d.HOST, {"Hostname": "n", "instance": "i"}, 1.0) == "on n"
