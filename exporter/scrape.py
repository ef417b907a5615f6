"""Fetching and parsing other exporters' pages (vLLM, kvscope serve, dcgm-exporter).

Parsing is prometheus_client's own parser. A page that does not answer in time, or does not
parse, costs only that target's series: the result says why, and the caller counts it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.core import Metric

from kvscope.promtext import parse_families


@dataclass
class ScrapeResult:
    target: str
    up: bool
    seconds: float
    families: list[Metric] = field(default_factory=list)
    error: str = ""
    parse_error: bool = False


def parse_page(text: str) -> list[Metric]:
    """Every family of a page, `_created` samples dropped. Raises on a malformed page."""
    families = parse_families(text)
    for family in families:
        family.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return families


def scrape(client: httpx.Client, url: str, timeout: float, headers: Mapping[str, str] | None = None) -> ScrapeResult:
    started = time.perf_counter()
    try:
        response = client.get(url, timeout=timeout, headers=dict(headers or {}))
        response.raise_for_status()
        text = response.text
    except httpx.HTTPError as exc:
        return ScrapeResult(url, False, time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
    try:
        families = parse_page(text)
    except Exception as exc:  # the parser raises ValueError, TypeError, IndexError, ... on junk
        return ScrapeResult(
            url,
            False,
            time.perf_counter() - started,
            error=f"unparseable page: {exc}",
            parse_error=True,
        )
    return ScrapeResult(url, True, time.perf_counter() - started, families)


def relabel(family: Metric, extra: Mapping[str, str]) -> Metric:
    """A copy of `family` with `extra` labels on every sample (existing ones become exported_*)."""
    copy = Metric(family.name, family.documentation, family.type, family.unit)
    for s in family.samples:
        labels = dict(s.labels)
        for key, value in extra.items():
            if key in labels:
                labels["exported_" + key] = labels[key]
            labels[key] = value
        copy.add_sample(s.name, labels, s.value, s.timestamp)
    return copy
