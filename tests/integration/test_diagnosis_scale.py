"""The fleet-scale benchmark at its smallest size (issue 23): two nodes of 8 GPUs and two
engines each, one engine's KV cache exhausted, backfilled into a real Prometheus; the command's
verdict names that engine alone, in one phase and in two (the rollups recorded from the rules).
`python -m bench.diagnosis_scale` runs the larger sizes."""

from __future__ import annotations

import pytest

from bench.diagnosis_scale import fleet, measure, table

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]


def test_the_fleet_has_two_engines_a_node_on_their_own_gpus():
    instances, faulty = fleet(3)
    assert len(instances) == 6 and faulty in {i.name for i in instances}
    gpus = {(i.node, i.gpu(g)["gpu"]) for i in instances for g in range(i.gpus)}
    assert len(gpus) == 24  # 8 on each node, none twice
    assert all(i.engine_labels["node"] == i.node for i in instances)


def test_the_smallest_size_names_the_faulty_engine_alone(tmp_path):
    row = measure(2, 1, tmp_path, phases="two")  # auto screens from 64 engines: made to here
    assert (row.bottleneck, row.only_the_fault) == ("kv_cache_exhaustion", True), row
    # the rollups recorded by promtool from the rules, the screen read them: only the faulty
    # engine's instance is read for its latency, and the verdict is the one phase's
    assert (row.two_bottleneck, row.two_only_the_fault) == ("kv_cache_exhaustion", True), row
    assert row.screen.startswith("two phases (rollups): 3 of 4 engines cleared"), row.screen
    assert row.screen.endswith("latency quantiles read for 1 instance(s)"), row.screen
    assert row.gpus == 16 and row.engines == 4 and row.series > 0 and row.prometheus_s > 0
    assert row.rule_group and 0 < row.rule_share < 1, row
    # every rollup records a series per engine and per GPU: 9 engine rollups, 5 GPU ones
    assert row.rollup_series == 4 * 9 + 16 * 5, row
    assert "| 2 | 16 | 4 |" in table([row]) and "- 16 GPUs: two phases" in table([row])
