"""The exporter times each collector; one failure costs only its own series."""

from exporter.exposition import Series
from exporter.registry import Exporter
from kvscope import catalog, promtext


class Good:
    name = "good"

    def collect(self):
        s = Series(catalog.HOST_CPUS)
        s.add((), 2)
        yield s.metric


class Broken:
    name = "broken"

    def collect(self):
        s = Series(catalog.HOST_LOAD1)
        s.add((), 0.5)
        yield s.metric
        raise RuntimeError("source went away")


class Unhealthy:
    name = "unhealthy"
    healthy = False

    def collect(self):
        s = Series(catalog.HOST_MEMORY_TOTAL)
        s.add((), 1)
        yield s.metric


def test_each_collector_gets_duration_and_success_and_failures_are_contained():
    exporter = Exporter([Broken(), Good(), Unhealthy()], interval=0)
    samples = promtext.parse(exporter.page().decode())
    success = {
        s.labels["collector"]: s.value for s in promtext.select(samples, catalog.EXPORTER_COLLECTOR_SUCCESS.name)
    }
    assert success == {"broken": 0.0, "good": 1.0, "unhealthy": 0.0}
    assert len(promtext.select(samples, catalog.EXPORTER_COLLECTOR_DURATION.name)) == 3
    assert promtext.total(samples, catalog.HOST_CPUS.name) == 2
    assert promtext.total(samples, catalog.HOST_LOAD1.name) == 0.5  # yielded before it failed
    assert "source went away" in exporter.last_errors["broken"]


def test_background_mode_serves_the_cached_page():
    class Counting(Good):
        calls = 0

        def collect(self):
            Counting.calls += 1
            yield from super().collect()

    exporter = Exporter([Counting()], interval=3600)
    exporter.start()
    first = exporter.page()
    assert exporter.page() is first and Counting.calls == 1
    exporter.stop()
