"""deploy/: Kubernetes manifests that apply. Committed as the generator writes them, valid for a
pinned Kubernetes and for the Prometheus Operator's CRDs, the PrometheusRule carrying exactly
the promtool-tested groups, probes that pass with auth on, RBAC that reads pods only, the
exporter's own port, the namespace and labels from kvscope.yaml, and an image build that
installs kvscope without vLLM."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from alerts import build as alert_build
from alerts import definitions, deploy
from exporter import config as export_config
from exporter.registry import Exporter
from exporter.server import OPEN_PATHS, build_app, guarded
from exporter.web_config import WebConfig
from kvscope import exitcodes
from kvscope.cli import main
from kvscope.config import Config, ConfigError, ConfigFile, Deploy, with_deploy

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Pinned: a minor still common in production clusters, and the newest that kubernetes-validate
# 1.37.0 bundles (an API removed on the way would fail the second).
KUBERNETES = ("1.32.0", "1.37.0")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
AUTH_ON = Config(
    ConfigFile(
        deploy=Deploy(
            namespace="gpu-observability",
            labels={"release": "prom", "team": "inference"},
            bearer_token_secret="kvscope-exporter-token",
            tls_secret="kvscope-exporter-tls",
        )
    )
)


def docs(files: dict[str, str]) -> list[dict[str, Any]]:
    return [
        doc
        for name, text in files.items()
        if name != deploy.KUSTOMIZATION_FILE
        for doc in yaml.safe_load_all(text)
        if doc is not None
    ]


def kinds(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs(files)}


def exporter_container(files: dict[str, str]) -> dict[str, Any]:
    (container,) = kinds(files)["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return container


# --- committed and current --------------------------------------------------------------------


def test_committed_deploy_files_are_the_generators_default():
    files = deploy.render()
    for name, text in files.items():
        assert (DEPLOY / name).read_text() == text, f"deploy/{name} is stale: run `kvscope alerts build`"
    assert {p.name for p in DEPLOY.glob("*.yaml")} == set(files), "a manifest no generator writes"


def test_the_kustomization_lists_every_manifest():
    files = deploy.render()
    kustomization = yaml.safe_load(files[deploy.KUSTOMIZATION_FILE])
    assert kustomization["kind"] == "Kustomization"
    assert set(kustomization["resources"]) == set(files) - {deploy.KUSTOMIZATION_FILE}


def test_the_prometheusrule_carries_exactly_the_promtool_tested_groups():
    rule = yaml.safe_load((DEPLOY / alert_build.OPERATOR_FILE).read_text())
    tested = yaml.safe_load((ROOT / "alerts" / alert_build.RULES_FILE).read_text())
    assert rule["spec"] == tested
    custom = kinds(deploy.render(AUTH_ON))["PrometheusRule"]
    assert custom["spec"] == alert_build.build_rules(AUTH_ON, deploy.runbook_base(AUTH_ON))[0]


# --- schemas -----------------------------------------------------------------------------------


KUBELET = Config(ConfigFile(deploy=Deploy(discover="kubelet", kubelet_insecure_skip_verify=True)))


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("config", [Config(), AUTH_ON, KUBELET], ids=["default", "auth-on", "kubelet"])
def test_every_manifest_is_valid_for_the_pinned_kubernetes(config, version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    checked = 0
    for doc in docs(deploy.render(config)):
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)  # strict: unknown fields are errors
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
        checked += 1
    assert checked == 6  # ServiceAccount, ClusterRole, ClusterRoleBinding, DaemonSet, ConfigMap, Service


def test_the_validator_catches_a_wrong_manifest():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    daemonset = kinds(deploy.render())["DaemonSet"]
    daemonset["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9408"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES[0], strict=True)


@pytest.mark.parametrize("config", [Config(), AUTH_ON], ids=["default", "auth-on"])
def test_the_operator_resources_are_valid_for_the_prometheus_operator_crds(config):
    # the CRDs' openAPIV3Schema as pydantic models (prometheus-operator v0.80.1): types, enums and
    # patterns are checked by validation, unknown fields by the round trip dropping them
    crds = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    for doc in docs(deploy.render(config)):
        if doc["kind"] not in CRD_KINDS:
            continue
        model = getattr(crds, doc["kind"]).model_validate(doc)
        assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc, doc["kind"]


def test_the_crd_check_catches_a_wrong_servicemonitor():
    crds = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    monitor = kinds(deploy.render())["ServiceMonitor"]
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(ValueError, match="pattern"):
        crds.ServiceMonitor.model_validate(monitor)
    monitor["spec"]["endpoints"][0] |= {"interval": "15s", "bearerTokenSecrett": {}}
    dumped = crds.ServiceMonitor.model_validate(monitor).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert dumped != monitor


# --- the exporter as deployed ------------------------------------------------------------------


def test_the_exporter_serves_on_its_own_port_not_dcgm_exporters():
    assert deploy.PORT == export_config.DEFAULT_PORT != 9400
    files = deploy.render()
    container = exporter_container(files)
    assert container["ports"] == [{"name": "metrics", "containerPort": export_config.DEFAULT_PORT}]
    assert f"--web.listen-address=0.0.0.0:{export_config.DEFAULT_PORT}" in container["args"]
    assert kinds(files)["Service"]["spec"]["ports"][0]["port"] == export_config.DEFAULT_PORT
    assert "9400" not in yaml.safe_dump(docs(files))  # comments may name it, no value does


@pytest.mark.parametrize("config", [Config(), AUTH_ON], ids=["default", "auth-on"])
def test_probes_ask_only_for_routes_the_exporter_leaves_open(config):
    container = exporter_container(deploy.render(config))
    tls = config.deploy.tls_secret is not None
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] in OPEN_PATHS and get["port"] == "metrics"
        assert get["scheme"] == ("HTTPS" if tls else "HTTP")


def test_with_a_bearer_token_the_probes_pass_and_metrics_need_the_token(tmp_path):
    container = exporter_container(deploy.render(AUTH_ON))
    token_arg = next(a for a in container["args"] if a.startswith("--bearer-token-file="))
    token = tmp_path / Path(token_arg.partition("=")[2]).name
    token.write_text("s3cret\n")
    config = export_config.load(None, {"gpu": "none", "bearer_token_file": token})
    assembly = export_config.assemble(config)
    exporter = Exporter(assembly.collectors, interval=0)
    with TestClient(guarded(build_app(exporter, assembly), config, WebConfig())) as client:
        for probe in ("readinessProbe", "livenessProbe"):
            assert client.get(container[probe]["httpGet"]["path"]).status_code == 200, probe
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"authorization": "Bearer s3cret"}).status_code == 200
    exporter.stop()


def test_the_daemonsets_args_and_configmap_are_what_kvscope_export_accepts(tmp_path, capsys, monkeypatch):
    # what the pod has: the API server's address and its node's name (nothing answers here, so the
    # discovery collector fails and costs only its own series)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    monkeypatch.setenv("NODE_NAME", "node-1")
    files = deploy.render()
    settings = tmp_path / "kvscope.yaml"
    settings.write_text(kinds(files)["ConfigMap"]["data"]["kvscope.yaml"])
    args = [a.replace(f"{deploy.CONFIG_DIR}/kvscope.yaml", str(settings)) for a in exporter_container(files)["args"]]
    assert args[0] == "export"
    assert main([*args, "--xid-kmsg=none", "--once"]) == exitcodes.OK  # no GPU here: auto finds none
    assert "kvscope_exporter" in capsys.readouterr().out


def test_with_auth_on_prometheus_scrapes_with_the_token_over_verified_tls():
    files = deploy.render(AUTH_ON)
    (endpoint,) = kinds(files)["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "kvscope-exporter-tls", "key": "ca.crt"}
    assert endpoint["authorization"]["credentials"] == {"name": "kvscope-exporter-token", "key": "token"}
    container = exporter_container(files)
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert {deploy.TOKEN_DIR, deploy.TLS_DIR} <= mounted
    assert f"--tls-cert={deploy.TLS_DIR}/tls.crt" in container["args"]


def test_rbac_reads_pods_only_and_the_node_name_comes_from_the_downward_api():
    files = deploy.render()
    found = kinds(files)
    assert found["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = found["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == found["ClusterRole"]["metadata"]["name"]
    account = found["ServiceAccount"]["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    pod = found["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["name"]
    env = {e["name"]: e for e in exporter_container(files)["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "field selector" in files[deploy.RBAC_FILE] and "cannot restrict" in files[deploy.RBAC_FILE]


# --- namespace, labels, runbooks --------------------------------------------------------------


def test_namespace_and_labels_come_from_kvscope_yaml_not_hard_coded():
    files = deploy.render(AUTH_ON)
    text = "".join(files.values())
    assert "kube-prometheus-stack" not in text and "namespace: monitoring" not in text
    for doc in docs(files):
        labels = doc["metadata"]["labels"]
        assert labels["release"] == "prom" and labels["team"] == "inference", doc["kind"]
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == "gpu-observability", doc["kind"]
    assert kinds(files)["ClusterRoleBinding"]["subjects"][0]["namespace"] == "gpu-observability"
    # selectors keep kvscope's own label only, so a label added later does not orphan the pods
    assert kinds(files)["DaemonSet"]["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": deploy.NAME}


def test_kvscope_alerts_deploy_writes_the_manifests_with_the_flags(tmp_path, capsys):
    settings = tmp_path / "kvscope.yaml"
    settings.write_text("deploy:\n  labels: {team: inference}\n  image: registry.local/kvscope:dev\n")
    out = tmp_path / "manifests"
    argv = ["alerts", "deploy", "--config", str(settings), "--out", str(out), "--namespace", "gpu"]
    assert main([*argv, "--label", "release=prom"]) == exitcodes.OK
    assert {p.name for p in out.iterdir()} == set(deploy.render())
    rule = yaml.safe_load((out / alert_build.OPERATOR_FILE).read_text())
    assert rule["metadata"]["namespace"] == "gpu"
    assert rule["metadata"]["labels"] | {"release": "prom", "team": "inference"} == rule["metadata"]["labels"]
    daemonset = yaml.safe_load_all((out / deploy.DAEMONSET_FILE).read_text())
    assert next(daemonset)["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/kvscope:dev"
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--namespace", "GPU_Mon"], "DNS-1123"),
        (["--label", "release"], "key=value"),
        (["--label", "bad key=x"], "label key"),
        (["--label", "app.kubernetes.io/name=x"], "selector label"),
        (["--runbook-base", "docs/runbooks.md"], "URL"),
    ],
)
def test_a_bad_namespace_label_or_url_is_refused_in_one_line(tmp_path, capsys, flags, message):
    assert main(["alerts", "deploy", "--out", str(tmp_path), *flags]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_a_label_value_that_yaml_reads_as_a_number_must_be_quoted():
    with pytest.raises(ConfigError, match="quote"):
        with_deploy(Config(), labels={"generation": 2})


def test_runbook_urls_open_the_runbooks_this_repository_ships():
    base = definitions.RUNBOOK_BASE
    assert base.startswith(definitions.REPOSITORY + "/blob/")
    shipped = ROOT / base.removeprefix(definitions.REPOSITORY + "/blob/").partition("/")[2]
    assert shipped == ROOT / "docs" / "runbooks.md" and shipped.is_file()
    page = shipped.read_text()
    rule = yaml.safe_load((DEPLOY / alert_build.OPERATOR_FILE).read_text())
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert urls
    for url in urls:
        page_url, _, anchor = url.partition("#")
        assert page_url == base and f'<a id="{anchor}"></a>' in page, url


def test_a_fork_points_the_runbooks_at_its_own_copy_in_kvscope_yaml():
    mirror = "https://git.example.com/ml/kvscope/-/blob/main/docs/runbooks.md"
    config = Config(ConfigFile(deploy=Deploy(runbook_base=mirror)))
    for name, text in alert_build.render_all(config).items():
        urls = re.findall(r"runbook_url: (\S+)", text)
        assert urls and all(u.startswith(mirror + "#") for u in urls), name
    assert definitions.REPOSITORY not in "".join(deploy.render(config).values())


# --- the image ---------------------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Containerfile").read_text().replace("\\\n", " ")
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_containerfile_builds_a_non_root_kvscope_image_on_the_exporters_port():
    steps = instructions()
    base = next(arg for op, arg in steps if op == "ARG" and arg.startswith("PYTHON_IMAGE="))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.1[1-9]-slim(-\w+)?", base)
    assert [arg for op, arg in steps if op == "FROM"] == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    assert "COPY --from=build /opt/kvscope /opt/kvscope" in [f"{op} {arg}" for op, arg in steps]
    assert ("EXPOSE", str(export_config.DEFAULT_PORT)) in steps
    assert ("ENTRYPOINT", '["kvscope"]') in steps
    user = [arg for op, arg in steps if op == "USER"][-1]
    assert user.partition(":")[0] not in ("root", "0")


def test_the_image_installs_kvscope_without_the_engine_and_copies_every_package():
    text = (ROOT / "Containerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    engine = {name for extra in ("cpu", "gpu") for name in project["project"]["optional-dependencies"][extra]}
    assert not any(dep.startswith("vllm") for dep in project["project"]["dependencies"])
    assert not re.search(r"\.\[(cpu|gpu)", text) and not any(e.split("=")[0] in text for e in engine)
    copied = " ".join(arg for op, arg in instructions() if op == "COPY")
    for package in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert package.rstrip("*") in copied, package
    ignored = (ROOT / ".containerignore").read_text().split()
    assert ".venv" in ignored and (ROOT / ".dockerignore").read_text() == (ROOT / ".containerignore").read_text()


def test_kubelet_discovery_is_wired_whole_node_ip_the_grant_and_the_exporters_settings():
    from exporter.config import ExportConfig

    found = kinds(deploy.render(KUBELET))
    container = found["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["NODE_IP"] == "status.hostIP" and env["NODE_NAME"] == "spec.nodeName"
    rules = found["ClusterRole"]["rules"]
    assert {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]} in rules
    settings = yaml.safe_load(found["ConfigMap"]["data"]["kvscope.yaml"])["export"]
    assert settings["discover"] == ["kubelet"] and settings["kubelet_insecure_skip_verify"] is True
    assert ExportConfig.model_validate(settings).kubelet_insecure_skip_verify  # what the exporter accepts
    # the default grants nothing on nodes, and the kernel log's reader is off with its reason
    default = kinds(deploy.render())
    assert all("nodes/proxy" not in r["resources"] for r in default["ClusterRole"]["rules"])
    assert "--xid-kmsg=none" in default["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
