"""`kvscope drill`: start the stack, drive the scenario's traffic, watch alerts fire, diagnose,
replay on the tuned profile, write the report, stop everything."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from diagnosis.webhook import slack_unescape
from drill import alertmanager, drill_config, observe, report, stack
from drill import rules as drill_rules
from drill.calibrate import Calibration, calibrate, probe
from drill.report_dir import ReportDir, ReportDirRefused
from drill.results import ProfileRun, comparison_rows, percentile
from drill.scenarios import SEEDS_MIX, Scenario
from drill.traffic import Driver, Phase
from kvscope import exitcodes
from kvscope.config import Config
from kvscope.durations import format_duration, parse_duration, scaled
from serving.hardware import detect

POLL = 2.0  # seconds between looks at Prometheus while traffic runs
NOTIFY_WAIT = 30.0  # at the end, how long the paged alerts' notifications may still take


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI timeout, `kill`, a container stop): unwind like Ctrl-C, stopping every process."""


@contextlib.contextmanager
def _terminate_like_ctrl_c():
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass
class DrillOptions:
    scenario: Scenario
    profiles: list[str]
    report: Path
    duration: float | None = None
    ports: stack.Ports = field(default_factory=stack.Ports)
    speedup: float = 20.0
    model: str | None = None
    gpu: str = "auto"  # auto | emulated | real
    scrape_interval: float = 2.0
    command: str = ""
    config: Config = field(default_factory=Config)
    rate: float | None = None  # requests per second; None: calibrated to the engine
    kv_pool_tokens: int | None = None  # None: the scenario's (or the calibration's)


class DrillUsageError(ValueError):
    """The options cannot work together (exit 64)."""


def engine_args(scenario: Scenario, model: str | None, gpu_present: bool, pool_tokens: int | None = None) -> list[str]:
    """Flags every profile gets: the KV pool (`pool_tokens`, else the scenario's), and eager mode
    on CPU (half the start-up)."""
    args = [] if gpu_present else ["--enforce-eager"]
    pool = pool_tokens or scenario.kv_pool_tokens
    if pool:
        from kvscope.model_shape import load_shape
        from serving.demo_model import ensure_demo_model
        from serving.hardware import detect
        from serving.profiles import element_bytes

        shape = load_shape(model or ensure_demo_model())
        args += ["--kv-cache-memory-bytes", str(pool * shape.kv_bytes_per_token(element_bytes(detect())))]
    return [*args, *scenario.engine_args]


class PoolChangedError(Exception):
    """The calibration chose another KV pool than the engine was started with: start again."""


@dataclass
class Calibrating:
    """The drill's calibration, measured once on the first profile's engine and kept for the rest."""

    options: DrillOptions
    console: Console
    rules: Path  # the compressed alert rules, written once the latency limits are known
    config: Config  # the stack's kvscope.yaml (drill_config.py), rewritten by the calibration
    calibration: Calibration | None = None

    @property
    def period(self) -> float | None:
        """Seconds between the scenario's bursts on this engine (None: no bursts, or not yet
        calibrated): the rules' range windows hold several (rules.min_range)."""
        count, every = self.options.scenario.bursts
        if not count or self.calibration is None:
            return None
        return self.calibration.burst_every(count, every)

    @property
    def recurrence(self) -> float | None:
        """Seconds between the events that make the scenario's incident on this engine (its
        bursts, or its long prompts: Scenario.recurrence); None: none, or not yet calibrated."""
        if self.calibration is None:
            return None
        return self.options.scenario.recurrence(self.calibration.rate, self.period)

    def min_range(self) -> float:
        """The rules' shortest range window, in seconds, on this engine."""
        return drill_rules.min_range(self.options.scrape_interval, self.recurrence)

    @property
    def pool(self) -> int | None:
        if self.calibration is not None:
            return self.calibration.kv_pool_tokens
        return self.options.kv_pool_tokens or self.options.scenario.kv_pool_tokens

    def on_serve_ready(self, profile: str, started_with: int | None) -> stack.ServeReady | None:
        """What runs once the first engine answers, before the monitoring starts (its load must
        not count in the rules' windows): the probe, unless --rate makes it needless."""
        if self.calibration is not None:
            return None
        options, scenario = self.options, self.options.scenario

        def measure(base_url: str) -> None:
            measured = None
            if options.rate is None:
                self.console.print(f"calibrating: a probe of the seeds' mix on the {profile} profile ...")
                burst = scenario.after.long_tokens if scenario.bursts[0] else None
                measured = asyncio.run(probe(base_url, _served_model(base_url), SEEDS_MIX, burst_tokens=burst))
            self.calibration = calibrate(
                measured,
                load=scenario.load,
                mix=SEEDS_MIX,
                pool_tokens=scenario.kv_pool_tokens,
                rate=options.rate,
                pool_override=options.kv_pool_tokens,
                probed_profile=profile,
            )
            self.console.print(self.calibration.line(), highlight=False)
            assert self.config.path is not None
            self.config = drill_config.write(self.config.path, options.config, self.calibration.latency_scale)
            self.console.print(drill_config.described(self.config, self.calibration.latency_scale), highlight=False)
            drill_rules.write(self.rules, options.speedup, options.scrape_interval, self.config, self.recurrence)
            if self.calibration.kv_pool_tokens != started_with:
                raise PoolChangedError

        return measure


def choose_gpu(option: str, scenario: Scenario, gpu_present: bool) -> bool:
    """True: emulated GPUs. Fault scenarios need them: real GPUs do not take XIDs on demand."""
    if option not in ("auto", "emulated", "real"):
        raise DrillUsageError(f"--gpu must be auto, emulated or real, not {option!r}")
    if option == "real":
        if not gpu_present:
            raise DrillUsageError("--gpu real: this machine has no NVIDIA GPU (use --gpu emulated)")
        if scenario.faults:
            raise DrillUsageError(
                f"{scenario.name} injects a fault into emulated GPUs; a real GPU cannot be given one on demand "
                "(use --gpu emulated)"
            )
        return False
    if option == "emulated":
        return True
    return bool(scenario.faults) or not gpu_present


class Monitor:
    """Polls Prometheus while traffic runs, logs what happens, and renders the live panel."""

    def __init__(self, console: Console, st: stack.Stack, driver: Driver, profile: str, alerts: observe.AlertLog):
        self.console, self.stack, self.driver, self.profile, self.alerts = console, st, driver, profile, alerts
        self.gauges = observe.Gauges()
        self.changed_at: float | None = None
        # notifications already printed: on a stack that ran a scenario before, those are its
        self.first = len(st.oncall.notifications()) if st.oncall else 0
        self.notified = self.first

    def poll(self) -> None:
        now = time.time()
        with contextlib.suppress(Exception):  # a slow answer must not stop the drill
            self.gauges = observe.gauges(self.stack.api)
        with contextlib.suppress(Exception):
            for fired in self.alerts.poll(self.stack.api, now):
                since = f"{now - self.changed_at:+.0f} s after the change" if self.changed_at else "before the change"
                where = ", ".join(f"{k}={v}" for k, v in sorted(fired.labels.items()) if k in ("gpu", "xid", "target"))
                self.console.print(
                    f"[red]ALERT[/] {fired.alertname} ({fired.severity}) firing, {since} {where}", highlight=False
                )
        self.print_notifications()

    def print_notifications(self) -> None:
        """Print what reached the on-call receiver since the last look."""
        if self.stack.oncall is None:
            return
        posts = self.stack.oncall.notifications()
        for post in posts[self.notified :]:
            text = post.body.get("text") if isinstance(post.body, dict) else None
            # the receiver gets Slack's escaping (`->` as `-&gt;`); a terminal shows the words
            shown = slack_unescape(text) if isinstance(text, str) else post.body
            self.console.print(
                "[magenta]NOTIFIED[/] the on-call receiver got: ", Text(str(shown)), sep="", highlight=False
            )
        self.notified = len(posts)

    def render(self) -> Table:
        p = self.driver.progress
        elapsed = time.time() - p.phase_started if p.phase_started else 0.0
        recent = [o.ttft for o in p.outcomes[-200:] if o.klass == "short" and o.ttft is not None]
        p99 = percentile(recent, 99)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        bar = ProgressBar(total=max(p.phase_seconds, 1), completed=min(elapsed, p.phase_seconds), width=40)
        grid.add_row(f"{self.profile}: {p.phase}", Group(bar, Text(f"{elapsed:.0f} / {p.phase_seconds:.0f} s")))
        grid.add_row("requests", f"sent {p.sent}  done {p.done}  failed {p.failed}  in flight {p.in_flight}")
        g = self.gauges
        grid.add_row(
            "engine",
            f"KV {_pct(g.kv_usage)}  waiting {_num(g.waiting)}  running {_num(g.running)}  "
            f"preemptions {_num(g.preemptions)}",
        )
        grid.add_row("short p99 TTFT", "n/a" if p99 is None else f"{p99 * 1000:.0f} ms (last 200 requests)")
        grid.add_row("firing", ", ".join(self.alerts.firing_now) or "none")
        return grid


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}"


def _served_model(base_url: str) -> str:
    data = httpx.get(base_url + "/v1/models", timeout=10).json()
    return str(data["data"][0]["id"])


async def _drive(
    console: Console, st: stack.Stack, phases: Sequence[Phase], scenario: Scenario, monitor: Monitor
) -> list[float]:
    """Run the traffic; returns [start, change, traffic end, drained]."""
    marks: list[float] = []

    def on_phase(phase: Phase) -> None:
        now = time.time()
        marks.append(now)
        if phase.name == "after":
            monitor.changed_at = now
            console.print(f"[bold]change[/]: {scenario.story}", highlight=False)
            for fault in scenario.faults:
                st.inject(fault)
                console.print(f"fault injected into the emulated GPUs: {fault}", highlight=False)

    traffic = asyncio.create_task(monitor.driver.run(phases, on_phase))
    live = Live(monitor.render(), console=console, refresh_per_second=2, transient=True)
    with live:
        while not traffic.done():
            await asyncio.sleep(POLL)
            await asyncio.to_thread(monitor.poll)
            live.update(monitor.render())
        traffic.result()
    drained = time.time()
    marks.append(monitor.driver.progress.ended_at or drained)
    marks.append(drained)
    return marks


@dataclass
class Segment:
    """One scenario's run on one profile, and what reached the on-call receiver (None: no path)."""

    scenario: Scenario
    run: ProfileRun
    notifications: list[dict] | None


def run_profile(
    console: Console, options: DrillOptions, profile: str, emulated: bool, calibrating: Calibrating
) -> Segment:
    """One profile: its stack, the scenario's traffic, the diagnosis."""
    try:
        return _run_profile(console, options, profile, emulated, calibrating)
    except PoolChangedError:
        console.print("the calibrated KV pool differs from the scenario's: starting the engine again with it")
        return _run_profile(console, options, profile, emulated, calibrating)


def _run_profile(
    console: Console, options: DrillOptions, profile: str, emulated: bool, calibrating: Calibrating
) -> Segment:
    pool = calibrating.pool
    args = engine_args(options.scenario, options.model, detect().has_gpu, pool)
    workdir = options.report / "logs" / profile
    console.rule(f"profile {profile}")
    console.print(
        f"starting kvscope serve --profile {profile} {' '.join(args)}, kvscope export "
        f"({'emulated GPUs' if emulated else 'real GPUs'}), Prometheus ...",
        highlight=False,
    )
    t0 = time.time()
    with stack.started(
        workdir,
        profile=profile,
        rules=calibrating.rules,
        ports=options.ports,
        engine_args=args,
        model=options.model,
        emulated=emulated,
        gpus=options.scenario.gpus,
        scrape_interval=format_duration(options.scrape_interval),
        config=calibrating.config.path,
        speedup=options.speedup,
        min_range=calibrating.min_range,
        on_serve_ready=calibrating.on_serve_ready(profile, pool),
    ) as st:
        oncall = (
            f", Alertmanager {st.oncall.alertmanager.base_url} -> webhook {st.oncall.webhook.base_url}"
            if st.oncall
            else " (Alertmanager is not installed: no on-call path; apt-get install prometheus-alertmanager)"
        )
        console.print(
            f"stack ready in {time.time() - t0:.0f} s: serve {st.serve.base_url}, export {st.export.base_url}, "
            f"Prometheus {st.prometheus.base_url}{oncall}",
            highlight=False,
        )
        segment = _segment(console, options, profile, options.scenario, st, calibrating, workdir, args)
    shutil.rmtree(workdir / "prometheus" / "data", ignore_errors=True)
    shutil.rmtree(workdir / "oncall" / "alertmanager" / "data", ignore_errors=True)
    return segment


def _segment(
    console: Console,
    options: DrillOptions,
    profile: str,
    scenario: Scenario,
    st: stack.Stack,
    calibrating: Calibrating,
    workdir: Path,
    args: list[str],
) -> Segment:
    assert calibrating.calibration is not None
    calibration = calibrating.calibration
    phases = scenario.phases(calibration.rate, options.duration, calibrating.period)
    planned = scenario.split(options.duration or scenario.duration)
    for phase, was in zip(phases, planned, strict=True):
        if phase.seconds > was + 0.5:
            why = scenario.why_longer(phase)
            line = f"traffic {phase.name} the change: {phase.seconds:.0f} s, not {was:.0f}: {why}"
            console.print(line, highlight=False)
    driver = Driver(st.serve.base_url, _served_model(st.serve.base_url), seed=11)
    alerts = observe.AlertLog()
    monitor = Monitor(console, st, driver, profile, alerts)
    started, changed, traffic_end, drained = asyncio.run(_drive(console, st, phases, scenario, monitor))
    time.sleep(2 * options.scrape_interval + 1)  # the last scrape and rule evaluation
    monitor.poll()
    ended = time.time()
    window = scaled("5m", options.speedup, calibrating.min_range())  # the rules' rate window
    series = observe.series(st.api, started, ended, options.scrape_interval, window)
    span = format_duration(ended - started)
    peak = max((v for _, v in series.kv_usage), default=None)
    queue = observe.instant(st.api, observe.queue_p99(span), ended)
    preemptions = observe.preemptions_between(st.api, started - options.scrape_interval, ended)
    bundle = workdir / "diagnosis-bundle.json"  # the evidence, to diagnose again offline (--bundle)
    # as an on-call would: the time since the change, against the time before it as the baseline
    # with a fault, the window opens one rule window before the change: an event at the change
    # itself (an XID counted from 0 to 1) needs a sample before it inside the window for
    # increase() to see it; a change of load needs only two scrapes of lead, so the window's
    # load is the changed load (the trigger's ratio is the scenario's, not diluted)
    lead = min(parse_duration(window) if scenario.faults else 2 * options.scrape_interval, (changed - started) / 2)
    # the baseline leaves out the traffic's first seconds: until the gateway's count of them has
    # gone through the exporter and the scrape (measured: seconds on an idle machine, several on a
    # busy one), and a rate window of scrapes after that, the counters read the load low
    delay = observe.first_counted(st.api, started, changed, options.scrape_interval)
    settle = min((delay or 0.0) + 2 * options.scrape_interval + 1, (changed - started - lead) / 2)
    # as of the traffic's end (plus a scrape): the window is the traffic's, not what came after
    at = min(ended, traffic_end + options.scrape_interval)
    diagnosis, markdown = _diagnose(
        st,
        at,
        at - changed + lead,
        changed - started - lead - settle,
        parse_duration(window),
        calibrating.config,
        bundle,
    )
    console.print(f"diagnosis ({profile}): [bold]{diagnosis['bottleneck']}[/]: ", Text(diagnosis["summary"]), sep="")
    notices = _notifications(console, monitor, alerts, changed, workdir)
    run = ProfileRun(
        profile,
        started,
        changed,
        traffic_end,
        drained,
        driver.progress.outcomes,
        alerts,
        diagnosis,
        markdown,
        series,
        preemptions,
        peak,
        queue,
        args,
        _profile_flags(profile, options.model),
    )
    return Segment(scenario, run, notices)


def _notifications(
    console: Console, monitor: Monitor, alerts: observe.AlertLog, changed: float, workdir: Path
) -> list[dict] | None:
    """What reached the on-call receiver, once every paged alert that fired has its notification
    (or NOTIFY_WAIT has passed); kept whole in the profile's oncall/notifications.json. None: no
    on-call path ran."""
    oncall = monitor.stack.oncall
    if oncall is None:
        return None
    paged = {f.alertname for f in alerts.fired.values() if f.severity in alertmanager.PAGED}

    def mine() -> list[alertmanager.Post]:
        return oncall.notifications()[monitor.first :]

    def missing() -> set[str]:
        return paged - {str(p.body.get("alert", {}).get("labels", {}).get("alertname")) for p in mine()}

    if missing():
        console.print(f"waiting up to {NOTIFY_WAIT:.0f} s for the notifications of {', '.join(sorted(missing()))}")
    deadline = time.monotonic() + NOTIFY_WAIT
    while missing() and time.monotonic() < deadline:
        time.sleep(1)
    monitor.print_notifications()
    posts = mine()
    (workdir / "oncall").mkdir(parents=True, exist_ok=True)
    (workdir / "oncall" / "notifications.json").write_text(json.dumps([p.body for p in posts], indent=2))
    return [alertmanager.digest(p, changed, oncall.reports_dir) for p in posts]


def _profile_flags(profile: str, model: str | None) -> list[str]:
    from serving.demo_model import ensure_demo_model
    from serving.profiles import model_max_len, profile_settings

    max_len = model_max_len(str(model or ensure_demo_model()))
    return [arg for s in profile_settings(profile, detect(), max_len, None) for arg in s.argv()]


def _diagnose(
    st: stack.Stack, at: float, window: float, baseline: float, alert_window: float, config: Config, bundle: Path
) -> tuple[dict, str]:
    """The diagnosis an on-call would run: over the time since the change, against the time before
    it; an alert nothing explains is looked at again over the rules' (compressed) window."""
    from diagnosis.report import render_markdown, to_dict
    from diagnosis.run import Request
    from diagnosis.run import run as diagnose

    request = Request(
        prometheus=st.prometheus.base_url,
        at=at,
        window=window,
        recent=window,
        baseline=baseline,
        alert_window=alert_window,
        config=config,
        save_bundle=bundle,
    )
    result = diagnose(request)
    return to_dict(result), render_markdown(result)


def print_table(console: Console, runs: Sequence[ProfileRun]) -> None:
    """The before/after table laid out for an 80-column terminal: values whole on one line,
    labels wrapped at their spaces, the alerts counted (listed in full after the table)."""
    rows = comparison_rows(runs)
    table = Table(
        title="before / after" if len(runs) == 2 else "measured",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    for i, name in enumerate(rows[0]):
        # the labels wrap at their spaces; the values and the ratio's header stay whole
        table.add_column(name or "", justify="left" if i == 0 else "right", no_wrap=i > 0)
    for row in rows[1:]:
        if row[0] == "alerts fired":
            row = [row[0], *(str(len(r.alerts_fired)) for r in runs), *row[len(runs) + 1 :]]
        table.add_row(*row)
    console.print(table)


def run(options: DrillOptions, console: Console | None = None) -> int:
    console = console or Console()
    gpu_present = detect().has_gpu
    try:
        emulated = choose_gpu(options.gpu, options.scenario, gpu_present)
    except DrillUsageError as exc:
        console.print(f"kvscope drill: {exc}", highlight=False)
        return exitcodes.USAGE
    from drill.prometheus_server import PrometheusMissing, binary

    try:
        binary()
    except PrometheusMissing as exc:
        console.print(f"kvscope drill: {exc}", highlight=False)
        return exitcodes.UNAVAILABLE
    folder = ReportDir(options.report)
    try:
        folder.claim()  # removes only what a previous drill wrote here
    except ReportDirRefused as exc:
        console.print(f"kvscope drill: {exc}", highlight=False)
        return exitcodes.USAGE
    folder.track("logs")
    logs = options.report / "logs"
    calibrating = Calibrating(
        options,
        console,
        rules=logs / "kvscope-rules.drill.yaml",
        config=drill_config.write(logs / "kvscope.drill.yaml", options.config),
    )
    scenario = options.scenario
    console.print(
        f"[bold]kvscope drill {scenario.name}[/] (seed {scenario.seed}): {scenario.story}. "
        f"Expect {scenario.expectation()}. "
        f"Alert clocks run {options.speedup:g}x faster.",
        highlight=False,
    )
    segments: list[Segment] = []
    try:
        with _terminate_like_ctrl_c():
            for profile in options.profiles:
                segments.append(run_profile(console, options, profile, emulated, calibrating))
    except KeyboardInterrupt as exc:
        what, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        console.print(f"kvscope drill: {what}; every process it started has been stopped", highlight=False)
        return code
    except Exception as exc:
        console.print(
            f"kvscope drill: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            f"(logs under {options.report / 'logs'}); every process it started has been stopped",
            highlight=False,
        )
        return exitcodes.UNAVAILABLE
    passed = _conclude(console, options, scenario, segments, calibrating, folder)
    return exitcodes.OK if passed else 1


def _conclude(
    console: Console,
    options: DrillOptions,
    scenario: Scenario,
    segments: list[Segment],
    calibrating: Calibrating,
    folder: ReportDir,
) -> bool:
    """The scenario's verdict, report and closing lines; whether it passed."""
    runs = [s.run for s in segments]
    notified = {s.run.profile: s.notifications for s in segments}
    calibration = calibrating.calibration
    incident = runs[0]
    problems = [line for r in runs if (line := unhealthy_baseline(r, calibration))]
    problems += unmet(scenario, incident)
    verdict = (
        f"passed: {', '.join(a for a in incident.alerts_fired if a in scenario.alerts)} fired and the diagnosis "
        f"named {' and '.join(dict.fromkeys(p.expected for p in scenario.parts or (scenario,)))} on the "
        f"{incident.profile} profile"
        if not problems
        else "failed: " + "; ".join(problems)
    )
    summary = report.write(
        folder,
        scenario,
        runs,
        speedup=options.speedup,
        min_range=calibrating.min_range(),
        command=options.command or "kvscope drill " + shlex.quote(scenario.name),
        passed=not problems,
        verdict=verdict,
        limits=calibrating.config.thresholds,
        notifications=notified,
        calibration=calibration,
    )
    console.rule("result")
    print_table(console, runs)
    for r in runs:
        fired = ", ".join(f"{name} ({after:+.0f} s)" for name, after in r.alerts_fired.items()) or "none"
        console.print(f"alerts fired on {r.profile} (seconds after the change): {fired}", highlight=False)
    for r in runs:
        console.print(
            f"diagnosis on {r.profile}: [bold]{r.bottleneck}[/]: ", Text(r.diagnosis.get("summary", "")), sep=""
        )
    for profile, notes in notified.items():
        said = "; ".join(f"{n['alertname']} -> {(n.get('verdict') or {}).get('bottleneck')}" for n in notes or [])
        where = "no on-call path (Alertmanager is not installed)" if notes is None else said or "none"
        console.print(f"notifications that reached the on-call receiver on {profile}: {where}", highlight=False)
    for r in runs:
        if note := quiet_notes(r):
            console.print(note, highlight=False)
    console.print(f"report: {summary}", highlight=False)
    console.print(("[green]" if not problems else "[red]") + "drill ", Text(verdict), sep="")
    return not problems


def unhealthy_baseline(run: ProfileRun, calibration: Calibration | None) -> str | None:
    """One plain line when an alert that pages fired before the change (the drill's story does
    not hold: the incident would not be the change's), else None. An info alert pages nobody and
    names no incident (GPUUtilLow on a baseline light enough that the GPU idles between requests
    is right, not unhealthy): quiet_notes says it."""
    early = run.fired_before_change(alertmanager.PAGED)
    if not early:
        return None
    name, after = min(early.items(), key=lambda kv: kv[1])
    before = [o for o in run.outcomes if o.phase == "before"]
    seconds = max(run.changed - run.started, 1e-9)
    served = sum(1 for o in before if o.latency is not None) / seconds
    sent = len(before) / seconds
    capacity = (
        f", against a measured capacity of {calibration.capacity_rps:.1f} req/s"
        if calibration and calibration.capacity_rps
        else ""
    )
    others = f" (and {', '.join(sorted(set(early) - {name}))})" if len(early) > 1 else ""
    return (
        f"the baseline was not healthy on {run.profile}: {name}{others} fired {-after:.0f} s before the change; "
        f"the engine answered {served:.2f} of the {sent:.2f} req/s sent before it{capacity}"
    )


def quiet_notes(run: ProfileRun) -> str | None:
    """One plain line naming the alerts that page nobody (info) and fired before the change, else None."""
    paged = run.fired_before_change(alertmanager.PAGED)
    quiet = {name: after for name, after in run.alerts_fired.items() if after < 0 and name not in paged}
    if not quiet:
        return None
    said = ", ".join(f"{name} ({-after:.0f} s before it)" for name, after in quiet.items())
    return (
        f"before the change on {run.profile}, alerts that page nobody fired: {said}; "
        "not counted against the baseline (info: advice, not an incident)"
    )


def unmet(scenario: Scenario, run: ProfileRun) -> list[str]:
    """What the run did not show of what the scenario expects: its bottleneck, one of its alerts,
    its trigger; combined, every part's incident active on the part's GPU and its alert there."""
    if not scenario.parts:
        problems = []
        named = run.bottleneck == scenario.expected
        if not named:
            problems.append(f"the diagnosis named {run.bottleneck}, not {scenario.expected}")
        if not any(name in run.alerts_fired for name in scenario.alerts):
            problems.append(f"none of {', '.join(scenario.alerts)} fired")
        if named and (missing := missing_trigger(scenario, run.diagnosis)):
            problems.append(missing)
        return problems
    problems = []
    incidents = [i for i in run.diagnosis.get("incidents") or [] if i.get("status", "active") == "active"]
    for part in scenario.parts:
        gpu = str(part.faults[0]["gpu"])
        if not any(i["id"] == part.expected and any(a.get("gpu") == gpu for a in i["affected"]) for i in incidents):
            problems.append(f"no active {part.expected} incident on GPU {gpu} ({part.name})")
        if not any(f.alertname in part.alerts and f.labels.get("gpu") == gpu for f in run.alerts.fired.values()):
            problems.append(f"none of {', '.join(part.alerts)} fired for GPU {gpu} ({part.name})")
    return problems


def missing_trigger(scenario: Scenario, diagnosis: dict) -> str | None:
    """A line when the scenario has a trigger and the diagnosis did not name it, else None."""
    if scenario.trigger is None:
        return None
    signal_, words = scenario.trigger
    incidents = diagnosis.get("incidents") or []
    trigger = (incidents[0].get("trigger") or {}) if incidents else {}
    summary = str(diagnosis.get("summary", ""))
    if trigger.get("signal") == signal_ and words in summary:
        return None
    said = f"named {trigger.get('signal')}" if trigger.get("signal") else "named no trigger"
    return f"the diagnosis {said}, not the change ({signal_}, '{words}'): {summary}"


def default_report_dir(scenario: str) -> Path:
    return Path("reports") / f"drill-{scenario}-{time.strftime('%Y%m%d-%H%M%S')}"


def main_command(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in ["kvscope", "drill", *argv]) if argv else "kvscope drill"
