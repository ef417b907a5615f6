"""`kvscope export` configuration: the `export:` section of kvscope.yaml, with the same keys as
the flags (flags win), and the assembly of collectors from it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from exporter.collectors import Collector, GpuSource
from exporter.collectors.host import HostCollector
from exporter.collectors.xid import KmsgXidSource, XidCounts, XidWatcher
from exporter.nvml_api import GpuIdentity
from exporter.web_config import TlsServerConfig, WebConfig, load_web_config
from kvscope import config as kvscope_config
from kvscope.config import ConfigError
from kvscope.gpu_models import DEFAULT_MODELS, GpuModels
from kvscope.http_auth import read_secret

if TYPE_CHECKING:
    from exporter.discovery import DiscoveryCollector

Backend = Literal["auto", "dcgm", "nvml", "emulated", "none"]
HostLabel = Literal["hostname", "Hostname", "none"]
DiscoverMethod = Literal["procfs", "kubernetes", "kubelet", "none"]
# Not dcgm-exporter's 9400: both run on one GPU node. (The Prometheus wiki's "Default port
# allocations" list is where exporters claim theirs; see docs/metrics.md.)
DEFAULT_PORT = 9408
KMSG_AUTO = "auto"  # /dev/kmsg with a real GPU backend (nvml, dcgm), off with emulated GPUs
__all__ = ["Assembly", "BackendUnavailable", "ConfigError", "ExportConfig", "assemble", "load"]


class BackendUnavailable(RuntimeError):  # noqa: N818 - a state of the machine
    """A GPU backend asked for explicitly is not there (one line, NVML's or DCGM's reason)."""


TOKEN_ENV = "KVSCOPE_EXPORT_TOKEN"  # the bearer token scrapers must present, from the environment


def _secret(what: str, path: Path | None, env: str | None = None) -> bytes | None:
    try:
        return read_secret(what, path, env)
    except ConfigError as exc:
        raise ConfigError(f"export: {exc}") from None


class ExportConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    listen_address: str = f"127.0.0.1:{DEFAULT_PORT}"
    gpu: Backend = "auto"
    vllm: list[str] = Field(default_factory=list)
    discover: list[DiscoverMethod] | None = Field(
        None,
        description="how vLLM engines on this node are found: procfs, kubernetes, kubelet, none "
        "(default: procfs when no vllm list is given, none otherwise)",
    )
    discover_interval: float | None = Field(
        None, gt=0, description="seconds between discoveries (default: collect_interval)"
    )
    kubelet_insecure_skip_verify: bool = Field(
        False,
        description="--discover kubelet: do not verify the kubelet's serving certificate (self-signed kubelets)",
    )
    dcgm_exporter: str | None = None
    dcgm_bindings: str | None = None
    dcgm_host: str = "localhost"
    collect_interval: float = Field(5.0, ge=0)
    scrape_timeout: float = Field(3.0, gt=0)
    emulated_gpus: int = Field(4, ge=1, le=64)
    emulated_model: str = Field("H100", description="a GPU model of the table (kvscope.yaml gpu_models)")
    emulated_mig: str | None = Field(None, description='MIG layout of every emulated GPU, e.g. "3g.40gb,2g.20gb"')
    hostname_label: HostLabel = Field(
        "hostname",
        description="the host label's spelling: hostname (dcgm-exporter >= 4.6.0-4.8.3), Hostname (older), none",
    )
    dcgm_names: Literal["4.8", "4.9", "4.10"] = Field(
        "4.8",
        description="whose DCGM field names and units the local backends write: dcgm-exporter 4.6-4.8's "
        "(what existing dashboards read), 4.9.0's (base units: Hz, bytes, J, 0-1 ratios) or 4.10.0's",
    )
    xid_kmsg: str = Field(KMSG_AUTO, description="kernel log XIDs are read from: auto, none, or a path")
    web_config_file: Path | None = Field(None, description="exporter-toolkit web config: TLS, mTLS, basic auth")
    tls_cert: Path | None = None
    tls_key: Path | None = None
    bearer_token: str | None = Field(None, description="a token scrapers must present (or bearer_token_file)")
    bearer_token_file: Path | None = None
    vllm_bearer_token_file: Path | None = Field(None, description="token for the vLLM targets (kvscope serve)")
    open_probes: bool = Field(True, description="/-/healthy and /-/ready need no auth (kubelet probes)")
    scrape_max_bytes: int = Field(32 << 20, ge=1 << 16, le=1 << 30, description="largest target page read")

    @field_validator("discover", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [m.strip() for v in value for m in (v.split(",") if isinstance(v, str) else [v]) if m != ""]
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ExportConfig:
        if self.discover is not None and "none" in self.discover and len(set(self.discover)) > 1:
            raise ValueError("discover: none goes alone")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.tls_cert is not None and self.web_config_file is not None:
            raise ValueError("give TLS in the web config file or as tls_cert/tls_key, not both")
        if self.bearer_token is not None and self.bearer_token_file is not None:
            raise ValueError("choose bearer_token or bearer_token_file, not both")
        host, _, port = self.listen_address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"listen_address must be host:port, not {self.listen_address!r}")
        return self

    def web(self) -> WebConfig:
        """The web configuration: the file's, or TLS from tls_cert/tls_key."""
        if self.web_config_file is not None:
            return load_web_config(self.web_config_file)
        if self.tls_cert is not None and self.tls_key is not None:
            return WebConfig(tls_server_config=TlsServerConfig(cert_file=self.tls_cert, key_file=self.tls_key))
        return WebConfig()

    def token(self) -> bytes | None:
        """The bearer token scrapers must present, if any (the file, the setting, $KVSCOPE_EXPORT_TOKEN)."""
        if self.bearer_token is not None:
            return self.bearer_token.encode()
        return _secret("exporter bearer token", self.bearer_token_file, TOKEN_ENV)

    def vllm_token(self) -> bytes | None:
        return _secret("vLLM targets' bearer token", self.vllm_bearer_token_file)

    @property
    def discovery_methods(self) -> list[str]:
        """The discovery methods in effect: procfs by default when there is no static vllm list."""
        chosen = self.discover if self.discover is not None else ([] if self.vllm else ["procfs"])
        return list(dict.fromkeys(m for m in chosen if m != "none"))

    @property
    def discovery_interval(self) -> float:
        return self.discover_interval or self.collect_interval or 5.0

    @property
    def host(self) -> str:
        return self.listen_address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen_address.rpartition(":")[2])


def load(path: Path | None, overrides: Mapping[str, object]) -> ExportConfig:
    """The `export:` section of the kvscope.yaml at `path` (None: $KVSCOPE_CONFIG, else the
    defaults), then the flags that were given on top."""
    return from_config(kvscope_config.load(path), overrides)


def from_config(config: kvscope_config.Config, overrides: Mapping[str, object]) -> ExportConfig:
    # the flag is --web.listen-address, as in node_exporter; YAML keys may be spelled like flags
    data = {k.replace("-", "_").replace(".", "_"): v for k, v in config.file.export.items()}
    if "web_listen_address" in data:
        data["listen_address"] = data.pop("web_listen_address")
    if "web_config_file" not in data and "web_config" in data:
        data["web_config_file"] = data.pop("web_config")
    data |= {k: v for k, v in overrides.items() if v is not None}
    return kvscope_config.validate(ExportConfig, data, f"{config.origin}: export")


@dataclass
class Assembly:
    collectors: list[Collector]
    gpu_source: GpuSource | None
    xid_watcher: XidWatcher | None
    description: str


def assemble(config: ExportConfig, models: GpuModels = DEFAULT_MODELS) -> Assembly:
    """Collectors for the configuration, vLLM first (the emulated GPUs follow it), an ingested
    dcgm-exporter before the local GPU backend (its devices' DCGM series are its own)."""
    from exporter.collectors.dcgm_exporter import DcgmExporterCollector
    from exporter.collectors.vllm import VllmCollector

    collectors: list[Collector] = []
    gpu: list[GpuSource] = []  # filled below: procfs discovery looks at the GPUs' processes first
    discovery = _discovery(config, lambda: [pid for s in gpu for _, r in s.last() for pid, _ in r.processes])
    if discovery is not None:
        collectors.append(discovery)  # before vllm: an engine found is scraped in the same pass
    vllm = (
        VllmCollector(
            config.vllm,
            timeout=config.scrape_timeout,
            max_bytes=config.scrape_max_bytes,
            token=config.vllm_token(),
            discovered=discovery.current if discovery is not None else None,
        )
        if config.vllm or discovery is not None
        else None
    )
    if vllm is not None:
        collectors.append(vllm)
    dcgm_exporter = None
    if config.dcgm_exporter:
        dcgm_exporter = DcgmExporterCollector(config.dcgm_exporter, timeout=config.scrape_timeout)
        collectors.append(dcgm_exporter)
    counts = XidCounts()
    source, watcher, what = _gpu_source(config, counts, vllm, models)
    if discovery is not None:
        what += f"; discovering vLLM targets by {', '.join(m.name for m in discovery.methods)}"
    if source is not None:
        gpu.append(source)
        from exporter.collectors.gpu import GpuCollector
        from exporter.collectors.health import HealthCollector
        from exporter.collectors.process import ProcessCollector
        from exporter.collectors.roofline import RooflineCollector
        from exporter.collectors.topology import TopologyCollector
        from exporter.collectors.xid import XidCollector

        host = "" if config.hostname_label == "none" else config.hostname_label
        served = dcgm_exporter.served if dcgm_exporter is not None else None
        physical = [identity for identity, _ in source.last() if not identity.is_mig]
        kmsg = _kmsg(config, counts, physical)
        xids_watched = watcher is not None or kmsg is not None or config.gpu == "emulated"
        collectors += [
            GpuCollector(source, host, served, config.dcgm_names),
            HealthCollector(
                source, counts, xids_watched=xids_watched, host_label=host, served=served, shape=config.dcgm_names
            ),
            XidCollector(counts, watcher, [(i.index, i.uuid) for i in physical], kmsg),
            TopologyCollector(source),
            ProcessCollector(source),
            RooflineCollector(source, models),
        ]
    collectors.append(HostCollector())
    return Assembly(collectors, source, watcher, what)


def _discovery(config: ExportConfig, gpu_pids: Callable[[], Iterable[int]]) -> DiscoveryCollector | None:
    from exporter.discovery import DiscoveryCollector, KubernetesDiscovery, Method, ProcfsDiscovery

    methods: list[Method] = []
    try:
        for name in config.discovery_methods:
            if name == "procfs":
                methods.append(ProcfsDiscovery(gpu_pids=gpu_pids))
            elif name == "kubernetes":
                methods.append(KubernetesDiscovery.in_cluster(timeout=config.scrape_timeout))
            elif name == "kubelet":
                methods.append(
                    KubernetesDiscovery.kubelet(
                        timeout=config.scrape_timeout, insecure_skip_verify=config.kubelet_insecure_skip_verify
                    )
                )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return DiscoveryCollector(methods, config.discovery_interval) if methods else None


def _kmsg(config: ExportConfig, counts: XidCounts, gpus: list[GpuIdentity]) -> KmsgXidSource | None:
    from exporter.collectors.xid import KMSG

    path = config.xid_kmsg
    if path == KMSG_AUTO:
        path = "none" if config.gpu == "emulated" else KMSG  # the host's log has no emulated GPUs
    if path in ("none", ""):
        return None
    return KmsgXidSource(counts, gpus, path)


def _gpu_source(
    config: ExportConfig, counts: XidCounts, vllm: object, models: GpuModels
) -> tuple[GpuSource | None, XidWatcher | None, str]:
    choice = config.gpu
    if choice == "emulated":
        from exporter.collectors.emulated import EmulatedSource

        samples = (lambda: vllm.latest) if vllm is not None else dict  # type: ignore[attr-defined]
        try:
            source = EmulatedSource(
                config.emulated_gpus, config.emulated_model, samples, counts, models=models, mig=config.emulated_mig
            )
        except ValueError as exc:
            flag = "--emulated-mig" if "MIG" in str(exc) else "--emulated-model"
            raise ConfigError(f"{flag}: {exc}") from None
        mig = f", MIG {config.emulated_mig}" if config.emulated_mig else ""
        return source, None, f"{config.emulated_gpus} emulated {config.emulated_model} GPUs{mig}"
    if choice == "none":
        return None, None, "no GPU backend"
    if choice in ("auto", "dcgm"):
        from exporter.collectors.dcgm import DcgmSource, DcgmUnavailable

        try:
            dcgm = DcgmSource(bindings_path=config.dcgm_bindings, host=config.dcgm_host, nvml=_nvml_alongside())
            return dcgm, None, f"DCGM ({len(dcgm.identities)} GPUs)"
        except DcgmUnavailable as exc:
            if choice == "dcgm":
                raise BackendUnavailable(f"--gpu dcgm: {exc}") from exc
    from exporter.nvml_api import Nvml, NvmlUnavailable

    try:
        nvml = Nvml()
        nvml.init()
    except (NvmlUnavailable, ImportError) as exc:
        if choice == "nvml":
            raise BackendUnavailable(f"--gpu nvml: {exc}") from exc
        return None, None, f"no GPU backend ({exc})"
    from exporter.collectors.nvml import NvmlSource

    nvml_source = NvmlSource(nvml, counts)
    watcher = XidWatcher(nvml, counts, [i.uuid for i in nvml_source.identities])
    watcher.start()
    mig = f", {len(nvml.mig_devices)} MIG devices" if nvml.mig_devices else ""
    return nvml_source, watcher, f"NVML ({nvml.count} GPUs{mig}, driver {nvml.driver_version})"


def _nvml_alongside() -> object | None:
    """NVML beside DCGM, for what DCGM's bindings lack (topology); None when not there."""
    try:
        from exporter.nvml_api import Nvml, NvmlUnavailable

        nvml = Nvml()
        nvml.init()
        return nvml
    except (ImportError, NvmlUnavailable):
        return None
