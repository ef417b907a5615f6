"""The HTML incident report in a real browser: two reality fleets (a KV avalanche beside an XID
79 on another node; a healthy fleet) backfilled into a real Prometheus, diagnosed, rendered with
their history, and opened in headless Chromium over the DevTools protocol. The page logs no
console error and asks for nothing over the network; at 1280x800 the verdict banner is at the
top in its severity's colour and the plots draw their lines and threshold (read back from the
screenshot's pixels); at a phone's 390 px nothing is wider than the screen.

Screenshots and the pages are kept for a person to look at, in $KVSCOPE_TEST_SHOTS when it is
set, else in a folder of the test session's own (never a fixed path another run may hold).
"""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from diagnosis import history, report, report_html
from diagnosis.run import Request, run
from kvscope.promql import Selector
from tests.scenarios.backfill import backfilled
from tests.scenarios.fleet import Simulation, openmetrics
from tests.scenarios.reality import DIAGNOSE_AT, cases
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.no_engine]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLEETS = ("xid-and-avalanche", "mig-healthy")
WIDE, PHONE = (1280, 800), (390, 844)

if CHROMIUM is None:
    pytest.skip("no Chromium here (Debian: apt-get install chromium)", allow_module_level=True)
websockets = pytest.importorskip("websockets.sync.client", reason="the DevTools client needs `websockets`")
pil = pytest.importorskip("PIL.Image", reason="reading the screenshots needs Pillow")


class Page:
    """One Chromium tab over the DevTools protocol: commands, and the events it sent."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        wanted = next(self.ids)
        self.socket.send(json.dumps({"id": wanted, "method": method, "params": params}))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == wanted:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            if "method" in message:
                self.events.append(message)
        raise AssertionError(f"{method}: no answer in 60 s")

    def pump(self, seconds: float = 0.2) -> None:
        """Keep the events that arrive within `seconds`."""
        with contextlib.suppress(TimeoutError):
            while True:
                message = json.loads(self.socket.recv(timeout=seconds))
                if "method" in message:
                    self.events.append(message)

    def saw(self, method: str) -> bool:
        self.pump()
        return any(e["method"] == method for e in self.events)

    def evaluate(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in answer, answer
        return answer["result"].get("value")

    def open(self, path: Path, size: tuple[int, int], mobile: bool) -> None:
        self.events.clear()
        width, height = size
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=mobile)
        self.send("Page.navigate", url=path.as_uri())
        eventually(lambda: self.saw("Page.loadEventFired"), timeout=60, what=f"{path.name} to load")
        self.pump()

    def screenshot(self, path: Path) -> Any:
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return pil.open(io.BytesIO(data)).convert("RGB")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, browser log errors (a CSP refusal is one), and
        every request that is not for the page itself."""
        out = []
        for e in self.events:
            params = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(f"console: {params.get('args')}")
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails')}")
            elif e["method"] == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                out.append(f"log: {params['entry'].get('text')}")
            elif e["method"] == "Network.requestWillBeSent":
                url = params.get("request", {}).get("url", "")
                if not url.startswith(("file://", "data:")):
                    out.append(f"network: {url}")
        return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory, shots) -> Iterator[dict[str, tuple[Path, dict[str, Any]]]]:
    """Each fleet's report as a page (with the plots' history), and its JSON."""
    work = tmp_path_factory.mktemp("html-report")
    chosen = [c for c in cases() if c.name in FLEETS]
    assert {c.name for c in chosen} == set(FLEETS)
    start = time.time() - 62 * 60
    sims = [Simulation(c.instances, {"scenario": c.name}, start=start) for c in chosen]
    out = {}
    with backfilled(work, openmetrics(sims, start, 60)) as ready:
        for case in chosen:
            request = Request(
                prometheus=ready.base_url,
                at=start + DIAGNOSE_AT * 60,
                window=900,
                selector=Selector.of(scenario=case.name),
            )
            result = run(request)
            page = work / f"{case.name}.html"
            page.write_text(report.render_html(result, history.fetch(request, result)))
            shutil.copyfile(page, shots / page.name)  # beside the screenshots, to open by hand
            out[case.name] = (page, report.to_dict(result))
    yield out


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Page]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    argv = [
        str(CHROMIUM),
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root (containers)
    # Chromium keeps its singleton socket in a folder of the temporary directory and leaves it when
    # stopped: in pytest's folder, not /tmp
    own_tmp = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium-tmp"))}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=own_tmp)
    try:
        port_file = profile / "DevToolsActivePort"
        lines = eventually(lambda: port_file.read_text().split(), timeout=60, what="Chromium to open its DevTools port")
        import httpx

        targets = eventually(
            lambda: [t for t in httpx.get(f"http://127.0.0.1:{lines[0]}/json/list").json() if t["type"] == "page"],
            timeout=30,
            what="Chromium's first tab",
        )
        with websockets.connect(targets[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as socket:
            page = Page(socket)
            for domain in ("Page", "Runtime", "Log", "Network"):
                page.send(f"{domain}.enable")
            yield page
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    kept = os.environ.get("KVSCOPE_TEST_SHOTS")
    path = Path(kept) if kept else tmp_path_factory.mktemp("html-report-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _box(page: Page, selector: str) -> dict[str, float]:
    return page.evaluate(
        f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
        " return {x: r.x, y: r.y, width: r.width, height: r.height}; })()"
    )


def _share(image: Any, box: dict[str, float], colour: str, tolerance: int = 12) -> float:
    """The share of the box's pixels within `tolerance` of `colour` (#rrggbb)."""
    want = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    left, top = max(0, int(box["x"])), max(0, int(box["y"]))
    right, bottom = min(image.width, int(box["x"] + box["width"])), min(image.height, int(box["y"] + box["height"]))
    raw = image.crop((left, top, right, bottom)).tobytes()  # RGB, three bytes a pixel
    pixels = len(raw) // 3
    near = sum(1 for i in range(0, pixels * 3, 3) if all(abs(raw[i + k] - want[k]) <= tolerance for k in range(3)))
    return near / max(1, pixels)


@pytest.mark.parametrize("fleet", FLEETS)
def test_the_page_logs_no_error_and_asks_for_nothing(browser, pages, fleet):
    for size, mobile in ((WIDE, False), (PHONE, True)):
        browser.open(pages[fleet][0], size, mobile)
        assert browser.problems() == [], (fleet, size)


def test_the_browser_check_sees_a_page_that_breaks_the_rules(browser, tmp_path):
    # the harness itself: a console error, an uncaught exception and a request leaving the page
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><img src="http://127.0.0.1:9/x.png"><script>console.error("seen");'
        "throw new Error('thrown')</script>"
    )
    browser.open(bad, WIDE, mobile=False)
    found = eventually(lambda: browser.problems() if len(browser.problems()) >= 3 else None, timeout=30)
    assert any("seen" in p for p in found) and any("thrown" in p for p in found)
    assert any(p.startswith("network: http://127.0.0.1:9/") for p in found)


@pytest.mark.parametrize("fleet", FLEETS)
def test_the_verdict_is_at_the_top_in_its_colour(browser, pages, shots, fleet):
    path, data = pages[fleet]
    browser.open(path, WIDE, mobile=False)
    image = browser.screenshot(shots / f"{fleet}-1280x800.png")
    assert browser.evaluate("document.querySelector('#verdict h1').textContent") == data["bottleneck"]
    banner = _box(browser, "#verdict")
    assert banner["y"] == 0 and banner["width"] == WIDE[0] and 80 < banner["height"] < WIDE[1] / 2
    colour = report_html.BANNER[data["severity"]]
    assert _share(image, banner, colour) > 0.6, f"the banner is not {colour} in the screenshot"


def test_the_plots_draw_their_lines_and_thresholds(browser, pages, shots):
    path, data = pages["xid-and-avalanche"]
    assert [i["id"] for i in data["incidents"]] == ["kv_cache_exhaustion", "gpu_hardware_fault"]
    browser.open(path, WIDE, mobile=False)
    drawn = browser.evaluate(
        "[...document.querySelectorAll('svg.plot')].map(s => ({series: s.querySelectorAll('.series').length,"
        " threshold: s.querySelectorAll('.threshold').length, onset: s.querySelectorAll('.onset').length}))"
    )
    assert drawn and all(p["threshold"] == 1 for p in drawn)
    assert sum(p["series"] > 0 for p in drawn) >= 3 and sum(p["onset"] for p in drawn) >= 3
    browser.evaluate("document.querySelector('svg.plot').scrollIntoView({block: 'center'})")
    image = browser.screenshot(shots / "xid-and-avalanche-1280x800-plot.png")
    plot = _box(browser, "svg.plot")
    assert plot["width"] > 400 and plot["y"] >= 0 and plot["y"] + plot["height"] <= WIDE[1]
    assert _share(image, plot, "#175cd3", 40) > 0.002, "no line in the plot"
    assert _share(image, plot, "#d92d20", 40) > 0.001, "no threshold in the plot"
    assert _share(image, plot, "#ffffff", 8) < 0.97, "the plot is blank"


@pytest.mark.parametrize("fleet", FLEETS)
def test_it_reads_on_a_phone(browser, pages, shots, fleet):
    path, data = pages[fleet]
    browser.open(path, PHONE, mobile=True)
    image = browser.screenshot(shots / f"{fleet}-390x844.png")
    layout = browser.evaluate(
        "({scroll: document.documentElement.scrollWidth, inner: innerWidth,"
        " wide: [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1)"
        ".map(e => e.tagName + '.' + e.className).slice(0, 5),"
        " font: parseFloat(getComputedStyle(document.body).fontSize)})"
    )
    assert layout["scroll"] <= layout["inner"] == PHONE[0], layout
    assert layout["wide"] == [], layout
    assert layout["font"] >= 13
    banner = _box(browser, "#verdict")
    assert banner["y"] == 0 and banner["width"] == PHONE[0]
    assert _share(image, banner, report_html.BANNER[data["severity"]]) > 0.5
    if data["incidents"]:
        browser.evaluate("document.querySelector('svg.plot').scrollIntoView({block: 'center'})")
        plot = _box(browser, "svg.plot")
        assert plot["width"] >= 0.75 * PHONE[0], plot  # the plot takes the screen's width, not a sliver
        browser.screenshot(shots / f"{fleet}-390x844-plot.png")
