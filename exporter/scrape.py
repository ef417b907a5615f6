"""Fetching and parsing other exporters' pages (vLLM, kvscope serve, dcgm-exporter).

Fetching is kvscope/pages.py's: a total wall-clock deadline, a byte cap, every target at once,
credentials in the header and never in the `target` label. Parsing is prometheus_client's own
parser, linear in the page's size. A page that does not answer in time, or does not parse,
costs only that target's series: the result says why, and the caller counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from kvscope.pages import DEFAULT_MAX_BYTES, Fetched, Target, fetch_all
from kvscope.promtext import parse_families

__all__ = ["DEFAULT_MAX_BYTES", "ScrapeResult", "Target", "parse_page", "relabel", "scrape", "scrape_all"]


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
    return parse_families(text, created=False)


def _parsed(fetched: Fetched) -> ScrapeResult:
    if fetched.body is None:
        return ScrapeResult(fetched.url, False, fetched.seconds, error=fetched.error)
    try:
        families = parse_page(fetched.body.decode("utf-8", "replace"))
    except Exception as exc:  # the parser raises ValueError, TypeError, IndexError, ... on junk
        return ScrapeResult(fetched.url, False, fetched.seconds, error=f"unparseable page: {exc}", parse_error=True)
    return ScrapeResult(fetched.url, True, fetched.seconds, families)


def scrape_all(targets: Sequence[Target], deadline: float, max_bytes: int = DEFAULT_MAX_BYTES) -> list[ScrapeResult]:
    """Every target at once (kvscope/pages.py's bounds), each page parsed."""
    return [_parsed(f) for f in fetch_all(targets, deadline, max_bytes)]


def scrape(target: Target | str, deadline: float, max_bytes: int = DEFAULT_MAX_BYTES) -> ScrapeResult:
    """One target (see scrape_all)."""
    return scrape_all([target if isinstance(target, Target) else Target.of(target)], deadline, max_bytes)[0]


def relabel(family: Metric, extra: Mapping[str, str]) -> Metric:
    """A copy of `family` with `extra` labels on every sample (existing ones become exported_*)."""
    copy = Metric(family.name, family.documentation, family.type, family.unit)
    copy.samples = [Sample(s.name, _relabelled(s.labels, extra), s.value, s.timestamp) for s in family.samples]
    return copy


def _relabelled(labels: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    if extra.keys().isdisjoint(labels):  # the usual case: one merge, labels in the same order
        return {**labels, **extra}
    out = dict(labels)
    for key, value in extra.items():
        if key in out:
            out["exported_" + key] = out[key]
        out[key] = value
    return out
