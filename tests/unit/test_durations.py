"""Durations and times: one parser and one formatter for the CLI, the rules and the drill."""

import pytest

from kvscope.durations import format_duration, parse_duration, parse_time, rfc3339, scaled


@pytest.mark.parametrize(
    ("text", "seconds"), [("15m", 900), ("1h30m", 5400), ("90s", 90), ("2d", 172800), ("250ms", 0.25), ("1.5m", 90)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "5x", "m15", "-5m", "0s", "5 m", "1e3s"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_durations_are_written_in_the_largest_unit_that_divides_them():
    assert [format_duration(s) for s in (5400, 3600, 45, 86400, 0.2, 59.6)] == ["90m", "1h", "45s", "1d", "1s", "1m"]


def test_a_drill_clock_divides_every_duration():
    assert scaled("5m", 20) == "15s" and scaled("1h", 20) == "3m" and scaled("30s", 20, floor=10) == "10s"


def test_times_are_rfc3339_or_unix_seconds():
    assert parse_time("2026-11-30T02:00:00Z") == parse_time("1796004000") == 1796004000.0
    assert parse_time("2026-11-30T03:00:00+01:00") == 1796004000.0
    assert rfc3339(1796004000.0) == "2026-11-30T02:00:00Z"
    for bad in ("yesterday", "nan", "inf", "-1"):
        with pytest.raises(ValueError, match="not a time"):
            parse_time(bad)
