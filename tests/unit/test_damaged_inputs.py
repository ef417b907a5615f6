"""Damaged inputs to `kvscope diagnose`: a truncated or foreign bundle, a Prometheus that answers
HTML or far too much, a scrape target serving junk. Each is exit 3 with one line on stderr
naming the source, never a traceback."""

from __future__ import annotations

import json

import pytest

from diagnosis.measures import Measurements, Value
from diagnosis.sources import bundle as bundles
from kvscope import exitcodes
from kvscope.cli import main
from kvscope.prometheus import MAX_BYTES
from tests.fakes.pages import PageServer


def _one_line_exit_3(capsys, argv: list[str]) -> str:
    """What the user reads: exit 3, one line naming the source (each test checks the name), no traceback."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == exitcodes.UNDIAGNOSABLE, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "bundle.json"
    measurements = Measurements({"kv_usage_max": [Value(0.97, {"pod": "p"}, "q")]}, {})
    bundles.save(path, bundles.Bundle(1796000000.0, 1800.0, "http://prometheus:9090", measurements))
    return path


def test_a_good_bundle_still_loads(saved):
    assert bundles.load(saved).measurements.values["kv_usage_max"][0].value == 0.97


def test_a_bundle_cut_anywhere_is_exit_3_in_one_line(tmp_path, capsys, saved):
    raw = saved.read_bytes()
    cut = tmp_path / "cut.json"
    for end in range(0, len(raw) - 1, max(1, len(raw) // 40)):
        cut.write_bytes(raw[:end])
        assert str(cut) in _one_line_exit_3(capsys, ["diagnose", "--bundle", str(cut)])


@pytest.mark.parametrize(
    "content",
    [
        b"\x89PNG\r\n\x1a\n\x00\x00",
        b"[" * 100_000,
        json.dumps({"schema": "kvscope.bundle/v1", "at": 1, "window": 1, "source": "x", "measurements": []}).encode(),
        json.dumps(
            {"schema": "kvscope.bundle/v1", "at": "soon", "window": 1, "source": "x", "measurements": {}}
        ).encode(),
        json.dumps({"schema": "kvscope.bundle/v1", "at": 1, "window": 0, "source": "x", "measurements": {}}).encode(),
        json.dumps(
            {
                "schema": "kvscope.bundle/v1",
                "at": 1,
                "window": 1,
                "source": "x",
                "measurements": {"kv_usage_max": [{"value": "x", "labels": {}, "query": "q"}]},
            }
        ).encode(),
        json.dumps({"schema": "other/v9"}).encode(),
    ],
)
def test_a_foreign_or_damaged_bundle_is_exit_3_in_one_line(tmp_path, capsys, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert str(path) in _one_line_exit_3(capsys, ["diagnose", "--bundle", str(path)])


def test_a_missing_bundle_is_exit_3_in_one_line(tmp_path, capsys):
    assert "absent.json" in _one_line_exit_3(capsys, ["diagnose", "--bundle", str(tmp_path / "absent.json")])


@pytest.mark.parametrize(
    "page",
    ["<html><body>Sign in to continue</body></html>", '{"status": "success", "data": ', "x" * (MAX_BYTES + 1)],
    ids=["html", "truncated-json", "over-the-size-limit"],
)
def test_a_prometheus_answer_that_is_not_prometheus_is_exit_3_in_one_line(capsys, page):
    server = PageServer(page)
    base = server.url.removesuffix("/metrics")
    try:
        assert base in _one_line_exit_3(capsys, ["diagnose", "--prometheus", base, "--window", "10m"])
    finally:
        server.close()


def test_a_scrape_target_serving_junk_is_exit_3_in_one_line(capsys):
    server = PageServer("this is { not a metrics page\n")
    try:
        assert server.url in _one_line_exit_3(capsys, ["diagnose", "--scrape", server.url, "--interval", "1s"])
    finally:
        server.close()
