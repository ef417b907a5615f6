"""prefix_cache_miss: the prefix-cache hit rate fell (below 0.75 from above it, or to under
half of what it was): every request prefills more (seed 004: look at the cache first)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, first, names, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    floor, drop = ctx.limit(t.PREFIX_HIT_FLOOR), ctx.limit(t.PREFIX_HIT_DROP)

    def judge(view: View) -> Hit | None:
        if not (value(view, "prefix_queries_recent") or 0) > 0:
            return None
        # against the baseline window before this one (an incident older than the window is still
        # seen), else the end of the window against its start
        pairs = []
        baseline, now = ctx.before(view, "prefix_hit"), first(view, "prefix_hit")
        if baseline is not None and now is not None:
            pairs.append((now.value, baseline.value, "prefix_hit", baseline))
        recent, before = first(view, "prefix_hit_recent"), first(view, "prefix_hit_before")
        if recent is not None and before is not None:
            pairs.append((recent.value, before.value, "prefix_hit_recent", before))
        hits = [
            Hit(view, 1 - after_ / before_, {"now": name, "was": was, "after": after_, "before": before_})
            for after_, before_, name, was in pairs
            if (before_ >= floor > after_) or (before_ >= 0.2 and after_ < before_ * drop)  # fell below, or halved
        ]
        return max(hits, key=lambda h: h.score) if hits else None  # the sharper of the two comparisons

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view, f = worst.view, worst.facts
        return Parts(
            Severity.WARNING,
            f"prefix-cache hit rate on {names(hits)} fell from {f['before']:.0%} to "
            f"{f['after']:.0%}: shared prompt prefixes stopped being shared, so each "
            "request prefills more.",
            [
                evidence(view, f["now"], min(floor, f["before"] * drop), above=False),
                Evidence(f["was"].query, round(f["was"].value, 6), None, dict(f["was"].labels)),
            ],
            [
                "find what made shared prefixes differ: a timestamp, request id or user name placed before the "
                "shared system prompt, or a template change; keep the shared part first and byte-identical",
                "keep --enable-prefix-caching on, and route a session's requests to the same replica "
                "(prefix-aware routing)",
                "if the traffic mix changed for good, plan capacity for the extra prefill (kvscope plan)",
            ],
        )

    return scoped_findings("prefix_cache_miss", ctx.engines.values(), judge, describe, ctx)
