"""One diagnosis end to end: fetch (Prometheus, scrape or bundle), decide, optionally save the
evidence. What the CLI and the Alertmanager webhook call."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diagnosis import alerts, onset
from diagnosis.findings import INSUFFICIENT_DATA, Severity
from diagnosis.measures import MEASURES, Entity, Measurements
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
            measurements, present = prom.fetch_with_present(
                MEASURES,
                request.at,
                request.window,
                request.baseline,
                (PRESENT_MEASURES, present_span) if present_span < request.window else None,
            )
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


def undiagnosable(request: Request, why: str) -> Diagnosis:
    """The verdict when the source itself could not be used (exit 3)."""
    return Diagnosis(request.at, request.window, request.source, INSUFFICIENT_DATA, Severity.OK, 0.0, why)
