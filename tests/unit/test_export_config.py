"""`kvscope export` configuration (kvscope.yaml's `export:` section): keys equal the flags, flags
win, errors are one line;
and the deploy manifests carry a working exporter command line."""

from pathlib import Path

import pytest
import yaml

from exporter.config import DEFAULT_PORT, ConfigError, assemble, load

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
    assert names == ["vllm", "emulated", "health", "xid", "topology", "process", "roofline", "host"]


def test_none_backend_serves_host_only():
    assert [c.name for c in assemble(load(None, {"gpu": "none", "discover": ["none"]})).collectors] == ["host"]
    # with no vllm list, the engines on this machine are looked for (procfs) and scraped
    assert [c.name for c in assemble(load(None, {"gpu": "none"})).collectors] == ["discovery", "vllm", "host"]


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
    assert container["args"][0] == "export" and f"--web.listen-address=0.0.0.0:{DEFAULT_PORT}" in container["args"]
    assert docs["Service"]["spec"]["ports"][0]["port"] == DEFAULT_PORT
    assert docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    path = tmp_path / "kvscope.yaml"
    path.write_text(docs["ConfigMap"]["data"]["kvscope.yaml"])
    assert "--config=/etc/kvscope/kvscope.yaml" in container["args"]
    loaded = load(path, {})
    assert loaded.vllm == [] and loaded.discovery_methods == ["kubernetes"]  # the node's pods, found


def test_the_default_port_is_not_dcgm_exporters_so_both_run_on_one_node():
    config = load(None, {})
    assert config.port == DEFAULT_PORT != 9400 and config.host == "127.0.0.1"


def test_host_label_spelling_is_a_flag_and_a_yaml_key_defaulting_to_the_current_release(tmp_path):
    assert load(None, {}).hostname_label == "hostname"
    path = tmp_path / "export.yaml"
    path.write_text("export:\n  hostname-label: Hostname\n")
    assert load(path, {}).hostname_label == "Hostname"
    assert load(path, {"hostname_label": "none"}).hostname_label == "none"
    with pytest.raises(ConfigError, match="hostname_label"):
        load(None, {"hostname_label": "HOSTNAME"})


def test_emulated_assembly_writes_the_chosen_host_label_and_mig_layout():
    from exporter.registry import Exporter
    from kvscope import catalog, promtext

    assembly = assemble(load(None, {"gpu": "emulated", "emulated_gpus": 1, "hostname_label": "Hostname",
                                    "emulated_mig": "4g.40gb,3g.40gb"}))  # fmt: skip
    samples = promtext.parse(Exporter(assembly.collectors, interval=0).page().decode())
    used = promtext.select(samples, catalog.DCGM_FB_USED.name)
    assert {s.labels.get("GPU_I_PROFILE") for s in used} == {None, "4g.40gb", "3g.40gb"}
    assert all("Hostname" in s.labels and "hostname" not in s.labels for s in used)
    assert promtext.select(samples, catalog.DCGM_EXP_HEALTH.name, health_watch="MEM")


def test_a_bad_emulated_mig_layout_is_one_line_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--emulated-mig: .*not like 1g\.10gb"):
        assemble(load(None, {"gpu": "emulated", "emulated_mig": "big"}))


def test_the_kernel_log_source_follows_the_backend_and_can_be_pointed_elsewhere(tmp_path):
    def kmsg(overrides):
        xid = next(c for c in assemble(load(None, overrides)).collectors if c.name == "xid")
        return xid.kmsg

    assert kmsg({"gpu": "emulated"}) is None  # the host's kernel log has no emulated GPUs
    stand_in = tmp_path / "kmsg"
    stand_in.write_text("")
    assert kmsg({"gpu": "emulated", "xid_kmsg": str(stand_in)}).path == str(stand_in)
