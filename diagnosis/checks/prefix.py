"""prefix_cache_miss: the prefix-cache hit rate fell (below 0.75 from above it, or to under
half of what it was): every request prefills more (seed 004: look at the cache first)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, one_finding, value
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    floor, drop = ctx.limit(t.PREFIX_HIT_FLOOR), ctx.limit(t.PREFIX_HIT_DROP)

    def judge(view: View) -> Hit | None:
        recent, before = value(view, "prefix_hit_recent"), value(view, "prefix_hit_before")
        if recent is None or before is None or not (value(view, "prefix_queries_recent") or 0) > 0:
            return None
        fell_below = before >= floor > recent
        halved = before >= 0.2 and recent < before * drop
        return Hit(view, before - recent) if fell_below or halved else None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view = worst.view
        return Parts(
            Severity.WARNING,
            0.6 + min(0.3, worst.score / 2),
            f"prefix-cache hit rate on {names(hits)} fell from {value(view, 'prefix_hit_before'):.0%} to "
            f"{value(view, 'prefix_hit_recent'):.0%}: shared prompt prefixes stopped being shared, so each "
            "request prefills more.",
            [evidence(view, "prefix_hit_recent", floor), evidence(view, "prefix_hit_before")],
            [
                "find what made shared prefixes differ: a timestamp, request id or user name placed before the "
                "shared system prompt, or a template change; keep the shared part first and byte-identical",
                "keep --enable-prefix-caching on, and route a session's requests to the same replica "
                "(prefix-aware routing)",
                "if the traffic mix changed for good, plan capacity for the extra prefill (kvscope plan)",
            ],
        )

    return one_finding("prefix_cache_miss", ctx.engines.values(), judge, describe)
