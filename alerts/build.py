"""`kvscope alerts build`: the rule files, as plain Prometheus rules and as a PrometheusRule
resource, plus promtool unit tests for every alert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alerts import definitions as d
from alerts.templates import render
from kvscope import catalog

ALERTS_DIR = Path(__file__).resolve().parent
RULES_FILE = "kvscope-rules.yaml"
TESTS_FILE = "kvscope-rules.test.yaml"
OPERATOR_FILE = Path(__file__).resolve().parent.parent / "deploy" / "prometheus-rule.yaml"


def diagnose_command(scope: str) -> str:
    command = "kvscope diagnose --prometheus {{ $externalURL }} --window 30m"
    if scope:
        command += f" --selector '{{{scope}=\"{{{{ $labels.{scope} }}}}\"}}'"
    return command


def _annotations(alert: d.Alert, runbook_base: str) -> dict[str, str]:
    return {
        "summary": alert.summary,
        "description": f"{alert.description} Diagnose: {diagnose_command(alert.diagnose_scope)}",
        "runbook_url": f"{runbook_base}#{alert.anchor}",
    }


def _rule(alert: d.Alert, runbook_base: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": alert.name, "expr": alert.expr}
    if alert.for_ not in ("", "0m", "0s"):
        rule["for"] = alert.for_
    rule["labels"] = {"severity": alert.severity}
    rule["annotations"] = _annotations(alert, runbook_base)
    return rule


def slo_rules(slos: list[d.Slo], runbook_base: str) -> tuple[dict[str, Any], list[d.Alert]]:
    """The recording rules (one per window and SLO) and the burn-rate alerts."""
    records: list[dict[str, Any]] = []
    alerts: list[d.Alert] = []
    for slo in slos:
        for window, signal in catalog.SLO_ERROR_RATIO.items():
            good, total = slo.good.replace("[W]", f"[{window}]"), slo.total.replace("[W]", f"[{window}]")
            records.append({"record": signal.name, "expr": f"1 - ({good} / {total})", "labels": {"slo": slo.name}})
        records.append(
            {"record": catalog.SLO_OBJECTIVE.name, "expr": f"vector({slo.objective})", "labels": {"slo": slo.name}}
        )
        good, total = slo.good.replace("[W]", "[30d]"), slo.total.replace("[W]", "[30d]")
        records.append(
            {
                "record": catalog.SLO_BUDGET_REMAINING.name,
                "expr": f"1 - (1 - ({good} / {total})) / {1 - slo.objective:.6g}",
                "labels": {"slo": slo.name},
            }
        )
        alerts += _burn_alerts(slo)
    return {"name": "kvscope-slo-recording", "rules": records}, alerts


def _burn_alerts(slo: d.Slo) -> list[d.Alert]:
    budget = 1 - slo.objective
    out = []
    for severity, kind in (("critical", "Page"), ("warning", "Ticket")):
        pairs = [(long, short, factor) for sev, long, short, factor in d.BURN_RATES if sev == severity]

        def ratio(w: str) -> str:
            return f'{catalog.SLO_ERROR_RATIO[w].name}{{slo="{slo.name}"}}'

        expr = " or ".join(
            f"({ratio(long)} > ({factor:g} * {budget:.6g}) and {ratio(short)} > ({factor:g} * {budget:.6g}))"
            for long, short, factor in pairs
        )
        name = f"SLO{slo.name.capitalize()}BurnRate{kind}"
        windows = " and ".join(f"{f:g}x over {lw} and {sw}" for lw, sw, f in pairs)
        out.append(
            d.Alert(
                name,
                expr,
                severity,
                f"The {slo.name} SLO burns its 30-day error budget too fast.",
                f"SLO '{slo.description}': the error ratio of "
                "{{ $labels.namespace }}/{{ $labels.model_name }} is "
                "{{ $value | humanizePercentage }}, burning the budget at "
                f"{'/'.join(f'{p[2]:g}' for p in pairs)}x or more ({windows}).",
                fires=_burn_case(slo, pairs[0], max(p[2] for p in pairs), fires=True),
                silent=_burn_case(slo, pairs[0], min(p[2] for p in pairs), fires=False),
                diagnose_scope="namespace",
                group="kvscope-slo",
            )
        )
    return out


def _burn_case(slo: d.Slo, pair: tuple[str, str, float], factor: float, fires: bool) -> d.Case:
    """Input counters with a bad share of 1.5x `factor` x the budget (fires), or 0.9x (silent)."""
    long_window = pair[0]
    bad_share = min(0.9, (1 - slo.objective) * factor * (1.5 if fires else 0.9))
    points = {"1h": 90, "6h": 420, "1d": 180, "3d": 480}[long_window]
    at = {"1h": "80m", "6h": "410m", "1d": "1750m", "3d": "4750m"}[long_window]
    labels = '{namespace="prod",model_name="m"'
    if slo.name == "ttft":
        series = {
            f'{catalog.VLLM_TTFT.name}_bucket{labels},le="2.5"}}': f"0+{100 * (1 - bad_share):g}x{points}",
            f"{catalog.VLLM_TTFT.name}_count{labels}}}": f"0+100x{points}",
        }
    else:
        series = {
            f'{catalog.VLLM_REQUEST_SUCCESS.name}{labels},finished_reason="length"}}': (
                f"0+{100 * (1 - bad_share):g}x{points}"
            ),
            f'{catalog.VLLM_REQUEST_SUCCESS.name}{labels},finished_reason="error"}}': f"0+{100 * bad_share:g}x{points}",
        }
    return (
        d.Case(
            series,
            at,
            {"namespace": "prod", "model_name": "m", "slo": slo.name},
            round(bad_share, 6) if fires else None,
        )
        if fires
        else d.Case(series, at)
    )


def build_rules(runbook_base: str = d.RUNBOOK_BASE, **slo_options: float) -> tuple[dict[str, Any], list[d.Alert]]:
    recording, slo_alerts = slo_rules(d.slos(**slo_options), runbook_base)
    groups = [recording]
    everything = []
    for group, alerts in (
        ("kvscope-engine", d.engine_alerts()),
        ("kvscope-gpu", d.gpu_alerts()),
        ("kvscope-slo", slo_alerts),
    ):
        groups.append({"name": group, "rules": [_rule(a, runbook_base) for a in alerts]})
        everything += alerts
    return {"groups": groups}, everything


def _test(alert: d.Alert, case: d.Case, runbook_base: str, step: str) -> dict[str, Any]:
    checks: list[dict[str, Any]] = []
    if case.value is not None and alert.for_ not in ("", "0m", "0s"):
        minutes = int(alert.for_.removesuffix("m"))
        checks.append({"eval_time": f"{max(minutes - 1, 0)}m", "alertname": alert.name, "exp_alerts": []})
    if case.value is None:
        checks.append({"eval_time": case.at, "alertname": alert.name, "exp_alerts": []})
    else:
        labels = {"severity": alert.severity, **case.labels}
        annotations = _annotations(alert, runbook_base)
        expanded = {k: render(v, labels, case.value) for k, v in annotations.items()}
        checks.append(
            {
                "eval_time": case.at,
                "alertname": alert.name,
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": expanded}],
            }
        )
    return {
        "name": f"{alert.name}: {'fires' if case.value is not None else 'silent just below'}",
        "interval": step,
        "input_series": [{"series": k, "values": v} for k, v in case.series.items()],
        "alert_rule_test": checks,
    }


def build_tests(alerts: list[d.Alert], runbook_base: str = d.RUNBOOK_BASE) -> dict[str, Any]:
    tests = []
    for alert in alerts:
        step = "10m" if any(w in alert.expr for w in ("rate1d", "rate3d")) else "1m"
        tests.append(_test(alert, alert.fires, runbook_base, step))
        tests.append(_test(alert, alert.silent, runbook_base, step))
    return {"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": tests}


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=1000, allow_unicode=True)


def render_all(runbook_base: str = d.RUNBOOK_BASE, **slo_options: float) -> dict[str, str]:
    """File name -> content: the rule file, its promtool tests, the PrometheusRule resource."""
    rules, alerts = build_rules(runbook_base, **slo_options)
    header = "# Generated by `kvscope alerts build` from kvscope/catalog.py and kvscope/thresholds.py: do not edit.\n"
    operator = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kvscope",
            "namespace": "monitoring",
            "labels": {"app.kubernetes.io/name": "kvscope", "release": "kube-prometheus-stack"},
        },
        "spec": rules,
    }
    return {
        RULES_FILE: header + _dump(rules),
        TESTS_FILE: header + _dump(build_tests(alerts, runbook_base)),
        "prometheus-rule.yaml": header + _dump(operator),
    }


def write(
    out: Path = ALERTS_DIR,
    operator: Path | None = OPERATOR_FILE,
    runbook_base: str = d.RUNBOOK_BASE,
    **slo_options: float,
) -> list[Path]:
    """Write the files; the PrometheusRule goes to deploy/ when writing into alerts/ itself."""
    if out != ALERTS_DIR:
        operator = None
    written = []
    for name, text in render_all(runbook_base, **slo_options).items():
        path = operator if name == "prometheus-rule.yaml" and operator is not None else out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
