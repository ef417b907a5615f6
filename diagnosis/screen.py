"""The first of two phases on a large fleet: clear the engines whose latency cannot matter.

The latency quantiles (TTFT, inter-token, queue time, per-token time, prefill) are the costliest
queries a diagnosis sends: a histogram of some 20 buckets per engine, rated over the whole
window, three times (the window, its baseline, its end). A check reads them only against a line
(`queue_p99 >= QUEUE_TIME_P99`, `ttft_p99 >= TTFT_P99`, `itl_p99 >= ITL_P99`, and `ttft_p99 >=
TTFT_TAIL_FLOOR` where the prompts have a long tail), or for an engine that crossed one (a tail's
shape, a step time against its baseline), or where an engine refuses requests or runs
speculative decoding. So the screen bounds each engine's p99s from above with the rollups that
kvscope's rules record every minute (`instance:...:p99_5m`, alerts/rollups.py): the p99 of a
window is at most the largest p99 of the five-minute spans that make it up (a mixture's quantile
is at most its largest part's, and histogram interpolation is linear in the counts), and its
median at least their smallest median, so a tail's shape (p99 over p50) is at most the one over
the other (the medians' rollups bound it). An engine
whose bounds all stay under SCREEN_MARGIN of their lines, that refuses nothing and runs no
speculative decoding is cleared: no check can fire on it for its latency. The second phase reads
the latency quantiles only for the instances of the rest.

Where the rules are not loaded, `auto` reads one phase (and says so in `sources`); `two` then
bounds the p99s from the rules' own expression as a subquery (as costly as one phase: for tests
that the two phases agree).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diagnosis.checks.prefill import prompt_tail
from diagnosis.measures import BY_NAME, ENTITY_LABELS, Entity, Measure, Measurements, Value, entity_key
from diagnosis.sources import SourceError
from kvscope import catalog as c
from kvscope import thresholds as t
from kvscope.durations import format_duration
from kvscope.prometheus import QueryFailed, Vector
from kvscope.promql import ANY, Expr, Selector, metric, quantile
from kvscope.thresholds import Thresholds

PHASES: tuple[str, ...] = ("auto", "one", "two")  # --phases

# read in the second phase, for the engines the screen does not clear
DEFERRED = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "queue_p99", "tpot_p50", "prefill_p99")
# `auto` screens from this many engines up; below, one phase is cheaper than two round trips
TWO_PHASES_FROM = 64
# cleared only when every five-minute p99 stayed under this share of its line: the rollups' rate
# windows do not fall exactly on the diagnosis window's edges
SCREEN_MARGIN = 0.8
# more than this share of the engines not cleared: the second phase reads the whole fleet
WHOLE_FLEET_FROM = 0.5

Key = tuple[tuple[str, str], ...]
Query = Callable[[str, float], Vector]


@dataclass(frozen=True)
class Bound:
    """A latency quantile the checks read, and the rollup that bounds it over the window: from
    above for a p99 (the largest five-minute p99), from below for a median (the smallest)."""

    measure: str
    rollup: c.Signal
    signals: tuple[c.Signal, ...]
    lines: tuple[t.Threshold, ...] = ()  # what an upper bound must stay under

    @property
    def q(self) -> float:
        return 0.5 if self.measure.endswith("_p50") else 0.99

    @property
    def how(self) -> str:
        return "min" if self.q < 0.9 else "max"


BOUNDS = (
    Bound("ttft_p99", c.ROLLUP_TTFT_P99, (c.VLLM_TTFT,), (t.TTFT_P99,)),
    Bound("itl_p99", c.ROLLUP_ITL_P99, (c.VLLM_ITL,), (t.ITL_P99,)),
    Bound("queue_p99", c.ROLLUP_QUEUE_P99, (c.VLLM_QUEUE_TIME, c.REQUEST_QUEUE_SECONDS), (t.QUEUE_TIME_P99,)),
    # the medians, from below: a tail's shape (p99 over p50) is at most the one over the other
    Bound("ttft_p50", c.ROLLUP_TTFT_P50, (c.VLLM_TTFT,)),
    Bound("itl_p50", c.ROLLUP_ITL_P50, (c.VLLM_ITL,)),
)
# an engine that refuses requests (saturation reads its TTFT's shape then) or runs speculative
# decoding (its per-token time against its step time) is read whatever its bounds
REFUSING, SPECULATING = "rejection_rate", "spec_accept"


@dataclass
class Screen:
    """The screen's outcome: the selector of the second phase (None: nothing to read) and a line
    for `sources`."""

    selector: Selector | None
    cleared: int
    engines: int
    read: int
    origin: str

    @property
    def detail(self) -> str:
        where = "the fleet" if self.selector == ANY else f"{self.read} instance(s)"
        return (
            f"two phases ({self.origin}): {self.cleared} of {self.engines} engines cleared by their p99 bounds; "
            f"latency quantiles read for {where if self.read else 'none'}"
        )


def rollups_loaded(query: Query, at: float, selector: Selector) -> int:
    """How many engines the TTFT rollup records at `at` (0: the rules are not loaded)."""
    try:
        found = query(str(metric(c.ROLLUP_TTFT_P99.name, selector).count()), at)
    except (QueryFailed, SourceError):  # a store that cannot say reads in one phase
        return 0
    return int(found[0][1]) if found and not math.isnan(found[0][1]) else 0


def bound_query(bound: Bound, window: float, selector: Selector, recorded: bool) -> str:
    """The largest five-minute p99 (the smallest median) of each engine over the window: the
    rollup where the rules record it, else the rule's own expression as a subquery at the rules'
    interval."""
    w, by = format_duration(window), ENTITY_LABELS[Entity.ENGINE]
    if recorded:
        series: Expr = metric(bound.rollup.name, selector)
        return str(series.over_time(bound.how, w).aggregate(bound.how, by))
    raw = quantile(bound.q, *bound.signals, window=c.ROLLUP_RATE_WINDOW, by=by, selector=selector)
    return str(raw.over_time(bound.how, w, step=c.ROLLUP_INTERVAL).aggregate(bound.how, by))


def screen(
    query: Query,
    m: Measurements,
    at: float,
    window: float,
    selector: Selector,
    limits: Thresholds,
    recorded: bool,
) -> Screen:
    """The engines of `m` (the first phase) that the bounds do not clear, as a selector on their
    instances."""
    engines = {entity_key(v.labels, Entity.ENGINE): v.labels for values in _engine_values(m) for v in values}
    bounds: dict[str, dict[Key, float]] = {}
    for bound in BOUNDS:
        try:
            got = query(bound_query(bound, window, selector, recorded), at)
        except (QueryFailed, SourceError):  # no bound: nothing is cleared by it
            got = []
        bounds[bound.measure] = {
            entity_key(labels, Entity.ENGINE): v for labels, v in got if not (math.isnan(v) or math.isinf(v))
        }
    flagged = {entity_key(v.labels, Entity.ENGINE) for v in m.values.get(REFUSING, []) if v.value > 0}
    flagged |= {entity_key(v.labels, Entity.ENGINE) for v in m.values.get(SPECULATING, [])}
    # a long prompt tail (read in the first phase) makes a TTFT tail past its floor head-of-line
    prompts: dict[Key, dict[str, list[Value]]] = defaultdict(dict)
    for name in ("prompt_p50", "prompt_p99"):
        for v in m.values.get(name, []):
            prompts[entity_key(v.labels, Entity.ENGINE)][name] = [v]
    long_tail = {key for key, view in prompts.items() if prompt_tail(limits, view)}

    def under(key: Key, measure: str, line: float) -> bool:
        top = bounds[measure].get(key)
        return top is not None and top < SCREEN_MARGIN * line

    def shape_under(key: Key, kind: str, ratio: t.Threshold) -> bool:
        """p99 over p50 stays under `ratio`'s line: the largest p99 over the smallest median."""
        top, low = bounds[f"{kind}_p99"].get(key), bounds[f"{kind}_p50"].get(key)
        if top is None or not low:
            return False
        return top / low < SCREEN_MARGIN * limits.value(ratio)

    def cleared(key: Key) -> bool:
        if key in flagged:
            return False
        if not all(under(key, b.measure, min(limits.value(x) for x in b.lines)) for b in BOUNDS if b.lines):
            return False
        # with a long prompt tail, a TTFT tail past its floor is head-of-line blocking when it is
        # far above its median or decode stalls behind it (checks/prefill.py): bound both shapes
        if key in long_tail and not under(key, "ttft_p99", limits.value(t.TTFT_TAIL_FLOOR)):
            return shape_under(key, "ttft", t.TTFT_TAIL_RATIO) and shape_under(key, "itl", t.ITL_STALL_RATIO)
        return True

    suspects = [labels for key, labels in engines.items() if not cleared(key)]
    origin = "rollups" if recorded else "the rules' expressions as subqueries"
    instances = sorted({labels.get("instance", "") for labels in suspects})
    if not suspects:
        return Screen(None, len(engines), len(engines), 0, origin)
    if "" in instances or len(suspects) > WHOLE_FLEET_FROM * len(engines):
        return Screen(ANY, len(engines) - len(suspects), len(engines), len(engines), origin)
    chosen = Selector.any_of("instance", instances)
    return Screen(chosen, len(engines) - len(suspects), len(engines), len(instances), origin)


def _engine_values(m: Measurements) -> list[list[Value]]:
    return [values for name, values in m.values.items() if name in BY_NAME and BY_NAME[name].entity is Entity.ENGINE]


def split(measures: Sequence[Measure]) -> tuple[list[Measure], list[Measure]]:
    """(the first phase's measures, the deferred latency quantiles)."""
    return [m for m in measures if m.name not in DEFERRED], [m for m in measures if m.name in DEFERRED]
