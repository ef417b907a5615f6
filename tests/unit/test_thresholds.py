"""The thresholds table: unique keys, sane values, the seeds' numbers."""

import re

from kvscope import thresholds as t


def test_keys_are_unique():
    keys = [x.key for x in t.all_thresholds()]
    assert len(keys) == len(set(keys))


def test_durations_are_prometheus_durations():
    for x in t.all_thresholds():
        assert x.for_ == "" or re.fullmatch(r"\d+[smhd]", x.for_), x


def test_kv_warning_sits_below_critical():
    assert t.KV_USAGE_WARNING.value < t.KV_USAGE_CRITICAL.value <= 1.0


def test_the_seeds_numbers():
    assert t.KV_USAGE_CRITICAL.value == 0.90  # seed 000, triage step 1
    assert t.GPU_UTIL_FLOOR.value == 20 and t.GPU_UTIL_FLOOR.for_ == "10m"  # seed 002
    assert t.PREFIX_HIT_FLOOR.value == 0.75  # seed 004
    assert t.QUEUE_BACKLOG.value == 100 and t.QUEUE_BACKLOG.for_ == "3m"  # seed 002
    assert t.TTFT_P99.value == 3.0  # seed 002


def test_ratios_are_between_zero_and_one():
    for x in t.all_thresholds():
        if x.unit == "ratio" and x.key not in {"ttft_tail_ratio"}:
            assert 0 < x.value <= 1, x
