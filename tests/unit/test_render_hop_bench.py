"""bench.render_hop's smoke run: every way of encoding is measured and reported (a benchmark:
no figure is compared with another)."""

from __future__ import annotations

import pytest

from bench import render_hop


@pytest.mark.slow  # loads the demo tokenizer (a few seconds)
def test_smoke_run_reports_each_way_of_encoding(capsys):
    assert render_hop.main(["--calls", "3", "--chars", "40"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and " us |" in line]
    names = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert names == ["in place", "one-thread pool", "in place, caller busy", "one-thread pool, caller busy"]
    assert all(float(row.split(" | ")[1].removesuffix(" us")) > 0 for row in rows)


def test_bad_arguments_exit_with_a_usage_error():
    with pytest.raises(SystemExit) as exited:
        render_hop.main(["--calls", "0"])
    assert exited.value.code == 2
