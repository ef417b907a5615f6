"""prefix_cache_miss: the prefix-cache hit rate fell (below 0.75 from above it, or to under
half of what it was): every request prefills more (seed 004: look at the cache first)."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.engines.values():
        recent, before = value(view, "prefix_hit_recent"), value(view, "prefix_hit_before")
        if recent is None or before is None or not (value(view, "prefix_queries_recent") or 0) > 0:
            continue
        fell_below = before >= t.PREFIX_HIT_FLOOR.value > recent
        halved = before >= 0.2 and recent < before * t.PREFIX_HIT_DROP.value
        if fell_below or halved:
            hits.append((view, before - recent))
    if not hits:
        return None
    view, drop = max(hits, key=lambda h: h[1])
    names = ", ".join(describe(labels_of(v)) for v, _ in hits)
    confidence = 0.6 + min(0.3, drop / 2)
    return Finding(
        id="prefix_cache_miss",
        severity=Severity.WARNING,
        confidence=confidence,
        summary=f"prefix-cache hit rate on {names} fell from {value(view, 'prefix_hit_before'):.0%} to "
        f"{value(view, 'prefix_hit_recent'):.0%}: shared prompt prefixes stopped being shared, so each "
        "request prefills more.",
        affected=[affected(labels_of(v)) for v, _ in hits],
        evidence=[
            evidence(view, "prefix_hit_recent", t.PREFIX_HIT_FLOOR),
            evidence(view, "prefix_hit_before"),
        ],
        remediation=[
            "find what made shared prefixes differ: a timestamp, request id or user name placed before the shared "
            "system prompt, or a template change; keep the shared part first and byte-identical",
            "keep --enable-prefix-caching on, and route a session's requests to the same replica "
            "(prefix-aware routing)",
            "if the traffic mix changed for good, plan capacity for the extra prefill (kvscope plan)",
        ],
    )
