"""The scrape source's own evaluation (rates with counter resets, deriv, the `_over_time`
functions, histogram quantiles, ratios, per-entity aggregation, legacy-name fallbacks) gives what
Prometheus gives for the same measure's PromQL over the same samples.

The samples are real /metrics pages (`tests/data/real-pages/`: vLLM with its `engine` label, a
dcgm-exporter page) and a simulated fleet page, evolved over a minute of 10-second scrapes:
counters grow (one resets, one is born inside the window), gauges move, histograms fill bucket
by bucket. The range semantics are Prometheus 2's (Debian's package: both ends of a range
included); Prometheus 3 drops the sample at the range's start, and this test would say so. Prometheus gets them
backfilled (promtool tsdb create-blocks-from openmetrics); the scrape source gets the snapshots.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosis.measures import MEASURES, Kind, Measurements, entity_key
from diagnosis.sources.prometheus import promql
from diagnosis.sources.scrape import Timed, compute
from drill import prometheus_server
from drill.launcher import running
from kvscope import catalog, promtext
from kvscope.prometheus import PrometheusClient
from tests.scenarios.fleet import Simulation, page
from tests.scenarios.library import scenarios

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
REAL = Path(__file__).resolve().parents[1] / "data" / "real-pages"  # SOURCES.md: where each comes from
STEP, SNAPSHOTS = 10.0, 7  # one minute of 10-second scrapes
WINDOW = STEP * (SNAPSHOTS - 1)
COMPARED = [m for m in MEASURES if m.kind is not Kind.RATIO_BEFORE]  # history a scrape does not have


def _pages() -> dict[str, str]:
    """instance -> page text."""
    pages = {}
    for name in ("kv-avalanche", "xid-79"):
        sim = Simulation(next(s for s in scenarios() if s.name == name).instances, kvscope_extras=True)
        sim.step(60)
        pages[f"{name}:8000"] = page(sim)
    for name, instance in (("vllm-kops-qwen25-05b-1.prom", "vllm:8000"), ("dcgm-l4-kops-1.prom", "dcgm:9400")):
        if (REAL / name).is_file():
            pages[instance] = (REAL / name).read_text()
    return pages


def _evolve(pages: dict[str, str], seed: int = 7) -> list[Timed]:
    """SNAPSHOTS time-stamped snapshots: counters grow (vllm:num_preemptions_total resets once),
    gauges move, every histogram's buckets stay cumulative."""
    rng = random.Random(seed)
    base: list[tuple[str, str, dict[str, str], float]] = []  # (family type, name, labels, value)
    for instance, text in pages.items():
        for family in promtext.parse_families(text):
            for s in family.samples:
                if s.name.endswith("_created") or not math.isfinite(s.value) or abs(s.value) > 1e15:
                    continue
                base.append((family.type, s.name, {"instance": instance, **s.labels}, float(s.value)))
    growth: dict[tuple, float] = {}
    histogram_inc: dict[tuple, float] = {}
    for kind, name, labels, _ in base:
        if kind == "histogram" and name.endswith("_bucket"):
            group = (name, tuple(sorted((k, v) for k, v in labels.items() if k != "le")))
            histogram_inc.setdefault(group, rng.uniform(1, 20))
    snapshots: list[Timed] = []
    for k in range(SNAPSHOTS):
        samples = []
        for kind, name, labels, value in base:
            key = (name, tuple(sorted(labels.items())))
            if kind == "histogram":
                stem = name.rsplit("_", 1)[0]
                group_labels = tuple(sorted((a, b) for a, b in labels.items() if a != "le"))
                total = histogram_inc.get((stem + "_bucket", group_labels), 5.0)
                if name.endswith("_bucket"):
                    le = float(labels["le"])
                    share = 1.0 if math.isinf(le) else min(1.0, 0.2 + math.log1p(le) / 4)
                    value += k * round(total * share)
                elif name.endswith("_count"):
                    value += k * round(total)
                else:  # _sum
                    value += k * total * 0.37
            elif kind == "counter":
                inc = growth.setdefault(key, rng.choice([0.0, 1.0, 3.5, 40.0]))
                value += k * inc
                if name == "vllm:num_preemptions_total" and k >= 4:
                    value = (k - 4) * inc  # the engine restarted: the counter begins again
            elif kind in ("gauge", "unknown", "info"):
                value += rng.uniform(-0.1, 0.1) * max(abs(value), 1.0) if k else 0.0
            samples.append(promtext.Sample(name, labels, value))
        if k >= 3:  # an XID counter born inside the window, at 1, as a GPU's first XID 79 is
            labels = {"instance": "dcgm:9400", "gpu": "1", "UUID": "GPU-1", "xid": "79"}
            samples.append(promtext.Sample(catalog.GPU_XID_ERRORS.name, labels, 1.0))
        snapshots.append((k * STEP, samples))
    return snapshots


def _openmetrics(snapshots: list[Timed], start: float) -> str:
    families: dict[str, tuple[str, list[str]]] = {}
    for at, samples in snapshots:
        for s in samples:
            name = s.name
            family, kind = _family(name)
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()))
            families.setdefault(family, (kind, []))[1].append(f"{name}{{{text}}} {s.value!r} {start + at:.3f}")
    lines = []
    for family, (kind, rows) in families.items():
        lines.append(f"# TYPE {family} {kind}")
        lines.extend(_by_series(rows))
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


_HISTOGRAMS: set[str] = set()


def _family(name: str) -> tuple[str, str]:
    stem = name.rsplit("_", 1)[0]
    if stem in _HISTOGRAMS:
        return stem, "histogram"
    if name.endswith("_total"):
        return name.removesuffix("_total"), "counter"
    return name, "gauge"


def _by_series(rows: list[str]) -> list[str]:
    """OpenMetrics wants each series' samples together, in time order."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        grouped[row.rsplit(" ", 2)[0]].append(row)
    return [r for series in grouped.values() for r in series]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusClient, float, list[Timed]]]:
    pages = _pages()
    for text in pages.values():
        _HISTOGRAMS.update(f.name for f in promtext.parse_families(text) if f.type == "histogram")
    snapshots = _evolve(pages)
    work = tmp_path_factory.mktemp("scrape-vs-prometheus")
    start = float(int(time.time()) - 3600)
    (work / "pages.om").write_text(_openmetrics(snapshots, start))
    prometheus_server.backfill(work / "pages.om", work / "data")
    server = prometheus_server.start(work / "prometheus", {}, storage=work / "data", retention="30d")
    with running(server, ready_path="/-/ready", timeout=60) as ready, PrometheusClient(ready.base_url) as client:
        yield client, start + WINDOW, snapshots


def _keyed(measurements: Measurements, name: str) -> dict[tuple, float]:
    measure = next(m for m in MEASURES if m.name == name)
    out = {}
    for v in measurements.get(name):
        key = (entity_key(v.labels, measure.entity), tuple(v.labels.get(b, "") for b in measure.by))
        out[key] = v.value
    return out


def test_the_pages_cover_every_kind_of_evaluation(recorded):
    _, _, snapshots = recorded
    scraped = compute(COMPARED, snapshots, "scrape")
    kinds = {m.kind for m in COMPARED if scraped.has(m.name)}
    assert kinds == set(Kind) - {Kind.RATIO_BEFORE}
    assert scraped.has("preemption_rate")  # the counter that resets


@pytest.mark.parametrize("measure", COMPARED, ids=lambda m: m.name)
def test_the_scrape_source_computes_what_prometheus_computes(recorded, measure):
    client, at, snapshots = recorded
    expr = promql(measure, WINDOW, recent=WINDOW)
    from diagnosis.measures import Value, usable

    prom = Measurements()
    # both sides drop what the Prometheus source drops: NaN, and GPU sentinels (the real pages have some)
    values = [Value(v, labels, expr) for labels, v in client.query(expr, at) if usable(measure, v)]
    if values:
        prom.values[measure.name] = values
    scraped = compute([measure], snapshots, "scrape")
    theirs, ours = _keyed(prom, measure.name), _keyed(scraped, measure.name)
    assert ours.keys() == theirs.keys(), (expr, sorted(ours), sorted(theirs))
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (expr, key)
