"""kvscope.yaml: found by --config or $KVSCOPE_CONFIG, validated (unknown key or bad value: one
line, exit 64), and shown with where every effective value came from."""

from __future__ import annotations

import json

import pytest

from kvscope import config, exitcodes
from kvscope import thresholds as t
from kvscope.cli import main


def write(tmp_path, text: str):
    path = tmp_path / "kvscope.yaml"
    path.write_text(text)
    return path


def test_without_a_file_every_value_is_the_default(monkeypatch):
    monkeypatch.delenv(config.ENV, raising=False)
    settings = config.load()
    assert settings.path is None and settings.thresholds.value(t.KV_USAGE_CRITICAL) == t.KV_USAGE_CRITICAL.value
    assert settings.thresholds.source(t.KV_USAGE_CRITICAL) == "default"


def test_the_environment_names_the_file_and_the_flag_wins(tmp_path, monkeypatch):
    env = write(tmp_path, "thresholds: {kv_usage_critical: 0.8, kv_usage_warning: 0.7}\n")
    flag = tmp_path / "other.yaml"
    flag.write_text("thresholds: {kv_usage_critical: 0.7, kv_usage_warning: 0.6}\n")
    monkeypatch.setenv(config.ENV, str(env))
    assert config.load().thresholds.value(t.KV_USAGE_CRITICAL) == 0.8
    assert config.load(flag).thresholds.value(t.KV_USAGE_CRITICAL) == 0.7


def test_a_threshold_takes_a_value_or_a_value_and_a_for(tmp_path):
    settings = config.load(write(tmp_path, "thresholds:\n  queue_time_p99: {value: 2.5, for: 10m}\n"))
    limit = settings.thresholds[t.QUEUE_TIME_P99]
    assert (limit.value, limit.for_, settings.thresholds.source(t.QUEUE_TIME_P99)) == (2.5, "10m", str(settings.path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus: 1", "bogus: unknown key"),
        ("thresholds: {kv_usage_critcal: 0.9}", "unknown threshold 'kv_usage_critcal'"),
        ("thresholds: {kv_usage_critical: 1.5}", "kv_usage_critical must be in (0, 1]"),
        ("thresholds: {queue_backlog: -3}", "queue_backlog must be in (0, inf]"),
        ("thresholds: {ttft_p99: {value: 2, for: soon}}", "ttft_p99.for"),
        ("thresholds: {ttft_p99: {value: 2, for: 1.5m}}", "not a Prometheus duration"),
        ("thresholds: {ttft_p99: {value: 2, for: 30s5m}}", "not a Prometheus duration"),
        ("thresholds: {ttft_p99: {value: 2, for: 2h}}", "whole minutes up to 1h"),
        ("thresholds: {queue_backlog: .inf}", "queue_backlog must be in"),
        ("thresholds: {kv_usage_warning: 0.95}", "kv_usage_warning (0.95) must stay below kv_usage_critical (0.9)"),
        ("slo: {ttft: {objective: 0.9}}", "could never fire"),
        ("slo: {ttft: {seconds: 3}}", "must be a bucket bound of vllm:time_to_first_token_seconds"),
        ("slo: {itl: {seconds: 0, custom_buckets: true}}", "positive"),
        ("selectors: {gpu_host_label: HOSTNAME}", "gpu_host_label"),
        ("slo: {errors: {objective: 1}}", "slo.errors.objective"),
        ("slo: {windows: [{severity: critical, long: 2d, short: 5m, factor: 2}]}", "recorded windows"),
        ("slo: {min_bad_events: -1}", "slo.min_bad_events"),
        ("slo: {min_bad_events: .nan}", "slo.min_bad_events"),
        ("selectors: {engine: 'namespace=prod'}", "quoted"),
        ("gpu_models: {B300: {tdp_w: 1100}}", "a new model needs its NVML device name"),
        ("tiers: {gold: {}}", "put it under 'gateway:'"),
        ("thresholds: [1, 2]", "thresholds"),
        ("- a\n- b", "must be a mapping"),
        ("thresholds: {a: [", "not valid YAML"),
    ],
)
def test_a_bad_file_is_one_line_and_exit_64(tmp_path, capsys, text, message):
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError, match=None) as error:
        config.load(path)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert main(["config", "show", "--config", str(path)]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [["diagnose", "--bundle", "x.json"], ["alerts", "build"], ["dashboards", "build"]])
def test_every_command_refuses_a_bad_config(tmp_path, capsys, argv):
    path = write(tmp_path, "thresholds: {nope: 1}\n")
    assert main([*argv, "--config", str(path)]) == exitcodes.USAGE
    assert "unknown threshold 'nope'" in capsys.readouterr().err


def test_a_missing_file_is_named(tmp_path, capsys):
    assert main(["config", "show", "--config", str(tmp_path / "absent.yaml")]) == exitcodes.USAGE
    assert "cannot read" in capsys.readouterr().err


def test_gpu_model_overrides_change_the_table(tmp_path):
    models = config.load(write(tmp_path, "gpu_models: {H100: {tdp_w: 600}}\n")).gpu_models
    assert models.lookup("NVIDIA H100 80GB HBM3").tdp_w == 600
    assert models.lookup("NVIDIA H200").tdp_w == 700


def test_config_show_prints_every_value_with_its_source_and_hides_secrets(tmp_path, capsys):
    path = write(
        tmp_path,
        "thresholds: {kv_usage_critical: 0.8, kv_usage_warning: 0.7}\n"
        "slo: {ttft: {seconds: 5}}\n"
        "gateway: {tiers: {gold: {max_tokens: 64}}, tenants: {acme: {tier: gold, api_keys: [sk-secret]}}}\n"
        "export: {bearer_token: t0ken, gpu: emulated, vllm: ['http://user:hunter2@10.0.0.1:8000/metrics']}\n",
    )
    assert main(["config", "show", "--config", str(path), "--format", "json"]) == exitcodes.OK
    shown = json.loads(capsys.readouterr().out)
    values = {v["key"]: v for v in shown["values"]}
    assert {f"thresholds.{x.key}" for x in t.all_thresholds()} <= set(values)
    assert values["thresholds.kv_usage_critical"] == {
        "key": "thresholds.kv_usage_critical",
        "value": 0.8,
        "source": str(path),
    }
    assert values["thresholds.queue_backlog"]["source"] == "default"
    assert values["slo.ttft.seconds"]["value"] == 5 and values["slo.ttft.seconds"]["source"] == str(path)
    assert values["slo.ttft.objective"]["source"] == "default"
    assert values["gateway.tenants.acme.api_keys"]["value"] == "***"
    assert values["export.bearer_token"]["value"] == "***" and values["export.gpu"]["value"] == "emulated"
    assert values["gateway.tiers.gold.max_tokens"]["value"] == 64  # a limit, not a secret
    assert values["export.vllm"]["value"] == ["http://user:***@10.0.0.1:8000/metrics"]
    for secret in ("sk-secret", "t0ken", "hunter2"):
        assert secret not in json.dumps(shown)
    assert main(["config", "show", "--config", str(path)]) == exitcodes.OK
    assert "thresholds.kv_usage_critical" in capsys.readouterr().out


def test_a_fleet_with_custom_buckets_may_set_any_slo_bound_and_names_its_host_label(tmp_path):
    text = "slo: {ttft: {seconds: 3, custom_buckets: true}}\nselectors: {gpu_host_label: Hostname}\n"
    loaded = config.load(write(tmp_path, text))
    assert loaded.slo.ttft.seconds == 3 and loaded.gpu_host_label == "Hostname"
    assert config.Config().gpu_host_label == "hostname"  # dcgm-exporter's current spelling


def test_the_burn_rate_guard_on_few_events_follows_the_config(tmp_path):
    from alerts import build

    def ticket(cfg: config.Config) -> str:
        rules, _ = build.build_rules(cfg)
        return next(r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "SLOItlBurnRateTicket")

    assert 'slo:sli_events:increase3d{slo="itl"} >= 2000' in ticket(config.load(None, environ={}))
    assert 'slo:sli_events:increase3d{slo="itl"} >= 5000' in ticket(
        config.load(write(tmp_path, "slo: {min_bad_events: 50}"))
    )
    unguarded = config.load(write(tmp_path, "slo: {min_bad_events: 0}"))
    assert "sli_events" not in ticket(unguarded)
    rules, _ = build.build_rules(unguarded)
    assert not [r for g in rules["groups"] for r in g["rules"] if "sli_events" in r.get("record", "")]
