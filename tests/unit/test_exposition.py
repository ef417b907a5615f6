"""The exporter's text format: parseable, exact names, merged families, untouched inputs."""

from prometheus_client.core import GaugeMetricFamily

from exporter.exposition import Series, render
from kvscope import catalog, promtext


def test_rendered_pages_parse_back_with_the_same_samples():
    up = Series(catalog.TARGET_UP)
    up.add(("http://a:1/metrics",), 1)
    errors = Series(catalog.GPU_XID_ERRORS)
    errors.add(("0", 'GPU-"x"\\y', "79"), 2)
    samples = promtext.parse(render([up.metric, errors.metric]).decode())
    assert promtext.total(samples, catalog.TARGET_UP.name, target="http://a:1/metrics") == 1
    assert promtext.select(samples, catalog.GPU_XID_ERRORS.name)[0].labels["UUID"] == 'GPU-"x"\\y'


def test_kvscope_counters_announce_their_total_name():
    errors = Series(catalog.GPU_XID_ERRORS)
    errors.add(("0", "u", "79"), 1)
    assert f"# TYPE {catalog.GPU_XID_ERRORS.name} counter" in render([errors.metric]).decode()


def test_same_family_from_two_sources_is_one_block_and_inputs_stay_unchanged():
    a, b = (
        GaugeMetricFamily("x", "help", labels=["t"]),
        GaugeMetricFamily("x", "help", labels=["t"]),
    )
    a.add_metric(["1"], 1)
    b.add_metric(["2"], 2)
    page = render([a, b]).decode()
    assert page.count("# TYPE x gauge") == 1 and 't="1"' in page and 't="2"' in page
    assert len(a.samples) == 1 and render([a, b]).decode() == page


def test_missing_values_are_left_out():
    series = Series(catalog.DCGM_GPU_UTIL, ("gpu",))
    series.add(("0",), None)
    series.add(("1",), float("nan"))
    assert not series


def test_counters_without_total_keep_their_names_when_read_back():
    page = (
        f'# TYPE {catalog.DCGM_PCIE_REPLAY.name} counter\n{catalog.DCGM_PCIE_REPLAY.name}{{gpu="0"}} 5\n'
        f'# TYPE {catalog.GPU_XID_ERRORS.name} counter\n{catalog.GPU_XID_ERRORS.name}{{gpu="0"}} 2\n'
    )
    names = {s.name for s in promtext.parse(page)}
    assert names == {catalog.DCGM_PCIE_REPLAY.name, catalog.GPU_XID_ERRORS.name}
