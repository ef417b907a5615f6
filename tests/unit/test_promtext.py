"""Reading text pages: kvscope's reader returns what prometheus_client's parser returns, for
every page (real pages, vLLM's own, generated ones with escapes, odd spacing and junk), and
refuses what it refuses."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from kvscope import catalog, promtext

REAL = Path(__file__).resolve().parents[1] / "data" / "real-pages"  # SOURCES.md: where each comes from
KV, PREEMPTIONS, REPLAYS = catalog.VLLM_KV_CACHE_USAGE, catalog.VLLM_NUM_PREEMPTIONS, catalog.DCGM_PCIE_REPLAY
TTFT = catalog.VLLM_TTFT


def _exact(samples: list) -> list[tuple[object, ...]]:
    # repr: NaN equals NaN, and 5 (an int) differs from 5.0
    return [(s.name, s.labels, repr(s.value), repr(s.timestamp), s.exemplar) for s in samples]


def _library(text: str) -> list[tuple[object, ...]]:
    """prometheus_client's families, counters declared without `_total` keeping their names."""
    bare = promtext.bare_counters(text)
    out = []
    for f in text_string_to_metric_families(text):
        samples = list(f.samples)
        if f.type == "counter" and f.name in bare:
            samples = [s._replace(name=f.name) if s.name == f.name + "_total" else s for s in samples]
        out.append((f.name, f.documentation, f.type, f.unit, _exact(samples)))
    return out


def _ours(text: str) -> list[tuple[object, ...]]:
    return [(f.name, f.documentation, f.type, f.unit, _exact(f.samples)) for f in promtext.parse_families(text)]


def _same_verdict(text: str) -> str:
    """What the library and kvscope's reader both made of `text`: "refused" or "read"."""
    try:
        expected = _library(text)
    except Exception as exc:  # the library refuses it: so must we, with the library's error
        with pytest.raises(type(exc)):
            promtext.parse_families(text)
        return "refused"
    assert _ours(text) == expected
    return "read"


VLLM_PAGE = f"""# HELP {KV.name} KV-cache usage. 1 means 100 percent usage.
# TYPE {KV.name} gauge
{KV.name}{{engine="0",model_name="m"}} 0.42
{KV.name}{{engine="1",model_name="m"}} 1
# HELP {PREEMPTIONS.name} Cumulative number of preemption\\nfrom the engine \\\\ a backslash.
# TYPE {PREEMPTIONS.name} counter
{PREEMPTIONS.name}{{engine="0",model_name="m"}} 7.0
# HELP {PREEMPTIONS.family}_created Cumulative number of preemption from the engine.
# TYPE {PREEMPTIONS.family}_created gauge
{PREEMPTIONS.family}_created{{engine="0",model_name="m"}} 1.7e9
# HELP {TTFT.family} Histogram of time to first token in seconds.
# TYPE {TTFT.family} histogram
{TTFT.family}_bucket{{engine="0",le="0.001",model_name="m"}} 0.0
{TTFT.family}_bucket{{engine="0",le="+Inf",model_name="m"}} 3.0
{TTFT.family}_count{{engine="0",model_name="m"}} 3.0
{TTFT.family}_sum{{engine="0",model_name="m"}} 0.25
# a plain comment
# TYPE {REPLAYS.name} counter
{REPLAYS.name}{{gpu="0",UUID="GPU-1",Hostname="h",lora="a\\"b\\\\c\\nd",empty=""}} 5
{REPLAYS.name}{{gpu="1",}} 6 1700000000000
{REPLAYS.name}{{gpu="2",comma=",",pair=",a=",brace="}}{{",eq="="}} 7
untyped_thing 3
untyped_thing{{a="x"}} NaN
"""


def test_a_vllm_page_reads_as_the_library_reads_it():
    _same_verdict(VLLM_PAGE)
    samples = promtext.parse(VLLM_PAGE)
    lora = promtext.select(samples, REPLAYS.name, gpu="0")[0].labels["lora"]
    assert lora == 'a"b\\c\nd' and promtext.total(samples, REPLAYS.name) == 18
    odd = promtext.select(samples, REPLAYS.name, gpu="2")[0].labels
    assert odd == {"gpu": "2", "comma": ",", "pair": ",a=", "brace": "}{", "eq": "="}


@pytest.mark.parametrize(
    "odd",
    [
        f'{KV.name}{{engine="0"}}\t0.5',  # a tab
        f'{KV.name} {{engine="0"}} 0.5',  # a space before the label set
        f'{KV.name}{{ engine = "0" }} 0.5',  # spaces inside it
        f'{KV.name}{{,engine="0"}} 0.5',  # a leading comma
        f'{KV.name}{{engine="0",engine="1"}} 0.5',  # a repeated label
        f'{KV.name}{{__name__="x"}} 0.5',  # a reserved one
        f'{KV.name}{{a:b="0"}} 0.5',  # a colon in a label name
        f'{KV.name}{{engine="0"}} 0.5 # {{trace_id="x"}} 1',  # an exemplar
        f"{KV.name} 1_000",  # digit separators
        f"{KV.name} 1 2 3",  # three numbers
        f"{KV.name} ١",  # a digit of another script
        f'{{"{KV.name}",engine="0"}} 0.5',  # a quoted UTF-8 name
        f"# TYPE {KV.name}",  # a TYPE without a type
        f"# TYPE {KV.name} gauge extra",  # or with two
        "# HELP",
        '# HELP "quoted name" doc',
        "#x HELP name doc",
        f'{KV.name}{{engine="0\\"}} 0.5',  # an escaped quote that leaves the value open
    ],
)
def test_lines_of_other_forms_read_as_the_library_reads_them(odd):
    # the odd line after a good page and before it (the library may refuse one order only)
    assert _same_verdict(VLLM_PAGE + odd + "\n") in ("read", "refused")
    assert _same_verdict(odd + "\n" + VLLM_PAGE) in ("read", "refused")


@pytest.mark.parametrize("path", sorted(REAL.glob("*.prom")), ids=lambda p: p.name)
def test_real_pages_read_as_the_library_reads_them(path):
    assert _same_verdict(path.read_text()) in ("read", "refused")


_name = st.sampled_from([KV.name, PREEMPTIONS.name, PREEMPTIONS.family, TTFT.family, f"{TTFT.family}_bucket", "x"])
_label_value = st.text(st.sampled_from(["a", " ", '"', "\\", "n", ",", "}", "{", "=", "é", "\t"]), max_size=5)
_labels = st.lists(
    st.tuples(st.sampled_from(["engine", "le", "a", "_b", "__c", "d:e"]), _label_value),
    max_size=3,
)
_help = st.text(st.sampled_from(["d", " ", "\\", "n", '"']), max_size=6)
_number = st.sampled_from(["0", "1", "-2", "+3", "0.5", "1e3", "NaN", "+Inf", "-Inf", "1_0", "x", ".5", "5."])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@st.composite
def _line(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["sample", "sample", "sample", "help", "type", "comment", "junk", "blank"]))
    name = draw(_name)
    if kind == "help":
        return f"# HELP {name} {draw(_help)}"
    if kind == "type":
        return f"# TYPE {name} {draw(st.sampled_from(['counter', 'gauge', 'histogram', 'summary', 'untyped', 'info']))}"
    if kind == "comment":
        return "# " + "".join(draw(st.lists(st.sampled_from(["a", " ", "HELP", '"']), max_size=4)))
    if kind == "junk":
        return draw(st.text(max_size=20))
    if kind == "blank":
        return draw(st.sampled_from(["", "  ", "\t"]))
    escape = draw(st.booleans())
    pairs = [f'{k}="{_escape(v) if escape else v}"' for k, v in draw(_labels)]
    label_set = "{" + ",".join(pairs) + draw(st.sampled_from(["", ","])) + "}" if pairs or draw(st.booleans()) else ""
    stamp = draw(st.sampled_from(["", " 1700000000000", " x"]))
    return f"{name}{label_set}{draw(st.sampled_from([' ', '  ']))}{draw(_number)}{stamp}"


@settings(max_examples=400, deadline=None)
@given(st.lists(_line(), max_size=12))
def test_generated_pages_read_as_the_library_reads_them(lines):
    assert _same_verdict("\n".join(lines) + "\n") in ("read", "refused")
