"""`kvscope export` configuration (kvscope.yaml's `export:` section): keys equal the flags, flags
win, errors are one line;
and the deploy manifests carry a working exporter command line."""

from pathlib import Path

import pytest
import yaml

from exporter.config import ConfigError, assemble, load

ROOT = Path(__file__).resolve().parents[2]


def test_yaml_keys_equal_the_flags_and_flags_win(tmp_path):
    path = tmp_path / "export.yaml"
    path.write_text(
        "export:\n  web.listen-address: 0.0.0.0:9500\n  gpu: emulated\n  vllm: [http://a:8000/metrics]\n"
        "  collect-interval: 2\n  emulated_gpus: 8\n"
    )
    config = load(path, {"collect_interval": 0.5, "gpu": None})
    assert (config.host, config.port, config.gpu, config.collect_interval) == (
        "0.0.0.0",
        9500,
        "emulated",
        0.5,
    )
    assert config.vllm == ["http://a:8000/metrics"] and config.emulated_gpus == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gpu": "tpu"}, "gpu"),
        ({"listen_address": "nowhere"}, "host:port"),
        ({"tls_cert": "c.pem"}, "tls_cert and tls_key go together"),
        ({"bearer_token": "t", "bearer_token_file": "t.txt"}, "not both"),
        ({"tls_cert": "c.pem", "tls_key": "k.pem", "web_config_file": "w.yml"}, "not both"),
        ({"basic_auth": {"username": "u", "password": "p"}}, "basic_auth: unknown key"),  # bcrypt: web config
    ],
)
def test_bad_configuration_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        load(None, overrides)
    assert "\n" not in str(error.value)


def test_emulated_assembly_orders_vllm_before_the_gpus_it_follows():
    names = [
        c.name for c in assemble(load(None, {"gpu": "emulated", "vllm": ["http://127.0.0.1:9/metrics"]})).collectors
    ]
    assert names == ["vllm", "emulated", "xid", "topology", "process", "host"]


def test_none_backend_serves_host_only():
    assert [c.name for c in assemble(load(None, {"gpu": "none"})).collectors] == ["host"]


def test_the_daemonset_runs_the_exporter_on_the_service_port(tmp_path):
    docs = {
        d["kind"]: d
        for f in (
            "exporter-daemonset.yaml",
            "exporter-service.yaml",
            "exporter-servicemonitor.yaml",
        )
        for d in yaml.safe_load_all((ROOT / "deploy" / f).read_text())
    }
    container = docs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "export" and "--web.listen-address=0.0.0.0:9400" in container["args"]
    assert docs["Service"]["spec"]["ports"][0]["port"] == 9400
    assert docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    path = tmp_path / "kvscope.yaml"
    path.write_text(docs["ConfigMap"]["data"]["kvscope.yaml"])
    assert "--config=/etc/kvscope/kvscope.yaml" in container["args"]
    assert load(path, {}).vllm == ["http://127.0.0.1:8000/metrics"]
