"""promtool's rule unit tests, run as the suite runs them: one helper for every test that needs it.

promtool evaluates every rule of a test file's `rule_files` at every step of every case, so a
GPU alert's half-hour case paid for the SLO's 39 recording rules over windows of up to three
days, and the slow-burn cases (a day of data each) for every engine and GPU alert: 97 s for the
twelve slow-burn cases alone on a 2-core machine, 47 s with the SLO groups only. `rule_tests`
runs each case against the rules it reads and nothing else: the alerts it names, the recording
rules its alerts and expressions read, those rules' own inputs in turn, each in its group (same
name, interval and order), one test file per set of rules. A rule's evaluation reads only the
series its expression names (no rule here reads ALERTS, which `_closure` refuses), so each case
sees what it would see against the whole file; a recording rule left out would leave a "fires"
case with nothing to fire on. The committed files still run whole with promtool by hand.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from drill import prometheus_server

_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
Rule = tuple[int, int]  # (group index, rule index) in the merged rule files


def _names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def _closure(groups: list[dict[str, Any]], case: dict[str, Any]) -> frozenset[Rule]:
    """The rules a test case reads: its alerts and every recording rule they and its
    expressions read, transitively."""
    recorded: dict[str, list[Rule]] = {}
    alerting: dict[str, list[Rule]] = {}
    for g, group in enumerate(groups):
        for r, rule in enumerate(group.get("rules") or []):
            if "ALERTS" in _names(str(rule.get("expr", ""))):
                raise ValueError(f"{rule} reads ALERTS: its case needs every alert")
            if "record" in rule:
                recorded.setdefault(rule["record"], []).append((g, r))
            else:
                alerting.setdefault(rule.get("alert", ""), []).append((g, r))
    wanted: set[Rule] = set()
    for check in case.get("alert_rule_test") or []:
        wanted.update(alerting.get(check.get("alertname", ""), []))
    todo = {n for check in case.get("promql_expr_test") or [] for n in _names(str(check.get("expr", "")))}
    for g, r in wanted:
        todo |= _names(str(groups[g]["rules"][r].get("expr", "")))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for g, r in recorded.get(name, []):
            wanted.add((g, r))
            todo |= _names(str(groups[g]["rules"][r].get("expr", "")))
    return frozenset(wanted)


def _rules_file(groups: list[dict[str, Any]], rules: Iterable[Rule]) -> dict[str, Any]:
    kept = set(rules)
    out = []
    for g, group in enumerate(groups):
        chosen = [rule for r, rule in enumerate(group.get("rules") or []) if (g, r) in kept]
        if chosen:
            out.append({**group, "rules": chosen})
    return {"groups": out}


def _split(folder: Path, files: Iterable[str], into: Path) -> list[str]:
    """Each test file's cases, written into `into` grouped by the rules they read."""
    written: list[str] = []
    for number, name in enumerate(files):
        document = yaml.safe_load((folder / name).read_text())
        groups = [
            group
            for rules_file in document.get("rule_files") or []
            for group in (yaml.safe_load((folder / rules_file).read_text()) or {}).get("groups") or []
        ]
        by_rules: dict[frozenset[Rule], list[dict[str, Any]]] = {}
        for case in document.get("tests") or []:
            by_rules.setdefault(_closure(groups, case), []).append(case)
        settings = {k: v for k, v in document.items() if k not in ("rule_files", "tests")}
        for part, (rules, cases) in enumerate(by_rules.items()):
            stem = f"{number}-{part}"
            (into / f"{stem}.rules.yaml").write_text(yaml.safe_dump(_rules_file(groups, rules), width=1000))
            test = {"rule_files": [f"{stem}.rules.yaml"], **settings, "tests": cases}
            (into / f"{stem}.test.yaml").write_text(yaml.safe_dump(test, width=1000, sort_keys=False))
            written.append(f"{stem}.test.yaml")
    return written


def rule_tests(folder: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """`promtool test rules FILES` in `folder`, each case against the rules it reads: the
    finished run (the caller asserts on it)."""
    with tempfile.TemporaryDirectory(prefix="promtool-") as tmp:
        split = _split(folder, files, Path(tmp))
        return subprocess.run(
            [prometheus_server.binary("promtool"), "test", "rules", *split],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
