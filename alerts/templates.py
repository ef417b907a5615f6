"""The few Go-template constructs kvscope's alert annotations use, rendered in Python, so the
promtool tests can state the exact annotations Prometheus must produce (promtool then checks
this renderer against Prometheus' own)."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def _format(value: float, pipe: str) -> str:
    pipe = pipe.strip()
    if pipe == "humanizePercentage":
        return "%.4g%%" % (value * 100)  # Go's fmt, mirrored
    match = re.fullmatch(r'printf\s+"([^"]+)"', pipe)
    if match:
        return match.group(1) % value
    raise ValueError(f"unsupported template pipe: {pipe!r}")


def render(template: str, labels: dict[str, str], value: float, external_url: str = "") -> str:
    def one(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr == "$externalURL":
            return external_url
        if expr.startswith("$labels."):
            return labels.get(expr.removeprefix("$labels."), "")
        if expr.startswith("or "):  # Go's `or`: the first non-empty argument (labels only here)
            names = [a.removeprefix("$labels.") for a in expr.split()[1:] if a.startswith("$labels.")]
            return next((labels[n] for n in names if labels.get(n)), "")
        if expr.startswith("$value"):
            _, _, pipe = expr.partition("|")
            return _format(value, pipe) if pipe else repr(value)
        raise ValueError(f"unsupported template expression: {expr!r}")

    return _TOKEN.sub(one, template)
