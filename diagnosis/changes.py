"""What changed before an incident: the load and the configuration in the window against the
baseline window before it (`--baseline`, default one window's length).

Seed 000's avalanche came from prompts 1.8x longer at the same request rate; that sentence is
what an on-call needs next to "KV cache full". The load compared is what arrived: kvscope serve
counts each request and its prompt at admission, and those counts are read where they exist.
vLLM's own request counters and prompt histograms are written when a request ends, so under
saturation they lag and lean toward the short requests that do finish; where only they exist,
the request rate is the offered load, finished requests plus the queue's growth (never below 0).
A change counts when a load signal moved by `change_ratio` either way (the prefix hit rate: by
`change_hit_points`) by more than the windows' counting noise allows (NOISE_SIGMAS,
MIN_FOR_MEAN, MIN_FOR_TAIL: a short baseline of a few dozen requests says little about a p99),
when an engine restarted (its process start time moved, or its counters reset), when its
KV-cache configuration labels differ, or when a pod serves another model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from diagnosis.checks import Context, Key, View, first, labels_of, value
from diagnosis.findings import affected
from diagnosis.measures import Entity, Value, entity_key
from kvscope import thresholds as t

# (measure, the signal's name in `changes`)
LOAD: tuple[tuple[str, str], ...] = (
    ("request_rate", "request_rate"),
    ("prompt_mean", "prompt_tokens_mean"),
    ("prompt_p99", "prompt_tokens_p99"),
    ("output_mean", "output_tokens_mean"),
    ("prefix_hit", "prefix_hit_rate"),
)

# The same load counted at arrival (kvscope serve's admission), preferred where it exists.
ARRIVALS: dict[str, str] = {
    "request_rate": "arrival_rate",
    "prompt_mean": "arrival_prompt_mean",
    "prompt_p99": "arrival_prompt_p99",
}


# A rate compared over two windows of W and B seconds moves by chance: N requests counted have a
# Poisson spread of sqrt(N). A request-rate change counts beyond NOISE_SIGMAS of that spread; a
# mean needs MIN_FOR_MEAN requests in each window, a p99 MIN_FOR_TAIL (one request in a hundred
# beyond it). Long windows of a real fleet hold thousands; a compressed drill's, a few dozen.
NOISE_SIGMAS = 3.0
MIN_FOR_MEAN = 30.0
MIN_FOR_TAIL = 100.0
NEEDS: dict[str, float] = {"prompt_mean": MIN_FOR_MEAN, "output_mean": MIN_FOR_MEAN, "prompt_p99": MIN_FOR_TAIL}


def _beyond_noise(now: float, past: float, spans: tuple[float, float]) -> bool:
    """Whether rates `now` (over the window) and `past` (over the baseline) differ by more than
    NOISE_SIGMAS of their Poisson spread."""
    window, baseline = spans
    spread = math.sqrt(max(now, 0.0) / window + max(past, 0.0) / baseline)
    return abs(now - past) > NOISE_SIGMAS * spread


def _too_few(name: str, rates: tuple[float, float] | None, spans: tuple[float, float] | None) -> bool:
    """Whether either window counted fewer requests than the signal `name` needs (NEEDS)."""
    if name not in NEEDS or rates is None or spans is None:
        return False
    return min(rates[0] * spans[0], rates[1] * spans[1]) < NEEDS[name]


# A swamped engine finishes fewer requests while as many arrive (the rest wait): the request rate
# compared is the offered load, finished requests per second plus the queue's growth per second.
QUEUE_GROWTH = "waiting_slope"


def _queue_growth(value: object) -> float:
    return float(getattr(value, "value", 0.0) or 0.0)


@dataclass
class Change:
    signal: str
    scope: dict[str, str]
    before: float | str
    after: float | str
    at: float | None = None
    where: str = ""  # the scope's name (diagnosis/scopes.py)
    ratio: float = 1.0


def changes(ctx: Context) -> list[Change]:
    """Every change on every engine, largest first."""
    out: list[Change] = []
    ratio_limit, points = ctx.limit(t.CHANGE_RATIO), ctx.limit(t.CHANGE_HIT_POINTS)
    # kvscope serve's own series carry no `engine` label: where vLLM's engines of that instance
    # have views of their own, the gateway's view is read through them (_arrived), not again
    engined = {_without_engine(labels_of(v)) for v in ctx.engines.values() if labels_of(v).get("engine")}
    spans = ctx.m.spans
    for view in ctx.engines.values():
        labels, where = labels_of(view), ctx.scope(view)
        scope = affected(labels)
        if not labels.get("engine") and _without_engine(labels) in engined:
            continue
        rates: tuple[float, float] | None = None
        for name, signal in LOAD:
            pair = _arrived(ctx, view, ARRIVALS[name]) if name in ARRIVALS else None
            if pair is None:
                now, past = first(view, name), ctx.before(view, name)
                if now is None or past is None:
                    continue
                pair = now.value, past.value
                if name == "request_rate":  # what arrives: what finished plus what joined the queue
                    pair = (
                        max(0.0, pair[0] + _queue_growth(first(view, QUEUE_GROWTH))),
                        max(0.0, pair[1] + _queue_growth(ctx.before(view, QUEUE_GROWTH))),
                    )
            a, b = pair
            if name == "request_rate":
                rates = pair
                if spans is not None and not _beyond_noise(a, b, spans):
                    continue
            if _too_few(name, rates, spans):
                continue  # too few requests in a window for its mean or tail to say anything
            if name == "prefix_hit":
                if abs(a - b) >= points:
                    out.append(Change(signal, scope, round(b, 4), round(a, 4), None, where, _ratio(a, b)))
            elif b > 0 and (a / b >= ratio_limit or a / b <= 1 / ratio_limit):
                out.append(Change(signal, scope, round(b, 3), round(a, 3), None, where, _ratio(a, b)))
        out += _restarts(ctx, view, scope, where)
        config_now, config_past = (
            _config(view),
            _config(ctx.baseline.get(entity_key(labels_of(view), Entity.ENGINE), {})),
        )
        if config_now and config_past and config_now != config_past:
            out.append(Change("cache_config", scope, config_past, config_now, None, where, 99.0))
    out += _models(ctx)
    out.sort(key=lambda c: -abs(c.ratio))
    return out


def _without_engine(labels: dict[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in labels.items() if k != "engine")


def _arrived(ctx: Context, view: View, name: str) -> tuple[float, float] | None:
    """An arrival measure (now, before) for the instance serving `view`: kvscope serve counts at
    its gateway, once per instance, so the match leaves vLLM's data-parallel `engine` label out."""
    labels = {k: v for k, v in labels_of(view).items() if k != "engine"}

    def find(values: list[Value]) -> float | None:
        for v in values:
            own = entity_key(v.labels, Entity.ENGINE)
            if own and all(labels.get(k) == val for k, val in own):
                return max(0.0, v.value)
        return None

    now, past = find(ctx.m.get(name)), find(ctx.m.baseline.get(name, []))
    return None if now is None or past is None else (now, past)


def _ratio(a: float, b: float) -> float:
    if b <= 0 or a <= 0:
        return 99.0
    return a / b if a >= b else b / a


def _config(view: View) -> str:
    values = view.get("cache_config", [])
    if not values:
        return ""
    labels = values[0].labels
    keys = ("gpu_memory_utilization", "num_gpu_blocks", "block_size", "cache_dtype")
    return ",".join(f"{k}={labels[k]}" for k in keys if k in labels)


def _restarts(ctx: Context, view: View, scope: dict[str, str], where: str) -> list[Change]:
    started, past = value(view, "start_time"), ctx.before(view, "start_time")
    if started is not None and past is not None and started > past.value + 1:
        return [Change("engine_restart", scope, round(past.value), round(started), started, where, 99.0)]
    resets = value(view, "restarts") or 0
    if resets >= 1:
        return [Change("engine_restart", scope, 0, resets, None, where, 99.0)]
    return []


def _models(ctx: Context) -> list[Change]:
    """A pod or instance that served another model in the baseline."""

    def served(views: dict[Key, View]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for view in views.values():
            labels = labels_of(view)
            where = labels.get("pod") or labels.get("instance") or ""
            if where and labels.get("model_name"):
                out.setdefault(where, set()).add(labels["model_name"])
        return out

    scope_of = {
        labels_of(v).get("pod") or labels_of(v).get("instance") or "": ctx.scope(v) for v in ctx.engines.values()
    }
    now, past = served(ctx.engines), served(ctx.baseline)
    out = []
    for where, models in now.items():
        before = past.get(where)
        if before and not (models & before):
            was, now_serving = ",".join(sorted(before)), ",".join(sorted(models))
            out.append(Change("model", {"pod": where}, was, now_serving, None, scope_of.get(where, where), 99.0))
    return out


def sentence(change: Change, others: list[Change]) -> str:
    """One clause: 'prompts 1.8x longer at the same request rate'."""
    if change.signal == "engine_restart":
        return "the engine restarted"
    if change.signal == "cache_config":
        return f"the KV-cache configuration changed ({change.before} -> {change.after})"
    if change.signal == "model":
        return f"the model changed ({change.before} -> {change.after})"
    assert isinstance(change.before, float | int) and isinstance(change.after, float | int)
    if change.signal == "prefix_hit_rate":
        return f"prefix hit rate {change.before:.0%} -> {change.after:.0%}"
    up = change.after > change.before
    factor = f"{change.ratio:.1f}x"
    longer = "longer" if up else "shorter"
    what = {
        "prompt_tokens_mean": f"prompts {factor} {longer} ({change.before:,.0f} -> {change.after:,.0f} tokens)",
        "prompt_tokens_p99": f"p99 prompt {factor} {longer} ({change.before:,.0f} -> {change.after:,.0f} tokens)",
        "output_tokens_mean": f"outputs {factor} {longer} ({change.before:,.0f} -> {change.after:,.0f} tokens)",
        "request_rate": (
            f"request rate {factor} {'higher' if up else 'lower'} ({change.before:.2f} -> {change.after:.2f}/s)"
        ),
    }[change.signal]
    if change.signal != "request_rate" and not any(
        o.signal == "request_rate" and o.where == change.where for o in others
    ):
        what += " at the same request rate"
    return what
