"""Generated alert rules and dashboards: committed and current, valid for promtool and Grafana's
schema, every query parses and names only catalog metrics, every alert has a runbook."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

from alerts import build as alert_build
from alerts import runbook
from dashboards import build as dash_build
from drill import prometheus_server
from kvscope import catalog
from kvscope.promql import metric_names
from tests.promtool import rule_tests

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / runbook.RUNBOOKS_FILE
KNOWN = {n for s in catalog.all_signals() for n in s.every_name}


def known(name: str) -> bool:
    return name in KNOWN or re.sub(r"_(bucket|sum|count)$", "", name) in KNOWN


def promtool() -> str:
    return prometheus_server.binary("promtool")


# --- alert rules -------------------------------------------------------------------------


def test_committed_rule_files_match_the_generator():
    for name, text in alert_build.render_all().items():
        path = ROOT / "deploy" / name if name == "prometheus-rule.yaml" else ROOT / "alerts" / name
        assert path.read_text() == text, f"{path} is stale: run `make generate`"
    assert RUNBOOKS.read_text() == runbook.render(), "docs/runbooks.md is stale: run `make generate`"


def test_promtool_checks_the_rules_and_the_prometheusrule_spec(tmp_path):
    result = subprocess.run(
        [promtool(), "check", "rules", str(ROOT / "alerts" / alert_build.RULES_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    spec = yaml.safe_load((ROOT / "deploy" / "prometheus-rule.yaml").read_text())
    assert spec["kind"] == "PrometheusRule" and spec["apiVersion"] == "monitoring.coreos.com/v1"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec["spec"]))
    result = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "spec.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.slow  # promtool over every alert's cases (about 20 s)
def test_promtool_unit_tests_prove_every_alert_fires_and_stays_silent_just_below():
    result = rule_tests(ROOT / "alerts", *alert_build.TESTS_FILES)
    assert result.returncode == 0, result.stdout[-3000:]
    tests = [
        t for name in alert_build.TESTS_FILES for t in yaml.safe_load((ROOT / "alerts" / name).read_text())["tests"]
    ]
    _, alerts = alert_build.build_rules()
    for alert in alerts:
        mine = [t for t in tests if t["name"].startswith(alert.name + ":")]
        assert len(mine) == 2 + len(alert.more), alert.name
        assert sum(t["name"].endswith("silent just below") for t in mine) == 1, alert.name
        fires = next(t for t in mine if t["name"].endswith("fires"))
        assert fires["alert_rule_test"][-1]["exp_alerts"], alert.name
        if alert.for_ not in ("0m", ""):
            assert fires["alert_rule_test"][0]["exp_alerts"] == [], f"{alert.name}: not checked before its for:"


def test_every_alert_follows_the_conventions():
    rules, alerts = alert_build.build_rules()
    names = [a.name for a in alerts]
    assert len(names) == len(set(names))
    seeds = {"GPUMemoryFull", "GPUUtilLow", "GPUXIDReported", "VLLMQueueBacklog", "VLLMTTFTHigh"}
    assert seeds <= set(names)  # seed 002 section 6's set, under kvscope's names
    page = RUNBOOKS.read_text()
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert rule["annotations"]["summary"] and "{{" not in rule["annotations"]["summary"]
            assert "kvscope diagnose --prometheus" in rule["annotations"]["description"]
            anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
            assert f'<a id="{anchor}"></a>' in page, rule["alert"]


def test_rule_expressions_name_only_catalog_metrics():
    rules, _ = alert_build.build_rules()
    for group in rules["groups"]:
        for rule in group["rules"]:
            strays = {n for n in metric_names(rule["expr"]) if not known(n)}
            assert not strays, (rule.get("alert") or rule.get("record"), strays)


# --- dashboards --------------------------------------------------------------------------

BOARDS = sorted(dash_build.BOARDS)


def panels(board: dict) -> list[dict]:
    out = []
    for p in board["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


@pytest.mark.parametrize("name", BOARDS)
def test_committed_dashboard_matches_the_generator(name):
    assert (ROOT / "dashboards" / f"{name}.json").read_text() == dash_build.render(name), "run `make generate`"


@pytest.mark.parametrize("name", BOARDS)
def test_dashboard_round_trips_through_the_sdk_model(name):
    data = json.loads(dash_build.render(name))
    again = json.loads(json.dumps(model.Dashboard.from_json(data), cls=JSONEncoder))
    assert again == data


@pytest.mark.parametrize("name", BOARDS)
def test_every_panel_has_a_unique_id_title_datasource_and_unit(name):
    data = json.loads(dash_build.render(name))
    ids = [p["id"] for p in panels(data)]
    assert len(ids) == len(set(ids))
    for p in panels(data):
        assert p.get("title"), p
        if p["type"] in ("row", "text"):
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["fieldConfig"]["defaults"].get("unit"), p["title"]
        assert p["fieldConfig"]["defaults"].get("thresholds"), p["title"]
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]


def test_dashboards_have_the_template_variables():
    overview = {v["name"] for v in json.loads(dash_build.render("llm-serving-overview"))["templating"]["list"]}
    assert {"datasource", "namespace", "instance", "model_name", "gpu"} <= overview
    gpu = {v["name"] for v in json.loads(dash_build.render("gpu-fleet"))["templating"]["list"]}
    assert {"datasource", "hostname", "gpu"} <= gpu


def grafana_to_promql(expr: str) -> str:
    """Grafana's variables as a query would see them with 'All' selected."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__range", "1h").replace("$__interval", "1m")
    return re.sub(r"\$\{?(namespace|instance|model_name|gpu|hostname|tenant)\}?", ".*", expr)


def dashboard_queries() -> list[tuple[str, str, str]]:
    out = []
    for name in BOARDS:
        for p in panels(json.loads(dash_build.render(name))):
            for target in p.get("targets", []):
                out.append((name, p["title"], grafana_to_promql(target["expr"])))
    return out


def test_every_dashboard_query_parses_for_promtool(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": f"dashboard:query_{i}:check", "expr": expr}
                    for i, (_, _, expr) in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-3000:]


def test_every_dashboard_query_names_only_catalog_metrics():
    for board, title, expr in dashboard_queries():
        strays = {n for n in metric_names(expr) if not known(n)}
        assert not strays, (board, title, strays)


def test_threshold_lines_are_the_thresholds_table():
    overview = json.loads(dash_build.render("llm-serving-overview"))
    kv = next(p for p in panels(overview) if p["title"] == "KV-cache usage per instance")
    steps = [s["value"] for s in kv["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    from kvscope import thresholds as t

    assert steps == [None, t.KV_USAGE_WARNING.value, t.KV_USAGE_CRITICAL.value]


def test_every_alert_names_the_incidents_that_explain_it():
    """`kvscope diagnose` reads the annotation back to say which incident explains a firing alert;
    only the alerts about the monitoring itself name none."""
    from alerts import build as alert_build
    from diagnosis.findings import VOCABULARY

    rules, alerts = alert_build.build_rules()
    for alert in alerts:
        assert set(alert.explained_by) <= set(VOCABULARY), alert.name
        assert alert.explained_by or alert.name.startswith("Kvscope"), alert.name
    annotated = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert all("explained_by" in r["annotations"] for r in annotated)
