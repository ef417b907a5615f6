"""One diagnosis end to end: fetch (Prometheus, scrape or bundle), decide, optionally save the
evidence. What the CLI and the Alertmanager webhook call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diagnosis import alerts, onset, screen
from diagnosis.findings import INSUFFICIENT_DATA, Severity
from diagnosis.measures import MEASURES, Entity, Measure, Measurements
from diagnosis.sources import SourceError
from diagnosis.sources import bundle as bundles
from diagnosis.sources.prometheus import RECENT, PrometheusSource
from diagnosis.sources.scrape import ScrapeSource
from diagnosis.verdict import PRESENT_MEASURES, Diagnosis, diagnose
from kvscope.config import Config
from kvscope.prometheus import PrometheusClient
from kvscope.promql import ANY, Selector


@dataclass
class Request:
    prometheus: str | None = None
    scrape: list[str] = field(default_factory=list)
    bundle: Path | None = None
    at: float = 0.0
    window: float = 1800.0
    baseline: float | None = None  # the window before compared with this one; default its length
    alert_window: float | None = None  # the alerts' own window, to look again at what they saw (default: recent)
    recent: float = RECENT
    selector: Selector = ANY
    path_prefix: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    bearer_token: str | None = None
    interval: float = 10.0
    phases: str = "auto"  # --prometheus: screen.PHASES (two on a large fleet where the rollups are loaded)
    save_bundle: Path | None = None
    config: Config = field(default_factory=Config)

    @property
    def source(self) -> str:
        return self.prometheus or (f"bundle {self.bundle}" if self.bundle else " ".join(self.scrape))


def run(request: Request) -> Diagnosis:
    """Raises SourceError when the source cannot be used at all."""
    config = request.config
    if request.bundle is not None:
        saved = bundles.load(request.bundle)
        measurements, at, window, source = saved.measurements, saved.at, saved.window, f"bundle {request.bundle}"
    elif request.scrape:
        selectors = {
            Entity.ENGINE: request.selector & config.engine_selector,
            Entity.GPU: request.selector & config.gpu_selector,
        }
        scraper = ScrapeSource(request.scrape, interval=request.interval, selectors=selectors)
        measurements = scraper.fetch(MEASURES)
        at, window, source = request.at, request.interval, scraper.name
    elif request.prometheus:
        client = PrometheusClient(request.prometheus, request.path_prefix, request.headers, request.bearer_token)
        prom = PrometheusSource(
            client,
            request.selector,
            request.recent,
            gpu_selector=config.gpu_selector,
            engine_selector=config.engine_selector,
        )
        try:
            # the hardware's present state, judged over the end of the window alone (a GPU that
            # throttles for the last 20 minutes of 30 must not average out)
            present_span = min(request.recent, request.window)
            measurements, present = _fetch(prom, request, present_span)
            firing = alerts.fetch(client, request.at, request.window, request.selector)
            result = diagnose(measurements, request.at, request.window, prom.name, config, firing, present=present)
            recent: list[Measurements] | None = None
            todo = alerts.unexplained(firing)
            if todo:  # look again over the alerts' own window, at the time each last fired
                times = sorted({a.last for a in todo})[-3:]
                short = min(request.alert_window or request.recent, request.window)
                recent = [prom.fetch(MEASURES, t, short, request.baseline) for t in times]
                result = diagnose(
                    measurements, request.at, request.window, prom.name, config, firing, recent, present=present
                )
            span = request.window + (request.baseline or request.window)
            onset.find(prom, result.incidents, request.at, span, present_span)
            alerts.keep_active(result.incidents, firing, request.at - present_span)
            for incident in result.incidents:
                key = (incident.id, tuple(sorted(incident.scopes)))
                if incident.onset is not None:
                    measurements.onsets[key] = incident.onset
                if incident.ended is not None:
                    measurements.ended[key] = incident.ended
            if measurements.ended:  # the verdict is the active incidents' (a bundle replays the same)
                result = diagnose(
                    measurements, request.at, request.window, prom.name, config, firing, recent, present=present
                )
            onset.change_times(prom, result.incidents, result.changes, request.at, span)
            onset.say_when(result)
        finally:
            prom.close()
        if request.save_bundle is not None:
            bundles.save(request.save_bundle, bundles.Bundle(request.at, request.window, prom.name, measurements))
        return result
    else:
        raise SourceError("no source: give --prometheus URL, --scrape URL or --bundle FILE")
    if request.save_bundle is not None:
        bundles.save(request.save_bundle, bundles.Bundle(at, window, source, measurements))
    return diagnose(measurements, at, window, source, config)


def _fetch(prom: PrometheusSource, request: Request, present_span: float) -> tuple[Measurements, Measurements | None]:
    """The window, its baseline and its end: in one phase, or, on a large fleet (or where
    asked), in two: everything but the latency quantiles, then those for the engines the
    screen does not clear (diagnosis/screen.py)."""
    at, window, baseline = request.at, request.window, request.baseline

    def at_the_end(measures: Sequence[Measure]) -> tuple[Sequence[Measure], float] | None:
        return (measures, present_span) if present_span < window else None

    if request.phases == "one":
        return prom.fetch_with_present(MEASURES, at, window, baseline, at_the_end(PRESENT_MEASURES))
    recorded = screen.rollups_loaded(prom.query, at, request.selector)
    if request.phases == "auto" and recorded < screen.TWO_PHASES_FROM:
        m, present = prom.fetch_with_present(MEASURES, at, window, baseline, at_the_end(PRESENT_MEASURES))
        engines = len(m.entities("kv_usage_max"))
        if not recorded and engines >= screen.TWO_PHASES_FROM:
            detail = "one phase: kvscope's rollups are not loaded; every engine's latency read from its histograms"
            m.sources.append({"source": "rollups", "status": "ok", "detail": detail})
        return m, present
    first, deferred = screen.split(MEASURES)
    first_now, deferred_now = screen.split(PRESENT_MEASURES)
    m, present = prom.fetch_with_present(first, at, window, baseline, at_the_end(first_now))
    config = request.config
    sel = request.selector if recorded else request.selector & config.engine_selector
    found = screen.screen(prom.query, m, at, window, sel, config.thresholds, recorded > 0)
    if found.selector is not None:
        more, more_now = prom.fetch_with_present(
            deferred, at, window, baseline, at_the_end(deferred_now), found.selector
        )
        _merge(m, more)
        m.baseline.update(more.baseline)
        if present is not None and more_now is not None:
            _merge(present, more_now)
    m.sources.append({"source": "screen", "status": "ok", "detail": found.detail})
    return m, present


def _merge(into: Measurements, more: Measurements) -> None:
    into.values.update(more.values)
    into.errors.update(more.errors)
    into.notes += [n for n in more.notes if n not in into.notes]


def undiagnosable(request: Request, why: str) -> Diagnosis:
    """The verdict when the source itself could not be used (exit 3)."""
    return Diagnosis(request.at, request.window, request.source, INSUFFICIENT_DATA, Severity.OK, 0.0, why)
