"""The one PromQL builder: escaping, names and aliases, parentheses, vector matching; and the
contract that no PromQL is assembled anywhere else in the project."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kvscope import catalog as c
from kvscope.promql import Matcher, Selector, either, metric, metric_names, quantile, regex_any, scale_durations

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kvscope", "serving", "exporter", "diagnosis", "alerts", "dashboards", "drill")
BUILDER = ROOT / "kvscope" / "promql.py"
# What hand-assembled PromQL looks like: functions, aggregations with grouping, offsets,
# ranges, vector matching, label matchers.
ASSEMBLED = re.compile(
    r"\b(rate|irate|increase|deriv|delta|idelta|histogram_quantile|label_values|label_replace|"
    r"(max|min|avg|sum|count|last|quantile)_over_time|changes|clamp_max|clamp_min|absent|topk|bottomk)\s*\(|"
    r"\b(sum|max|min|avg|count|topk)\s+(by|without)\s*\(|\boffset\s+\d|\[\d+(ms|s|m|h|d|w)(:\d*\w*)?\]|"
    r"\b(group_left|group_right|ignoring)\b|\bunless\b|_bucket\{|\{[a-zA-Z_]+=~?\""
)


def assembled_outside_the_builder(files: list[Path], root: Path = ROOT) -> list[str]:
    """String literals (f-string parts included, docstrings not) that look like PromQL."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            literal = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            if literal and ASSEMBLED.search(node.value):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value[:80]!r}")
    return found


def test_no_promql_is_assembled_outside_the_builder():
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if p != BUILDER]
    assert not assembled_outside_the_builder(files)


def test_the_scan_catches_a_query_typed_by_hand(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text(
        '"""A docstring may say rate(x[5m])."""\nWINDOW = "5m"\nQUERY = f"sum by (pod) (rate({NAME}[{WINDOW}]))"\n'
    )
    found = assembled_outside_the_builder([sample], root=tmp_path)
    assert len(found) == 1 and "sum by (" in found[0]


def test_label_values_are_escaped():
    sel = Selector.of(pod='we"ird\\name\nx')
    assert str(sel) == r'{pod="we\"ird\\name\nx"}'
    assert Selector.parse(str(sel)) == sel


def test_a_users_selector_is_parsed_or_refused_with_the_reason():
    assert str(Selector.parse('{namespace="prod", pod=~"vllm-.*"}')) == '{namespace="prod",pod=~"vllm-.*"}'
    assert str(Selector.parse('namespace!="dev"')) == '{namespace!="dev"}'
    assert Selector.parse("") == Selector.parse("{}") == Selector()
    for bad, why in (
        ('{namespace="prod"', "closing brace"),
        ("{namespace=prod}", "quoted"),
        ('{1a="x"}', "label name"),
        ('{a="x" b="y"}', "','"),
        ('{a=="x"}', "quoted"),
        ('{a="x}', "unterminated"),
        ('{a="x"} or vector(1)', "closing brace"),
        ('{a=~"("}', "does not compile"),
        ('{a=~"(?=x)y"}', "not RE2"),
        ('{__name__=~"vllm:.*"}', "__name__"),
    ):
        with pytest.raises(ValueError, match=why):
            Selector.parse(bad)


def test_aliases_are_tried_in_order_and_paired_with_their_own_vintage():
    hits = metric(c.VLLM_PREFIX_CACHE_HITS).rate("5m").sum(("pod",))
    ratio = hits / metric(c.VLLM_PREFIX_CACHE_QUERIES).rate("5m").sum(("pod",))
    text = str(ratio)
    current, legacy = text.split(" or ")
    assert "vllm:prefix_cache_hits_total" in current and "vllm:prefix_cache_queries_total" in current
    assert "vllm:gpu_prefix_cache_hits_total" in legacy and "vllm:gpu_prefix_cache_queries_total" in legacy


def test_comparisons_join_the_alternatives_before_comparing():
    kv = metric(c.VLLM_KV_CACHE_USAGE).max(("pod",))
    assert str(kv.ge(0.9)) == (
        "((max by (pod) (vllm:kv_cache_usage_perc)) or (max by (pod) (vllm:gpu_cache_usage_perc))) >= 0.9"
    )


def test_vector_matching_and_parentheses():
    used, free = metric(c.DCGM_FB_USED.name), metric(c.DCGM_FB_FREE.name)  # the 4.8 names alone
    share = (used / (used + free)).max(("instance", "gpu"))
    budget = metric(c.ENGINE_MEMORY_BUDGET).max(("instance",))
    expr = share.gt(budget + 0.03, on=("instance",), group_left=())
    assert str(expr) == (
        "max by (instance, gpu) (DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)) "
        "> on (instance) group_left () (max by (instance) (kvscope_engine_gpu_memory_budget_ratio) + 0.03)"
    )


def test_quantiles_are_per_entity_and_fall_back_across_signals():
    q = str(quantile(0.99, c.VLLM_QUEUE_TIME, c.REQUEST_QUEUE_SECONDS, window="5m", by=("pod",)))
    assert q.startswith("(histogram_quantile(0.99, sum by (le, pod) (rate(vllm:request_queue_time_seconds_bucket[5m]")
    assert "kvscope_request_queue_seconds_bucket" in q


def test_offsets_subqueries_and_windows():
    r = metric(c.VLLM_NUM_PREEMPTIONS).range("25m").offset("5m").increase().sum()
    assert str(r) == "sum (increase(vllm:num_preemptions_total[25m] offset 5m))"
    sub = metric(c.VLLM_REQUESTS_WAITING).max().range("1h", "1m").over_time("max")
    assert str(sub) == "max_over_time((max (vllm:num_requests_waiting))[1h:1m])"
    with pytest.raises(ValueError, match="not a range"):
        metric(c.VLLM_NUM_PREEMPTIONS).rate("5 minutes")
    with pytest.raises(ValueError, match="offset"):
        metric(c.VLLM_NUM_PREEMPTIONS).rate("5m").offset("1m")
    with pytest.raises(ValueError, match="before the offset"):
        metric(c.VLLM_NUM_PREEMPTIONS).offset("1m").range("5m")


def test_regex_alternatives_escape_their_values():
    assert regex_any([13, 31]) == "13|31"
    assert str(Matcher("le", "=~", regex_any(["2.5", "+Inf"]))) == r'le=~"2\\.5|\\+Inf"'


def test_either_keeps_every_alternative_in_order():
    e = either(metric(c.VLLM_TTFT, suffix="_count"), metric(c.REQUEST_TTFT_SECONDS, suffix="_count"))
    assert metric_names(str(e)) == {"vllm:time_to_first_token_seconds_count", "kvscope_request_ttft_seconds_count"}


def test_a_drill_clock_scales_every_window_offset_and_step():
    expr = 'rate(x{pod=~"vllm[ab]",note="offset 5m"}[5m]) > 0 and max_over_time((rate(y[10m]))[1h:1m] offset 10m)'
    assert scale_durations(expr, 20, min_range=10, min_step=2) == (
        'rate(x{pod=~"vllm[ab]",note="offset 5m"}[15s]) > 0 and max_over_time((rate(y[30s]))[3m:3s] offset 30s)'
    )


def test_a_name_in_another_unit_is_read_in_the_signals_unit():
    # dcgm-exporter 4.9 writes GPU utilisation as a 0-1 ratio under a new name: one more
    # alternative, scaled after the functions that commute with a factor, before a comparison
    util = metric(c.DCGM_GPU_UTIL, Selector.of(gpu="0")).over_time("avg", "5m").avg(("gpu",))
    low = str(util.lt(20))
    assert low == (
        '((avg by (gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{gpu="0"}[5m]))) or '
        '((avg by (gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL_RATIO{gpu="0"}[5m])) < 140737488355328) * 100)) < 20'
    )
    assert metric_names(low) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"}
    # counting does not depend on the unit: no factor
    assert "*" not in str(metric(c.DCGM_FB_USED).count(("gpu",)))
    # a function that does not commute with a factor gets the value in the signal's unit first
    clamped = str(metric(c.DCGM_SM_CLOCK).clamp_max(1500))
    assert "clamp_max(((DCGM_FI_DEV_SM_CLOCK_HERTZ < 140737488355328) * 1e-06), 1500)" in clamped
    # a histogram's parts keep their names: no rescaled alternative for a suffix
    assert str(metric(c.DCGM_GPU_UTIL, suffix="_bucket")) == "DCGM_FI_DEV_GPU_UTIL_bucket"
