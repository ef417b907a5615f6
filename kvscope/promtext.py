"""Reading Prometheus text pages (vLLM, kvscope, dcgm-exporter) the way prometheus_client's parser does.

prometheus_client's parser reads label sets a character at a time in Python (about 17 us a
sample): an 8-engine vLLM page took 68 ms, half of an exporter's collection (docs/benchmarks.md). The lines
exporters write in practice (`name{a="b",c="d"} value [timestamp]`, `# HELP`, `# TYPE`) are
read here by one regular expression each, into the very families and samples the library's
parser returns; a page with any other line (exemplars, quoted UTF-8 names, spaces inside label
sets, tabs, malformed lines) is read by the library's parser itself, whose result or error is
then the answer.

One correction: the parser renames the samples of a counter declared without `_total`
(dcgm-exporter's DCGM_FI_DEV_* counters) to `<name>_total`. Prometheus keeps the name as
written, and so do users' queries, so the renaming is undone here.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample as _LibrarySample

_COUNTER_TYPE = re.compile(r"^# TYPE (\S+) counter\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


_SAMPLE_NAME = re.compile(r"^([^#\s{][^\s{]*)", re.MULTILINE)


def bare_counters(text: str) -> set[str]:
    """Counters whose samples carry no `_total` suffix on the page (one pass: linear in its size)."""
    counters = {name for name in _COUNTER_TYPE.findall(text) if not name.endswith("_total")}
    if not counters:
        return set()
    return counters & set(_SAMPLE_NAME.findall(text))


# The separators prometheus_client's parser splits comments on (string.whitespace), and the
# canonical lines: anything these do not match exactly goes to the library's parser.
_WS = r"[ \t\n\r\x0b\x0c]+"
_HELP_OR_TYPE = re.compile(rf"#{_WS}(HELP|TYPE){_WS}([a-zA-Z_:][a-zA-Z0-9_:]*)(?:{_WS}(.*))?")
_SPLIT = re.compile(_WS)
# a label: `__*` names are reserved; the value's quotes end at the first unescaped one
_LABEL_NAME = r"(?!__)[a-zA-Z_][a-zA-Z0-9_]*"
_LABEL_VALUE = r'[^"\\]*(?:\\.[^"\\]*)*'
_LABEL = rf'({_LABEL_NAME})="({_LABEL_VALUE})"'
_PAIR = rf'{_LABEL_NAME}="{_LABEL_VALUE}"'
_LINE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"  # the name
    rf"(?:\{{((?:{_PAIR}(?:,{_PAIR})*,?)?)\}})?"  # the label set, if any
    r" +([!-~]+)(?: +([!-~]+))?"  # the value and an optional timestamp, space-separated
)
_LABELS = re.compile(_LABEL)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_ESCAPES = re.compile(r'\\[\\n"]')
_HELP_ESCAPES = re.compile(r"\\[\\n]")
_UNESCAPED = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
_ALLOWED = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}


class _UnusualLineError(Exception):
    """A line outside the canonical forms: the library's parser reads the page instead."""


def _unescape(match: re.Match[str]) -> str:
    return _UNESCAPED[match.group(0)]


def _number(text: str) -> int | float:
    """The value as the library reads it: an int where int() takes it, else a float."""
    if "_" in text:  # the library refuses Python's digit separators
        raise _UnusualLineError
    try:
        return float(text) if "." in text or not _INTEGER.fullmatch(text) else int(text)
    except ValueError:
        raise _UnusualLineError from None


def _sample(line: str) -> _LibrarySample:
    match = _LINE.fullmatch(line)
    if match is None:
        raise _UnusualLineError
    name, label_text, number, stamp = match.groups()
    labels: dict[str, str] = {}
    if label_text:
        if "\\" in label_text:
            pairs = _LABELS.findall(label_text)
            labels = {k: _ESCAPES.sub(_unescape, v) for k, v in pairs}
            count = len(pairs)
        else:
            # no escapes, so no quote inside a value: every quote opens or closes one, and
            # `,a="1",b="2"` splits into `,a=`, `1`, `,b=`, `2` and what follows the last
            parts = ("," + label_text).split('"')
            values = parts[1::2]
            labels = dict(zip([key[1:-1] for key in parts[0:-1:2]], values, strict=True))
            count = len(values)
        if len(labels) != count:
            raise _UnusualLineError  # a repeated label: the library's verdict
    return _LibrarySample(name, labels, _number(number), None if stamp is None else _number(stamp) / 1000)


def _build(name: str, documentation: str, typ: str, samples: list[_LibrarySample], bare: set[str]) -> Metric:
    # as the library's parser builds a family: counters named as OpenMetrics does internally,
    # except those parse_families would name back as written anyway (`bare`)
    if typ == "counter":
        if name.endswith("_total"):
            name = name[:-6]
        elif name not in bare:
            samples = [_LibrarySample(s[0] + "_total", *s[1:]) for s in samples]
    metric = Metric(name, documentation, typ)
    metric.samples = samples
    return metric


def _canonical_families(text: str, bare: set[str]) -> list[Metric]:
    """The library parser's families for a page of canonical lines (its state machine, line for
    line); raises _UnusualLineError at the first line it would have to read differently."""
    families: list[Metric] = []
    name, documentation, typ = "", "", "untyped"
    samples: list[_LibrarySample] = []
    allowed: tuple[str, ...] = ()
    for raw_line in text.split("\n"):
        line = raw_line.strip()
        if not line:
            continue
        if line[0] != "#":
            sample = _sample(line)
            if sample.name in allowed:
                samples.append(sample)
                continue
            if name != "":
                families.append(_build(name, documentation, typ, samples, bare))
            name, documentation, typ, samples, allowed = "", "", "untyped", [], ()
            families.append(_build(sample.name, "", "untyped", [sample], bare))
            continue
        match = _HELP_OR_TYPE.fullmatch(line)
        if match is None:
            if '"' in line:
                raise _UnusualLineError
            parts = _SPLIT.split(line, maxsplit=2)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                raise _UnusualLineError
            continue  # a plain comment
        kind, candidate, rest = match.groups()
        if kind == "HELP":
            if candidate != name:
                if name != "":
                    families.append(_build(name, documentation, typ, samples, bare))
                name, typ, samples, allowed = candidate, "untyped", [], (candidate,)
            rest = rest or ""
            documentation = _HELP_ESCAPES.sub(_unescape, rest) if "\\" in rest else rest
        else:
            if rest is None:
                raise _UnusualLineError
            if candidate != name:
                if name != "":
                    families.append(_build(name, documentation, typ, samples, bare))
                name, documentation, samples = candidate, "", []
            typ = rest
            allowed = tuple(name + suffix for suffix in _ALLOWED.get(typ, ("",)))
    if name != "":
        families.append(_build(name, documentation, typ, samples, bare))
    return families


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """A parse makes tens of thousands of acyclic objects (samples, label dicts), which
    reference counting frees; the cyclic collector finds nothing among them but walks ever more
    of them as the page grows: with it, a page ten times larger cost 13 times as much. It is
    paused for the parse only, and only where it was running."""
    running = gc.isenabled()
    if running:
        gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()


def parse_families(text: str, created: bool = True) -> list[Metric]:
    """Every family of a page, sample names as written (without `_created` samples unless
    `created`). Raises on a malformed page."""
    bare = bare_counters(text)
    with _cyclic_gc_paused():
        try:
            families = _canonical_families(text, bare)
        except (_UnusualLineError, ValueError):  # a line of another form, or a family the library refuses
            families = list(text_string_to_metric_families(text))
        for family in families:
            if family.type == "counter" and family.name in bare:
                family.samples = [
                    s._replace(name=family.name) if s.name == family.name + "_total" else s for s in family.samples
                ]
            if not created:
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return families


def parse(text: str) -> list[Sample]:
    """Every sample of a page. Raises ValueError (or a subclass) on a malformed page."""
    return [Sample(s.name, dict(s.labels), float(s.value)) for family in parse_families(text) for s in family.samples]


def parse_lenient(text: str) -> tuple[list[Sample], int]:
    """Every sample that can be read, and how many lines could not: a page with redacted or
    broken lines (as pastes and half-written pages are) costs only those lines. A whole page
    that parses is read in one pass; otherwise each family block, then each of its lines."""
    try:
        return parse(text), 0
    except Exception:  # the parser raises assorted errors on junk
        pass
    samples: list[Sample] = []
    bad = 0
    for block in _blocks(text):
        try:
            samples += parse("\n".join(block) + "\n")
            continue
        except Exception:
            pass
        header = [line for line in block if line.startswith("#")]
        for line in block:
            if line.startswith("#") or not line.strip():
                continue
            try:
                samples += parse("\n".join([*header, line]) + "\n")
            except Exception:
                bad += 1
    return samples, bad


def _blocks(text: str) -> list[list[str]]:
    """The page split where a new family's comments begin or the sample name changes."""
    blocks: list[list[str]] = []
    current: list[str] = []
    last_name = ""
    for line in text.splitlines():
        if line.startswith("#"):
            if current and not current[-1].startswith("#"):
                blocks.append(current)
                current = []
            current.append(line)
            continue
        match = _SAMPLE_NAME.match(line)
        name = match.group(1) if match else ""
        base = re.sub(r"_(bucket|sum|count|total|created)$", "", name)
        if current and not current[-1].startswith("#") and base != last_name:
            blocks.append(current)
            current = []
        current.append(line)
        last_name = base
    if current:
        blocks.append(current)
    return blocks


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples named `name` whose labels include `labels`."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """Sum of the matching samples (0 when none)."""
    return sum(s.value for s in select(samples, name, **labels))
