"""The one PromQL builder, and a small reader.

Every PromQL expression kvscope writes (alert rules, recording rules, dashboard panels, the
diagnosis' measures, the drill's queries) is built here, so label values are escaped, a
metric's older names are tried with `or`, and parentheses are right, in one place.

An `Expr` holds one alternative per metric name: `metric(c.VLLM_KV_CACHE_USAGE)` stands for
the current name and its pre-rename alias. Functions and
aggregations apply to each alternative; a binary operation pairs the alternatives of two
expressions when both have the same number of them (hits / queries of the same vintage), and
otherwise first joins each side's alternatives with `or`. `str()` joins them with `or`.

    kv = metric(c.VLLM_KV_CACHE_USAGE, Selector.of(namespace="prod")).max(by=("instance",))
    str(kv.ge(0.9))
    # ((max by (instance) (NAME{namespace="prod"})) or (max by (instance) (ALIAS{namespace="prod"}))) >= 0.9

A measurement renamed into another unit (dcgm-exporter 4.9's SM clock in Hz for 4.8's in MHz)
is one more alternative with a scale: functions that commute with
a positive factor (rates, `*_over_time`, sums, maxima) keep it pending, and it is applied (`* 1e-06`)
before anything that compares, clamps or combines, so every alternative is in the signal's unit;
counting functions drop it. A fleet mid-upgrade reads as one: `A or (B * k)` per series.

`metric_names(expr)` reads back which metric names an expression selects (tests use it to
prove that rules and dashboards name only catalogued metrics).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kvscope.catalog import DCGM_BLANK_FROM, Signal
from kvscope.durations import format_duration, parse_duration

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A range or step is a Prometheus duration, or a Grafana variable ($__rate_interval, ${window}).
_VARIABLE = re.compile(r"\$\{?\w+\}?")
Op = Literal["=", "!=", "=~", "!~"]
_OPS: tuple[Op, ...] = ("=~", "!~", "!=", "=")  # longest first, for parsing
Kind = Literal["selector", "shifted", "range", "atom", "binary"]  # shifted: a selector with an offset


def escape(value: str) -> str:
    """A label value as a double-quoted PromQL string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def regex_any(values: Iterable[object]) -> str:
    """A regular expression matching exactly one of `values` (for `=~`)."""
    return "|".join(re.escape(str(v)) for v in values)


_NOT_RE2 = re.compile(r"\(\?[=!<]|\\[1-9]")  # lookaround and backreferences: RE2 has neither


def _check_regex(pattern: str) -> None:
    """A regular expression Prometheus (RE2) accepts; ValueError naming the problem."""
    if _NOT_RE2.search(pattern):
        raise ValueError(f"regex {pattern!r}: lookarounds and backreferences are not RE2 (Prometheus)")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"regex {pattern!r} does not compile: {exc}") from None


def _label(name: str) -> str:
    if not LABEL_NAME.fullmatch(name):
        raise ValueError(f"not a label name: {name!r}")
    return name


def _window(text: str) -> str:
    if _VARIABLE.fullmatch(text):
        return text
    try:
        parse_duration(text)
    except ValueError:
        raise ValueError(f"not a range: {text!r} (use a duration such as 5m)") from None
    if text != text.strip() or "." in text:
        raise ValueError(f"not a range: {text!r} (PromQL wants whole units, e.g. 90s)")
    return text


def number(value: float) -> str:
    """A number as PromQL writes it (12 significant digits, no float noise)."""
    if value != value:  # NaN
        return "NaN"
    if value == int(value) and abs(value) < 1e16:  # whole numbers exactly (2^47, byte counts)
        return str(int(value))
    return f"{value:.12g}"


@dataclass(frozen=True)
class Matcher:
    name: str
    op: Op
    value: str

    def __post_init__(self) -> None:
        _label(self.name)
        if self.op not in _OPS:
            raise ValueError(f"not a label matcher operator: {self.op!r}")
        if self.op in ("=~", "!~"):
            _check_regex(self.value)

    def __str__(self) -> str:
        return f"{self.name}{self.op}{escape(self.value)}"


@dataclass(frozen=True)
class Selector:
    """Label matchers, as in `{namespace="prod",pod=~"vllm-.*"}`."""

    matchers: tuple[Matcher, ...] = ()

    @classmethod
    def of(cls, **equal: str) -> Selector:
        return cls(tuple(Matcher(k, "=", v) for k, v in equal.items()))

    @classmethod
    def parse(cls, text: str) -> Selector:
        """A user's selector (`{a="b", c=~"d"}`, braces optional); ValueError naming what is wrong."""
        body = text.strip()
        if body.startswith("{"):
            if not body.endswith("}"):
                raise ValueError(f"selector {text!r}: no closing brace")
            body = body[1:-1]
        matchers: list[Matcher] = []
        pos = 0
        while True:
            pos = _skip(body, pos)
            if pos >= len(body):
                break
            name = LABEL_NAME.match(body, pos)
            if not name:
                raise ValueError(f"selector {text!r}: expected a label name at {body[pos:]!r}")
            pos = _skip(body, name.end())
            op = next((o for o in _OPS if body.startswith(o, pos)), None)
            if op is None:
                raise ValueError(f"selector {text!r}: expected =, !=, =~ or !~ after {name.group()!r}")
            value, pos = _string(body, _skip(body, pos + len(op)), text)
            if name.group() == "__name__":
                raise ValueError(f"selector {text!r}: choose series by label, not by __name__")
            matchers.append(Matcher(name.group(), op, value))
            pos = _skip(body, pos)
            if pos < len(body):
                if body[pos] != ",":
                    raise ValueError(f"selector {text!r}: expected ',' at {body[pos:]!r}")
                pos += 1
        return cls(tuple(matchers))

    @classmethod
    def any_of(cls, name: str, values: Iterable[object]) -> Selector:
        """`name` equal to one of `values` (a `=~` of the escaped alternatives)."""
        return cls((Matcher(name, "=~", regex_any(values)),))

    def where(self, name: str, op: Op, value: str) -> Selector:
        return Selector((*self.matchers, Matcher(name, op, value)))

    def __and__(self, other: Selector) -> Selector:
        return Selector((*self.matchers, *other.matchers))

    def __bool__(self) -> bool:
        return bool(self.matchers)

    def __str__(self) -> str:
        return "{" + ",".join(str(m) for m in self.matchers) + "}" if self.matchers else ""


ANY = Selector()  # no matchers


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _string(body: str, pos: int, text: str) -> tuple[str, int]:
    """A quoted PromQL string at `pos`: its value and the position after it."""
    if pos >= len(body) or body[pos] not in "\"'`":
        raise ValueError(f"selector {text!r}: label values must be quoted")
    quote, i = body[pos], pos + 1
    out: list[str] = []
    escapes = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    while i < len(body):
        ch = body[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\" and quote != "`" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(escapes.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    raise ValueError(f"selector {text!r}: unterminated string")


# Functions and aggregations through which a pending unit factor passes unchanged (they commute
# with multiplying by a positive number), and those whose result does not depend on it.
_LINEAR = frozenset(
    {
        "rate",
        "irate",
        "increase",
        "deriv",
        "delta",
        "idelta",
        "max_over_time",
        "min_over_time",
        "avg_over_time",
        "last_over_time",
        "sum_over_time",
        "quantile_over_time",
        "sum",
        "max",
        "min",
        "avg",
        "topk",
        "bottomk",
        "quantile",
        "stddev",
    }
)
_UNSCALED = frozenset(
    {"count_over_time", "present_over_time", "changes", "resets", "count", "group", "absent", "absent_over_time"}
)


@dataclass(frozen=True)
class Expr:
    """A PromQL expression: one alternative per metric name (see the module docstring), each with
    the factor still to apply to read it in the signal's unit (1 where none)."""

    alts: tuple[str, ...]
    kind: Kind = "atom"
    scales: tuple[float, ...] = ()

    def _scale(self, i: int) -> float:
        return self.scales[i] if i < len(self.scales) else 1.0

    def _applied(self) -> tuple[str, ...]:
        """The alternatives with their factors applied (each in the signal's unit). A rescaled
        reading at or above DCGM's lowest blank sentinel (2^47) is a blank, not a reading, in every
        base unit there is (128 TiB of memory, 140 THz, 4,000 years of a GPU's energy): it is
        dropped before the factor would hide it among real values."""
        return tuple(
            a if self._scale(i) == 1.0 else f"({a} < {number(DCGM_BLANK_FROM)}) * {number(self._scale(i))}"
            for i, a in enumerate(self.alts)
        )

    @property
    def _scaled(self) -> bool:
        return any(k != 1.0 for k in self.scales)

    def __str__(self) -> str:
        alts = self._applied()
        if len(alts) == 1:
            return alts[0]
        return " or ".join(f"({a})" for a in alts)

    # --- shape ----------------------------------------------------------------------------
    def _map(self, render: Callable[[str], str], kind: Kind = "atom", scaling: str = "apply") -> Expr:
        """`render` on each alternative; its factor kept pending ("keep"), applied first
        ("apply", for anything that does not commute with it) or dropped ("drop", counting)."""
        if scaling == "keep" or not self._scaled:
            return Expr(tuple(render(a) for a in self.alts), kind, self.scales)
        if scaling == "drop":
            return Expr(tuple(render(a) for a in self.alts), kind)
        return Expr(
            tuple(render(f"({a})" if k != a else a) for a, k in zip(self._applied(), self.alts, strict=True)), kind
        )

    def collapse(self) -> Expr:
        """One alternative: the alternatives joined with `or`."""
        if len(self.alts) == 1 and not self._scaled:
            return self
        return Expr((str(self),), "binary")

    def _operand(self) -> tuple[str, ...]:
        scaled = self._applied()
        return tuple(
            f"({a})" if self.kind == "binary" or a != raw else a for a, raw in zip(scaled, self.alts, strict=True)
        )

    # --- ranges, offsets --------------------------------------------------------------------
    def range(self, window: str, step: str | None = None) -> Expr:
        """`x[window]` for a selector; a subquery `(x)[window:step]` for anything else."""
        window = _window(window)
        if self.kind == "selector" and step is None:
            return self._map(lambda a: f"{a}[{window}]", "range", "keep")
        if self.kind == "range":
            raise ValueError("a range of a range")
        if self.kind == "shifted":
            raise ValueError("the range goes before the offset: x[5m] offset 1m")
        step_text = _window(step) if step else ""
        return self._map(lambda a: f"({a})[{window}:{step_text}]", "range")

    def offset(self, shift: str) -> Expr:
        if self.kind not in ("selector", "range"):
            raise ValueError("offset applies to a selector, a range or a subquery")
        shift = _window(shift)
        return self._map(lambda a: f"{a} offset {shift}", "shifted" if self.kind == "selector" else self.kind, "keep")

    # --- functions ------------------------------------------------------------------------
    def fn(self, name: str, *args: str, first: Sequence[str] = ()) -> Expr:
        """`name(first..., x, args...)`; x is this expression."""
        head = "".join(a + ", " for a in first)
        rest = "".join(", " + a for a in args)
        scaling = "keep" if name in _LINEAR else "drop" if name in _UNSCALED else "apply"
        return self._map(lambda a: f"{name}({head}{a}{rest})", scaling=scaling)

    def _over(self, name: str, window: str | None, step: str | None = None) -> Expr:
        source = self if window is None else self.range(window, step)
        if source.kind != "range":
            raise ValueError(f"{name} needs a range")
        return source.fn(name)

    def rate(self, window: str | None = None) -> Expr:
        return self._over("rate", window)

    def irate(self, window: str | None = None) -> Expr:
        return self._over("irate", window)

    def increase(self, window: str | None = None) -> Expr:
        return self._over("increase", window)

    def increase_from_zero(self, window: str) -> Expr:
        """Per series, `increase()` over the window, and for a counter born inside it its value
        (it counts from zero: increase() gives 0 for one that appears at 1 and stays there)."""
        if self.kind != "selector":
            raise ValueError("increase_from_zero needs a selector")
        return self.unless(self.offset(window)).binop("or", self.increase(window))

    def deriv(self, window: str | None = None) -> Expr:
        return self._over("deriv", window)

    def resets(self, window: str | None = None) -> Expr:
        return self._over("resets", window)

    def changes(self, window: str | None = None) -> Expr:
        return self._over("changes", window)

    def over_time(self, how: str, window: str | None = None, step: str | None = None) -> Expr:
        """`max_over_time(x[window])` and friends (`how` = max, min, avg, last, sum, count)."""
        return self._over(f"{how}_over_time", window, step)

    def clamp_max(self, limit: float) -> Expr:
        return self.fn("clamp_max", number(limit))

    def clamp_min(self, limit: float) -> Expr:
        return self.fn("clamp_min", number(limit))

    # --- aggregation ----------------------------------------------------------------------
    def aggregate(self, op: str, by: Sequence[str] | None = None, without: Sequence[str] | None = None) -> Expr:
        if by is not None and without is not None:
            raise ValueError("by or without, not both")
        grouping = ""
        if by is not None:
            grouping = f" by ({', '.join(_label(x) for x in by)})"
        elif without is not None:
            grouping = f" without ({', '.join(_label(x) for x in without)})"
        scaling = "keep" if op in _LINEAR else "drop" if op in _UNSCALED else "apply"
        return self._map(lambda a: f"{op}{grouping} ({a})", scaling=scaling)

    def sum(self, by: Sequence[str] | None = None) -> Expr:
        return self.aggregate("sum", by)

    def max(self, by: Sequence[str] | None = None) -> Expr:
        return self.aggregate("max", by)

    def min(self, by: Sequence[str] | None = None) -> Expr:
        return self.aggregate("min", by)

    def avg(self, by: Sequence[str] | None = None) -> Expr:
        return self.aggregate("avg", by)

    def count(self, by: Sequence[str] | None = None) -> Expr:
        return self.aggregate("count", by)

    # --- binary operations ----------------------------------------------------------------
    def binop(
        self,
        op: str,
        other: Expr | float,
        *,
        on: Sequence[str] | None = None,
        ignoring: Sequence[str] | None = None,
        group_left: Sequence[str] | None = None,
        group_right: Sequence[str] | None = None,
        bool_: bool = False,
    ) -> Expr:
        """`self op other` with vector matching; see the module docstring for alternatives."""
        right = other if isinstance(other, Expr) else Expr((number(other),))
        modifiers = " bool" if bool_ else ""
        if on is not None:
            modifiers += f" on ({', '.join(_label(x) for x in on)})"
        if ignoring is not None:
            modifiers += f" ignoring ({', '.join(_label(x) for x in ignoring)})"
        if group_left is not None:
            modifiers += f" group_left ({', '.join(_label(x) for x in group_left)})"
        if group_right is not None:
            modifiers += f" group_right ({', '.join(_label(x) for x in group_right)})"
        left = self
        if not (len(left.alts) == len(right.alts) > 1):
            left, right = left.collapse(), right.collapse()
        pairs = zip(left._operand(), right._operand(), strict=True)
        return Expr(tuple(f"{a} {op}{modifiers} {b}" for a, b in pairs), "binary")

    def __add__(self, other: Expr | float) -> Expr:
        return self.binop("+", other)

    def __sub__(self, other: Expr | float) -> Expr:
        return self.binop("-", other)

    def __mul__(self, other: Expr | float) -> Expr:
        return self.binop("*", other)

    def __truediv__(self, other: Expr | float) -> Expr:
        return self.binop("/", other)

    def __rsub__(self, other: float) -> Expr:
        return Expr((number(other),)).binop("-", self)

    def __rtruediv__(self, other: float) -> Expr:
        return Expr((number(other),)).binop("/", self)

    def gt(self, other: Expr | float, **matching: Any) -> Expr:
        return self.binop(">", other, **matching)

    def ge(self, other: Expr | float, **matching: Any) -> Expr:
        return self.binop(">=", other, **matching)

    def lt(self, other: Expr | float, **matching: Any) -> Expr:
        return self.binop("<", other, **matching)

    def le(self, other: Expr | float, **matching: Any) -> Expr:
        return self.binop("<=", other, **matching)

    def eq(self, other: Expr | float, **matching: Any) -> Expr:
        return self.binop("==", other, **matching)

    def and_(self, other: Expr, **matching: Any) -> Expr:
        return self.collapse().binop("and", other.collapse(), **matching)

    def or_(self, other: Expr, **matching: Any) -> Expr:
        return self.collapse().binop("or", other.collapse(), **matching)

    def unless(self, other: Expr, **matching: Any) -> Expr:
        return self.binop("unless", other, **matching)


# --- constructors -------------------------------------------------------------------------


def _names(what: Signal | str) -> tuple[str, ...]:
    names = what.names if isinstance(what, Signal) else (what,)
    for name in names:
        if not METRIC_NAME.fullmatch(name):
            raise ValueError(f"not a metric name: {name!r}")
    return names


def le(bound: float) -> Matcher:
    """`le` for a bucket bound, as prometheus_client (5.0) or an older exporter (5) wrote it."""
    return Matcher("le", "=~", regex_any(sorted({repr(float(bound)), f"{bound:g}"})))


def metric(what: Signal | str, selector: Selector | None = None, suffix: str = "") -> Expr:
    """A signal's series under each of its names (current first), e.g. `suffix="_bucket"`."""
    sel = str(selector or "")
    names = _names(what)
    alts = [f"{name}{suffix}{sel}" for name in names]
    scales = [1.0] * len(names)
    if isinstance(what, Signal) and not suffix:  # a histogram's parts keep their own units
        for other in what.rescaled:
            if not METRIC_NAME.fullmatch(other.name):
                raise ValueError(f"not a metric name: {other.name!r}")
            alts.append(f"{other.name}{sel}")
            scales.append(other.factor)
    return Expr(tuple(alts), "selector", tuple(scales) if any(k != 1.0 for k in scales) else ())


def metrics(*signals: Signal, selector: Selector | None = None, suffix: str = "") -> Expr:
    """Several signals as alternatives of one expression, in order (a fallback chain)."""
    return either(*(metric(s, selector, suffix) for s in signals))


def either(*exprs: Expr) -> Expr:
    """The alternatives of several expressions, in order (`A or B or ...`)."""
    kinds = {e.kind for e in exprs}
    alts = tuple(a for e in exprs for a in e.alts)
    scales = tuple(e._scale(i) for e in exprs for i in range(len(e.alts)))
    kind = kinds.pop() if len(kinds) == 1 else "binary"
    return Expr(alts, kind, scales if any(k != 1.0 for k in scales) else ())


def scalar(value: float) -> Expr:
    return Expr((number(value),))


def vector(value: float) -> Expr:
    return Expr((f"vector({number(value)})",))


def histogram_quantile(q: float, buckets: Expr, window: str, by: Sequence[str] = ()) -> Expr:
    """`histogram_quantile(q, sum by (le, by) (rate(buckets[window])))` per alternative."""
    return buckets.rate(window).sum(by=("le", *by)).fn("histogram_quantile", first=(number(q),))


def quantile(q: float, *signals: Signal, window: str, by: Sequence[str] = (), selector: Selector | None = None) -> Expr:
    """Per-entity quantile of one or more histogram signals (tried in order)."""
    return histogram_quantile(q, metrics(*signals, selector=selector, suffix="_bucket"), window, by)


def histogram_mean(signal: Signal, window: str, by: Sequence[str] = (), selector: Selector | None = None) -> Expr:
    """Mean observation over the window: rate of _sum / rate of _count."""
    total = metric(signal, selector, "_sum").rate(window).sum(by=by)
    count = metric(signal, selector, "_count").rate(window).sum(by=by)
    return total / count


def label_values(series: Expr, label: str) -> str:
    """Grafana's `label_values(metric{...}, label)` for a query variable. A selector under several
    names (a renamed field, 4.8's and 4.9's) becomes one selector over all of them, so the picker
    lists every node whichever name its exporter writes."""
    if series.kind == "selector" and len(series.alts) > 1:
        names, matchers = [], None
        for alt in series.alts:
            name, _, rest = alt.partition("{")
            names.append(name)
            matchers = rest.removesuffix("}") if matchers is None else matchers
        inner = f'__name__=~"{regex_any(names)}"' + (f",{matchers}" if matchers else "")
        return f"label_values({{{inner}}}, {_label(label)})"
    return f"label_values({series.alts[0]}, {_label(label)})"


# --- rewriting ------------------------------------------------------------------------------

_RANGE = re.compile(r"\[([0-9a-z]+)(?::([0-9a-z]+))?\]")
_OFFSET = re.compile(r"\boffset\s+([0-9a-z]+)")


def scale_durations(expr: str, speedup: float, min_range: float = 0.0, min_step: float = 0.0) -> str:
    """An expression with every range, subquery step and offset divided by `speedup` (the drill
    runs the generated rules on a faster clock); ranges and steps stay at least the minimums."""

    def one_range(m: re.Match[str]) -> str:
        window = format_duration(max(parse_duration(m.group(1)) / speedup, min_range))
        if m.group(2) is None:
            return f"[{window}]"
        return f"[{window}:{format_duration(max(parse_duration(m.group(2)) / speedup, min_step))}]"

    strings: list[str] = []  # label values are left alone: `pod=~"vllm[ab]"` is no range

    def hide(m: re.Match[str]) -> str:
        strings.append(m.group(0))
        return f'"{len(strings) - 1}"'

    expr = re.sub(r'"(?:[^"\\]|\\.)*"', hide, expr)
    expr = _RANGE.sub(one_range, expr)
    expr = _OFFSET.sub(lambda m: f"offset {format_duration(parse_duration(m.group(1)) / speedup)}", expr)
    return re.sub(r'"(\d+)"', lambda m: strings[int(m.group(1))], expr)


# --- the reader ---------------------------------------------------------------------------

_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg", "avg_over_time", "bottomk", "ceil", "changes", "clamp",
    "clamp_max", "clamp_min", "count", "count_over_time", "count_values", "day_of_month", "day_of_week",
    "delta", "deriv", "exp", "floor", "group", "histogram_quantile", "holt_winters", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "label_values", "last_over_time", "ln", "log10",
    "log2", "max", "max_over_time", "min", "min_over_time", "minute", "month", "predict_linear",
    "present_over_time", "quantile", "quantile_over_time", "rate", "resets", "round", "scalar", "sgn",
    "sort", "sort_desc", "sqrt", "stddev", "stddev_over_time", "stdvar", "sum", "sum_over_time", "time",
    "timestamp", "topk", "vector", "year",
}  # fmt: skip
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "inf", "nan",
}  # fmt: skip
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (label matchers, groupings, strings, durations,
    functions and Grafana variables set aside)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations, subqueries
    text = _GROUPING.sub("", text)
    text = re.sub(r"\boffset\s+\w+", "", text)
    text = re.sub(r"\$\{?\w+\}?", "0", text)  # Grafana variables
    text = re.sub(r",\s*\w+\)", ")", text) if text.startswith("label_values(") else text
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
