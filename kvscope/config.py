"""The user config, `kvscope.yaml`, the way a monitoring mixin's `_config` works: one file whose
numbers feed the alert rules, the dashboards' lines, the diagnosis and the exporter together.

Found by `--config FILE` on every command, else `$KVSCOPE_CONFIG`, else the defaults.

    thresholds:                 # any key of docs/metrics.md's thresholds table
      kv_usage_critical: 0.92
      queue_time_p99: {value: 2.0, for: 10m}
    slo:
      ttft: {objective: 0.99, seconds: 2.5}      # a bucket bound of vLLM's TTFT histogram
      itl: {objective: 0.99, seconds: 0.2}
      errors: {objective: 0.995}
      period: 30d
    selectors:                  # added to every engine / GPU query
      engine: '{namespace="prod"}'
      gpu: '{cluster="a"}'
    gpu_models:                 # datasheet overrides, or a model kvscope does not know
      H100: {tdp_w: 600}
    gateway: {...}              # kvscope serve: tenants, tiers, QoS (serving/gateway_config.py)
    export: {...}               # kvscope export: the same keys as its flags (exporter/config.py)
    webhook: {...}              # kvscope diagnose --listen: auth and bounds (diagnosis/webhook_config.py)
    deploy:                     # the Kubernetes manifests of `kvscope alerts build` / `alerts deploy`
      namespace: monitoring
      labels: {release: kube-prometheus-stack}  # on every resource: what Prometheus selects on
      runbook_base: https://git.example.com/kvscope/blob/v0.1.0/docs/runbooks.md

An unknown key or a bad value is a one-line `ConfigError` (exit 64). Here is also the one
YAML + pydantic loader every component uses for its section.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvscope import catalog
from kvscope.durations import parse_duration
from kvscope.gpu_models import FIELDS as GPU_FIELDS
from kvscope.gpu_models import GpuModels
from kvscope.promql import Selector
from kvscope.thresholds import Thresholds, all_thresholds

ENV = "KVSCOPE_CONFIG"
DEFAULT = "default"
M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config file that is missing, unreadable or invalid; the message is one line."""


# --- the one loader ---------------------------------------------------------------------------


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping (an empty file is an empty mapping)."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text: {exc.reason}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must be a mapping at the top level")
    return data


def validate(model: type[M], data: object, where: str) -> M:
    """`model` from `data`; ConfigError naming the first wrong key and why, in one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        what = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            what = "unknown key"
        raise ConfigError(f"{where}: {loc or '(top level)'}: {' '.join(what.split())}") from exc


# --- the schema ------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


MAX_FOR = 3600.0  # the longest `for:` an override may set (the generated tests cover up to it)
# Pairs whose order a user must keep: (lower, higher).
ORDERED = (("kv_usage_warning", "kv_usage_critical"), ("gpu_util_floor", "gpu_util_busy"))


class ThresholdSetting(_Strict):
    value: float
    for_: str | None = Field(None, alias="for")


class _Objective(_Strict):
    objective: float = Field(gt=0, lt=1, description="share of good events, e.g. 0.99")


def _bucket_bound(signal: catalog.Signal, seconds: float) -> float:
    if seconds not in signal.buckets:
        bounds = ", ".join(f"{b:g}" for b in signal.buckets)
        raise ValueError(f"must be a bucket bound of {signal.name} ({bounds}), not {seconds:g}")
    return seconds


class _LatencySlo(_Objective):
    # False: the bound must be an edge of vLLM's default buckets; True: the fleet runs
    # --custom-histogram-buckets, any bound goes, and KvscopeSLO*BoundNotABucket checks the data
    custom_buckets: bool = False
    _histogram: ClassVar[catalog.Signal]

    @model_validator(mode="after")
    def _bound(self) -> _LatencySlo:
        seconds = getattr(self, "seconds")  # noqa: B009 - declared by each subclass with its default
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds must be a positive number, not {seconds:g}")
        if not self.custom_buckets:
            try:
                _bucket_bound(self._histogram, seconds)
            except ValueError as exc:
                raise ValueError(f"seconds {exc} (or set custom_buckets: true)") from None
        return self


class TtftSlo(_LatencySlo):
    objective: float = Field(0.99, gt=0, lt=1)
    seconds: float = 2.5
    _histogram: ClassVar[catalog.Signal] = catalog.VLLM_TTFT


class ItlSlo(_LatencySlo):
    objective: float = Field(0.99, gt=0, lt=1)
    seconds: float = 0.2
    _histogram: ClassVar[catalog.Signal] = catalog.VLLM_ITL


class ErrorSlo(_Objective):
    objective: float = Field(0.995, gt=0, lt=1)


class BurnWindow(_Strict):
    """Alert when the error ratio over both windows burns the budget `factor` times too fast."""

    severity: Literal["critical", "warning"]
    long: str
    short: str
    factor: float = Field(gt=0)

    @field_validator("long", "short")
    @classmethod
    def _recorded(cls, v: str) -> str:
        if v not in catalog.SLO_WINDOWS:
            raise ValueError(f"must be one of the recorded windows {', '.join(catalog.SLO_WINDOWS)}, not {v!r}")
        return v


# Google SRE workbook, chapter 5 (multiwindow, multi-burn-rate alerts) for a 30-day budget.
SRE_WORKBOOK_WINDOWS = (
    BurnWindow(severity="critical", long="1h", short="5m", factor=14.4),
    BurnWindow(severity="critical", long="6h", short="30m", factor=6.0),
    BurnWindow(severity="warning", long="1d", short="2h", factor=3.0),
    BurnWindow(severity="warning", long="3d", short="6h", factor=1.0),
)


class Slo(_Strict):
    ttft: TtftSlo = TtftSlo()
    itl: ItlSlo = ItlSlo()
    errors: ErrorSlo = ErrorSlo()
    period: str = "30d"
    windows: tuple[BurnWindow, ...] = SRE_WORKBOOK_WINDOWS
    # Enough events that a burn-rate line means this many bad ones in the long window (0: no
    # guard). An error ratio from a few events is noise: 1 bad of 50 is 2 %. The SRE workbook's
    # low-traffic advice (ch. 5) and Pyrra and Datadog's minimum-request thresholds guard the same
    # way. With 20, a fleet burning at half the line reaches it by chance (Poisson(10) > 20) in
    # under 0.2 % of evaluations; at the default 99 % ITL objective, the 1x ticket waits for 2,000
    # output tokens in its 3d window, the 14.4x page for 139 requests in its hour.
    min_bad_events: float = Field(20.0, ge=0, allow_inf_nan=False)

    @field_validator("period")
    @classmethod
    def _period(cls, v: str) -> str:
        parse_duration(v)
        return v

    @model_validator(mode="after")
    def _both_severities(self) -> Slo:
        if {w.severity for w in self.windows} != {"critical", "warning"}:
            raise ValueError("windows: needs at least one critical (page) and one warning (ticket) pair")
        for name in ("ttft", "itl", "errors"):
            budget = 1 - getattr(self, name).objective
            for w in self.windows:
                if w.factor * budget >= 1:
                    raise ValueError(
                        f"{name}: with objective {1 - budget:g} the {w.factor:g}x burn over {w.long} would need an "
                        "error ratio above 100 %: that alert could never fire (raise the objective or lower the factor)"
                    )
        return self


class Selectors(_Strict):
    engine: str = ""
    gpu: str = ""
    # the node label of the fleet's dcgm-exporter, for the dashboards' node variable (rules and the
    # diagnosis read both spellings): hostname since 4.6.0-4.8.3, Hostname before
    gpu_host_label: Literal[catalog.DCGM_HOST_LABELS] = catalog.DCGM_HOST_LABELS[0]  # type: ignore[valid-type]

    @field_validator("engine", "gpu")
    @classmethod
    def _parses(cls, v: str) -> str:
        Selector.parse(v)
        return v


class GpuModelSetting(_Strict):
    name: str | None = None
    memory_mib: float | None = Field(None, gt=0)
    tdp_w: float | None = Field(None, gt=0)
    idle_w: float | None = Field(None, ge=0)
    max_sm_clock: float | None = Field(None, gt=0)
    base_sm_clock: float | None = Field(None, gt=0)
    idle_sm_clock: float | None = Field(None, gt=0)
    mem_clock: float | None = Field(None, gt=0)
    slowdown_temp: float | None = Field(None, gt=0)
    pcie_gen: int | None = Field(None, ge=1, le=6)
    pcie_width: int | None = Field(None, ge=1, le=32)
    peak_tflops: float | None = Field(None, gt=0)
    memory_gbps: float | None = Field(None, gt=0)


# Kubernetes' syntax (apimachinery's validation): a DNS-1123 label, a qualified label key, a label value.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
SELECTOR_LABEL = "app.kubernetes.io/name"  # the manifests' selectors hold it: a user label must not move it


def _label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    return bool(_LABEL_NAME.fullmatch(name)) and (not slash or bool(_DNS_SUBDOMAIN.fullmatch(prefix)))


class Deploy(_Strict):
    """The Kubernetes manifests (deploy/): where they go, the labels Prometheus selects on, the
    image, the exporter's auth, and where the rules' runbook_url point."""

    namespace: str = Field("monitoring", description="namespace of the exporter, its Service and monitors")
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="added to every resource, e.g. release: <kube-prometheus-stack release> (its selectors)",
    )
    image: str | None = Field(None, description="the exporter image (default: kvscope's release image)")
    runbook_base: str | None = Field(None, description="URL of docs/runbooks.md (default: this release's)")
    bearer_token_secret: str | None = Field(
        None, description="Secret whose key `token` scrapers must present (the probes stay open)"
    )
    tls_secret: str | None = Field(None, description="kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt): HTTPS")
    discover: Literal["kubernetes", "kubelet"] = Field(
        "kubernetes",
        description="how the exporter finds its node's vLLM pods: the API server (pods get/list/watch) or "
        "the node's kubelet (NODE_IP, nodes/proxy get: no API-server load, but a wider grant)",
    )
    kubelet_insecure_skip_verify: bool = Field(
        False,
        description="with discover: kubelet, do not verify the kubelet's serving certificate (self-signed "
        "where the cluster has no serverTLSBootstrap); the token is then sent to an unverified peer",
    )

    @field_validator("namespace", "bearer_token_secret", "tls_secret")
    @classmethod
    def _dns_label(cls, v: str | None) -> str | None:
        if v is not None and not _DNS_LABEL.fullmatch(v):
            raise ValueError(f"must be a DNS-1123 label (lower case, digits, '-'), not {v!r}")
        return v

    @field_validator("labels", mode="before")
    @classmethod
    def _strings(cls, v: object) -> object:
        for key, value in v.items() if isinstance(v, dict) else ():
            if not isinstance(value, str):
                raise ValueError(f"{key}: {value!r} is not a string (quote numbers and booleans in YAML)")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not _label_key(key):
                raise ValueError(f"{key!r} is not a Kubernetes label key")
            if not _LABEL_VALUE.fullmatch(value):
                raise ValueError(f"{key}: {value!r} is not a Kubernetes label value")
            if key == SELECTOR_LABEL:
                raise ValueError(f"{key} is the manifests' selector label: kvscope sets it")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][\w.\-/:@]*", v):
            raise ValueError(f"must be an image reference like registry/name:tag, not {v!r}")
        return v

    @field_validator("runbook_base")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and (not re.match(r"https?://[^/\s]+", v) or "#" in v):
            raise ValueError(f"must be an http(s) URL without a #fragment, not {v!r}")
        return v


class ConfigFile(_Strict):
    thresholds: dict[str, float | ThresholdSetting] = Field(default_factory=dict)
    slo: Slo = Slo()
    selectors: Selectors = Selectors()
    gpu_models: dict[str, GpuModelSetting] = Field(default_factory=dict)
    gateway: dict[str, Any] = Field(default_factory=dict, description="kvscope serve's section")
    export: dict[str, Any] = Field(default_factory=dict, description="kvscope export's section")
    webhook: dict[str, Any] = Field(default_factory=dict, description="kvscope diagnose --listen's section")
    deploy: Deploy = Deploy()

    @field_validator("thresholds")
    @classmethod
    def _known(cls, v: dict[str, float | ThresholdSetting]) -> dict[str, float | ThresholdSetting]:
        known = {t.key: t for t in all_thresholds()}
        for key, setting in v.items():
            if key not in known:
                raise ValueError(f"unknown threshold {key!r} (see docs/metrics.md for the keys)")
            value = setting.value if isinstance(setting, ThresholdSetting) else setting
            low, high = known[key].bounds
            if not math.isfinite(value) or not low < value <= high:
                raise ValueError(f"{key} must be in ({low:g}, {high:g}] ({known[key].unit}), not {value:g}")
            if isinstance(setting, ThresholdSetting) and setting.for_ is not None:
                try:
                    seconds = parse_duration(setting.for_, strict=True)
                except ValueError as exc:
                    raise ValueError(f"{key}.for: {exc}") from None
                if seconds % 60 or seconds > MAX_FOR:
                    raise ValueError(f"{key}.for must be whole minutes up to 1h, not {setting.for_!r}")
        merged = {t.key: t.value for t in known.values()} | {
            k: (s.value if isinstance(s, ThresholdSetting) else s) for k, s in v.items()
        }
        for lower, higher in ORDERED:
            if merged[lower] >= merged[higher]:
                raise ValueError(f"{lower} ({merged[lower]:g}) must stay below {higher} ({merged[higher]:g})")
        return v

    @model_validator(mode="after")
    def _models_complete(self) -> ConfigFile:
        GpuModels({k: v.model_dump() for k, v in self.gpu_models.items()})  # raises ValueError
        return self

    @model_validator(mode="before")
    @classmethod
    def _hint_sections(cls, data: object) -> object:
        if isinstance(data, dict):
            gateway_keys = {"tiers", "tenants", "qos", "anonymous_tier", "max_body_bytes"} & set(data)
            if gateway_keys:
                key = sorted(gateway_keys)[0]
                raise ValueError(f"{key!r} is a gateway setting: put it under 'gateway:'")
        return data


# --- the effective config -------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """What every command reads: thresholds, SLOs, selectors, GPU models, component sections."""

    file: ConfigFile = field(default_factory=ConfigFile)
    path: Path | None = None

    @property
    def origin(self) -> str:
        return str(self.path) if self.path is not None else DEFAULT

    @property
    def thresholds(self) -> Thresholds:
        overrides = {
            key: (s.value, s.for_) if isinstance(s, ThresholdSetting) else (float(s), None)
            for key, s in self.file.thresholds.items()
        }
        return Thresholds(overrides, source=self.origin)

    @property
    def slo(self) -> Slo:
        return self.file.slo

    @property
    def engine_selector(self) -> Selector:
        return Selector.parse(self.file.selectors.engine)

    @property
    def gpu_selector(self) -> Selector:
        return Selector.parse(self.file.selectors.gpu)

    @property
    def gpu_host_label(self) -> str:
        return self.file.selectors.gpu_host_label

    @property
    def deploy(self) -> Deploy:
        return self.file.deploy

    @property
    def gpu_models(self) -> GpuModels:
        return GpuModels({k: v.model_dump() for k, v in self.file.gpu_models.items()})

    def section(self, name: Literal["gateway", "export", "webhook"], model: type[M]) -> M:
        """A component's section, validated by the component's model."""
        data: dict[str, Any] = getattr(self.file, name)
        return validate(model, data, f"{self.origin}: {name}")

    def given(self, *path: str) -> bool:
        """Whether the file set this key (`given("slo", "ttft", "seconds")`)."""
        node: Any = self.file.model_dump(by_alias=True, exclude_unset=True)
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                return False
            node = node[part]
        return True


def load(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """The config from `path`, else from $KVSCOPE_CONFIG, else the defaults."""
    env = os.environ if environ is None else environ
    if path is None and env.get(ENV):
        path = Path(env[ENV])
    if path is None:
        return Config()
    return Config(validate(ConfigFile, read_yaml(path), str(path)), path)


def with_deploy(config: Config, **values: object) -> Config:
    """The config with deploy settings given as flags (`namespace`, `labels`, `image`, ...) on
    top: `labels` are added to the file's; ConfigError when one is bad."""
    data = config.file.model_dump(by_alias=True, exclude_unset=True)
    deploy = data.setdefault("deploy", {})
    for key, value in values.items():
        if value is None:
            continue
        deploy[key] = {**deploy.get(key, {}), **value} if key == "labels" and isinstance(value, dict) else value
    return Config(validate(ConfigFile, data, "flags"), config.path)


def with_slo(config: Config, **values: float | None) -> Config:
    """The config with SLO numbers given as flags (`ttft_objective`, `ttft_seconds`,
    `itl_objective`, `itl_seconds`, `error_objective`) on top; ConfigError when one is bad."""
    data = config.file.model_dump(by_alias=True, exclude_unset=True)
    slo = data.setdefault("slo", {})
    for key, value in values.items():
        if value is None:
            continue
        section, _, field_name = key.partition("_")
        slo.setdefault("errors" if section == "error" else section, {})[field_name] = value
    return Config(validate(ConfigFile, data, "flags"), config.path)


# Keys whose values are secrets wherever they appear (a limit named max_tokens is not one).
SECRET_KEYS = frozenset(
    {"api_keys", "api_key_sha256", "admin_keys", "bearer_token", "metrics_token", "password", "secret", "token"}
)
_USERINFO = re.compile(r"(?<=://)([^/@:]*):[^/@]*@")


def redact(key: str, value: object) -> object:
    """Secrets shown as `***`: the values of SECRET_KEYS, and passwords inside URLs."""
    if key in SECRET_KEYS and value not in (None, "", [], ()):
        return "***"
    if isinstance(value, str):
        return _USERINFO.sub(r"\1:***@", value)
    if isinstance(value, list):
        return [redact("", v) for v in value]
    return value


@dataclass(frozen=True)
class Row:
    key: str
    value: object
    source: str
    meaning: str = ""


def effective_rows(config: Config, sections: Sequence[tuple[str, type[BaseModel]]] = ()) -> list[Row]:
    """Every effective value with where it came from (for `kvscope config show`)."""
    rows: list[Row] = []
    limits = config.thresholds
    for t in limits:
        source = limits.source(t)
        rows.append(Row(f"thresholds.{t.key}", t.value, source, f"{t.unit}; {t.why}"))
        if t.for_:
            rows.append(Row(f"thresholds.{t.key}.for", t.for_, source, "how long it must hold"))

    def walk(prefix: tuple[str, ...], model: BaseModel) -> None:
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            key = info.alias or name
            path = (*prefix, key)
            if isinstance(value, BaseModel):
                walk(path, value)
                continue
            if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
                value = [v.model_dump() for v in value]
            source = config.origin if config.given(*path) else DEFAULT
            rows.append(Row(".".join(path), redact(key, value), source, info.description or ""))

    walk(("slo",), config.slo)
    walk(("selectors",), config.file.selectors)
    walk(("deploy",), config.file.deploy)
    models = config.gpu_models
    for short, model in models.table.items():
        for name in GPU_FIELDS:
            given = name in models.overridden.get(short, set())
            rows.append(Row(f"gpu_models.{short}.{name}", getattr(model, name), config.origin if given else DEFAULT))
    for name, schema in sections:
        section: BaseModel = config.section(name, schema)  # type: ignore[arg-type]
        _flatten(rows, (name,), section.model_dump(), config, config.file.model_dump()[name])
    return rows


def _flatten(rows: list[Row], prefix: tuple[str, ...], value: object, config: Config, given: object) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            sub = given.get(k) if isinstance(given, dict) else None
            if str(k) in SECRET_KEYS:
                rows.append(Row(".".join((*prefix, str(k))), redact(str(k), v), config.origin if sub else DEFAULT))
                continue
            _flatten(rows, (*prefix, str(k)), v, config, sub)
        return
    source = config.origin if given is not None else DEFAULT
    rows.append(Row(".".join(prefix), redact(prefix[-1] if prefix else "", value), source))
