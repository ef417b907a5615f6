"""A small PromQL reader: which metric names an expression selects (for checking that rules and
dashboards name only catalog metrics). Label matchers, grouping lists, strings, durations and
functions are set aside; what is left are the selected series' names."""

from __future__ import annotations

import re

_FUNCTIONS = {
    "abs",
    "absent",
    "absent_over_time",
    "avg",
    "avg_over_time",
    "bottomk",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "count",
    "count_over_time",
    "count_values",
    "day_of_month",
    "day_of_week",
    "delta",
    "deriv",
    "exp",
    "floor",
    "group",
    "histogram_quantile",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "minute",
    "month",
    "predict_linear",
    "present_over_time",
    "quantile",
    "quantile_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev",
    "stddev_over_time",
    "stdvar",
    "sum",
    "sum_over_time",
    "time",
    "timestamp",
    "topk",
    "vector",
    "year",
}
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "inf",
    "nan",
}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def metric_names(expr: str) -> set[str]:
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations, subqueries
    text = _GROUPING.sub("", text)
    text = re.sub(r"\boffset\s+\w+", "", text)
    text = re.sub(r"\$\{?\w+\}?", "0", text)  # Grafana variables
    names = set()
    for match in _NAME.finditer(text):
        name = match.group(1)
        after = text[match.end() :].lstrip()
        if name in _KEYWORDS or (name in _FUNCTIONS and after.startswith("(")):
            continue
        if re.fullmatch(r"\d+(\.\d+)?e\d*", name) or re.fullmatch(r"\d+[smhdwy]", name):
            continue
        names.add(name)
    return names
