"""Each metric name is typed in one place only: kvscope/catalog.py.

Code elsewhere refers to `catalog.X.name`; a name spelled out in another module would drift
from the catalog (generated files, docs and tests aside).
"""

import re
from pathlib import Path

from kvscope import catalog

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("kvscope", "serving", "exporter", "diagnosis", "dashboards", "alerts", "drill", "bench", "scripts")
CATALOG = ROOT / "kvscope" / "catalog.py"


def _code_files():
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if path != CATALOG:
                yield path


def _pattern(name: str) -> re.Pattern[str]:
    # the name itself, or a histogram series of it; not a longer name that starts with it
    return re.compile(rf"(?<![A-Za-z0-9_:]){re.escape(name)}(?:_bucket|_sum|_count)?(?![A-Za-z0-9_])")


def test_no_metric_name_is_spelled_outside_the_catalog():
    # Prometheus' own `up` is also an English word: its uses are the catalog's SCRAPE_UP anyway
    signals = [s for s in catalog.all_signals() if s.source is not catalog.Source.PROMETHEUS]
    patterns = [(n, _pattern(n)) for s in signals for n in s.every_name]
    offenders = []
    for path in _code_files():
        text = path.read_text()
        offenders += [f"{path.relative_to(ROOT)}: {n}" for n, p in patterns if p.search(text)]
    assert not offenders, "metric names typed outside kvscope/catalog.py:\n" + "\n".join(offenders)


def test_no_uncatalogued_kvscope_metric_is_spelled_in_code():
    known = {n for s in catalog.all_signals() for n in s.every_name}
    literal = re.compile(r"""["'](kvscope_[a-z0-9_]+)["']""")
    strays = [
        f"{path.relative_to(ROOT)}: {m}"
        for path in _code_files()
        for m in literal.findall(path.read_text())
        if m not in known
    ]
    assert not strays, "kvscope_* names that are not in the catalog:\n" + "\n".join(strays)


def test_the_check_catches_a_name_typed_twice():
    sample = 'QUERY = "rate(vllm:num_preemptions_total[5m])"\n'
    assert _pattern(catalog.VLLM_NUM_PREEMPTIONS.name).search(sample)
    assert not _pattern("DCGM_FI_DEV_XID_ERROR").search("DCGM_FI_DEV_XID_ERRORS")
