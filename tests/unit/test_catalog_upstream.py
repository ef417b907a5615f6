"""The catalog knows every metric the pinned vLLM can register and every field of
dcgm-exporter's lists, so an upgrade that adds one fails here until it is catalogued."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from kvscope import catalog
from kvscope.catalog import Kind, Source

_LITERAL = re.compile(r"""["'](vllm:[a-z][a-z0-9_]*)["']""")
_PREFIX = re.compile(r"""startswith\(\s*["'](vllm:[a-z][a-z0-9_]*)["']""")


def _vllm_literals() -> set[str]:
    """Every `"vllm:..."` string in the installed vLLM package, less the prefixes it matches
    lines against (`line.startswith("vllm:spec_decode")`)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    found: set[str] = set()
    prefixes: set[str] = set()
    for path in root.rglob("*.py"):
        text = path.read_text(errors="replace")
        found.update(_LITERAL.findall(text))
        prefixes.update(_PREFIX.findall(text))
    return found - prefixes


def _catalogued(literal: str) -> catalog.Signal | None:
    """The catalog entry a registered name is exposed as (a counter gains `_total`)."""
    for signal in catalog.all_signals():
        if signal.source is not Source.VLLM:
            continue
        exposed = {signal.name, *signal.aliases}
        if literal in exposed or (signal.kind is Kind.COUNTER and literal + "_total" in exposed):
            return signal
    return None


def test_every_metric_the_pinned_vllm_registers_is_catalogued() -> None:
    literals = _vllm_literals()
    assert len(literals) > 100, f"the scan of the vllm package found only {len(literals)} names"
    missing = sorted(name for name in literals if _catalogued(name) is None)
    assert not missing, "vLLM registers names the catalog does not know:\n" + "\n".join(missing)


def test_every_current_vllm_name_in_the_catalog_is_one_the_pinned_vllm_registers() -> None:
    literals = _vllm_literals()
    registered = literals | {name + "_total" for name in literals}
    wrong = [
        s.name
        for s in catalog.all_signals()
        if s.source is Source.VLLM and s.name.startswith(catalog.VLLM_NAMESPACE) and not s.legacy
        if s.name not in registered
    ]
    assert not wrong, "catalogued under a name vLLM 0.32 does not register:\n" + "\n".join(wrong)


def test_the_scan_drops_match_prefixes_but_keeps_names() -> None:
    literals = _vllm_literals()
    assert catalog.VLLM_SPEC_DECODE_DRAFTS.name.removesuffix("_total") in literals
    assert "vllm:spec_decode" not in literals


_CSV_LINE = re.compile(r"^\s*(#\s*)?(DCGM_(?:FI|EXP)_[A-Z0-9_]+)\s*,\s*([a-z]+)")


def _dcgm_csv(path: Path) -> dict[str, bool]:
    """field -> enabled (uncommented) for one dcgm-exporter counters file."""
    out: dict[str, bool] = {}
    for line in path.read_text().splitlines():
        m = _CSV_LINE.match(line)
        if m and m.group(3) != "label":
            out[m.group(2)] = m.group(1) is None
    return out


CARRIED_ETC = Path(__file__).parent.parent / "data" / "dcgm-exporter"  # SOURCES.md there


def _etc() -> Path:
    """dcgm-exporter's etc/: $DCGM_EXPORTER_ETC (a checkout), else the copies the suite carries."""
    return Path(os.environ.get("DCGM_EXPORTER_ETC") or CARRIED_ETC)


def test_dcgm_exporter_field_lists_are_catalogued() -> None:
    known = {n for s in catalog.all_signals() if s.source is Source.DCGM for n in s.every_name}
    listed = [s for group in catalog.DCGM_EXPORTER_FIELDS.values() for s in group]
    assert all(s.source is Source.DCGM for s in listed)
    assert len({s.name for s in listed}) == len(listed), "a field is in two lists"
    assert {s.name for s in listed} <= known
    enabled = {s.name for s in catalog.DCGM_EXPORTER_FIELDS["enabled"]}
    opt_in = {s.name for s in catalog.DCGM_EXPORTER_FIELDS["opt_in"]}
    for csv in ("default-counters.csv", "dcp-metrics-included.csv"):
        fields = _dcgm_csv(_etc() / csv)
        assert len(fields) > 20, f"{csv}: only {len(fields)} fields read"
        assert set(fields) <= known, (csv, sorted(set(fields) - known))
        if os.environ.get("DCGM_EXPORTER_ETC"):  # a checkout of DCGM_EXPORTER_RELEASE: the same split
            assert {f for f, on in fields.items() if on} <= enabled | opt_in


@pytest.mark.parametrize("shape", catalog.DCGM_SHAPES)
def test_every_listed_field_reads_in_every_shape_with_its_unit(shape: str) -> None:
    """The 4.9/4.10 lists are the carried ones with each field renamed as its release did (no copy
    of those releases' CSV is reachable here): each name is catalogued and a rename in another
    unit carries the factor back to the catalog's unit."""
    for csv in ("default-counters.csv", "dcp-metrics-included.csv"):
        for field in _dcgm_csv(_etc() / csv):
            name, factor = catalog.dcgm_shape(field, shape)
            assert catalog.measurement_of(name) == field, (shape, field, name)
            signal = next(s for s in catalog.all_signals() if s.name == field)
            if name != field:
                assert name in signal.every_name
                scale = signal.scale_of(name)
                assert scale is not None and scale * factor == pytest.approx(1.0), (field, name, scale, factor)


def test_the_csv_reader_tells_enabled_from_commented_lines(tmp_path: Path) -> None:
    csv = tmp_path / "default-counters.csv"
    csv.write_text(
        "# Format\nDCGM_FI_DEV_SM_CLOCK,  gauge, SM clock.\n"
        "# DCGM_FI_DEV_POWER_VIOLATION, counter, Throttling.\nDCGM_FI_DRIVER_VERSION, label, Driver\n"
    )
    assert _dcgm_csv(csv) == {"DCGM_FI_DEV_SM_CLOCK": True, "DCGM_FI_DEV_POWER_VIOLATION": False}
