"""The gateway's configuration, the `gateway:` section of kvscope.yaml: tenants and their API
keys, tiers and their limits, QoS.

Without one the gateway behaves like vLLM's own server: no API key, one anonymous tenant, no
quotas; requests longer than max_model_len are still refused before the engine.

    gateway:
      tiers:
        standard: {max_request_tokens: 16384, max_tokens: 2048, tokens_per_minute: 50000,
                   deadline_seconds: 60}
      tenants:
        acme: {tier: standard, api_keys: ["sk-acme-1"]}
      quota_backend: redis://redis.kvscope:6379/0   # optional: one budget across replicas
      quota_fail: open
      qos:
        classes:
          - {name: interactive, max_prompt_tokens: 512, delay_ms: 0}
          - {name: bulk, delay_ms: 60000, kv_share: 0.5}
      otlp:                     # spans and GenAI metrics; OTEL_EXPORTER_OTLP_* win where set
        endpoint: http://otel-collector:4318
        protocol: http/protobuf
        headers: {x-tenant: serving}
        metric_export_interval_ms: 10000
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvscope import config, tuning
from kvscope.config import ConfigError
from serving.inline_render import INLINE_RENDER_CHARS

ANONYMOUS = "anonymous"
QUOTA_PASSWORD_ENV = "KVSCOPE_QUOTA_REDIS_PASSWORD"
__all__ = ["ANONYMOUS", "QUOTA_PASSWORD_ENV", "ConfigError", "GatewayConfig", "load_gateway_config"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


INT64_MAX = 2**63 - 1


class Tier(_Strict):
    """Limits shared by the tenants of a tier. None = no limit."""

    max_request_tokens: int | None = Field(None, ge=1, le=INT64_MAX, description="prompt + max_tokens x n cap")
    max_tokens: int | None = Field(None, ge=1, le=INT64_MAX, description="clamp for max_tokens (seed 002)")
    tokens_per_minute: int | None = Field(None, ge=1, le=INT64_MAX, description="token bucket per tenant")
    requests_per_minute: int | None = Field(None, ge=1, le=INT64_MAX, description="request bucket per tenant")
    deadline_seconds: float | None = Field(None, gt=0, le=86400, description="abort in the engine after")
    priority_delay_ms: int = Field(0, ge=0, le=10**9, description="QoS: added to the virtual deadline")
    # Bounds on the fields a client sets (OpenAI's own limits: n <= 128, top_logprobs <= 20).
    max_n: int = Field(16, ge=1, le=128, description="most completions per prompt (n, best_of)")
    max_logprobs: int = Field(20, ge=0, le=20, description="most logprobs / top_logprobs per token")
    max_client_priority: int = Field(10**6, ge=0, le=INT64_MAX, description="largest priority a client may add")


def _valid_key(key: str) -> str:
    if not key or not key.isascii() or not key.isprintable() or " " in key:
        raise ValueError("API keys are printable ASCII without spaces")
    return key


class Tenant(_Strict):
    tier: str
    api_keys: tuple[str, ...] = ()
    api_key_sha256: tuple[str, ...] = ()  # hex digests, to keep plain keys out of the file

    @model_validator(mode="after")
    def _keys(self) -> Tenant:
        for key in self.api_keys:
            _valid_key(key)
        for digest in self.api_key_sha256:
            if len(digest) != 64 or any(ch not in "0123456789abcdefABCDEF" for ch in digest):
                raise ValueError("api_key_sha256 entries are 64 hex digits (sha256 of the key)")
        if not self.api_keys and not self.api_key_sha256:
            raise ValueError("a tenant needs an API key (api_keys or api_key_sha256): without one it cannot be reached")
        return self


class QosClass(_Strict):
    """Requests up to `max_prompt_tokens` belong to this class (None: everything longer)."""

    name: str
    max_prompt_tokens: int | None = Field(None, ge=1)
    delay_ms: int = Field(ge=0)
    kv_share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="the class's requests together hold at most this share of the KV pool; "
        "the rest wait at the gateway (serving/lanes.py); None: no limit",
    )


# Seed 000's PriorityScheduler ranks by prompt_len / 1000 - wait / 10 (kvscope/tuning.py). The
# KV lane's share is the CPU drill's; on GPUs it is not yet measured (tuning.KV_LANE_SHARE).
_DEFAULT_CLASSES = (
    QosClass(name="interactive", max_prompt_tokens=512, delay_ms=int(tuning.QOS_DELAY_MS["interactive"])),
    QosClass(name="standard", max_prompt_tokens=4096, delay_ms=int(tuning.QOS_DELAY_MS["standard"])),
    # two prompts past 4K tokens admitted together outgrew a pool they each fit (seed 000)
    QosClass(
        name="bulk",
        max_prompt_tokens=None,
        delay_ms=int(tuning.QOS_DELAY_MS["bulk"]),
        kv_share=tuning.KV_LANE_SHARE[tuning.Platform.CPU].value,
    ),
)


class Qos(_Strict):
    """Priority by prompt length and tier, with ageing: see serving/qos.py."""

    classes: tuple[QosClass, ...] = _DEFAULT_CLASSES
    client_priority_step_ms: int = Field(1000, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Qos:
        bounds = [c.max_prompt_tokens for c in self.classes]
        if not bounds or bounds[-1] is not None:
            raise ValueError("the last QoS class must have no max_prompt_tokens (catch-all)")
        if any(b is None for b in bounds[:-1]) or bounds[:-1] != sorted(bounds[:-1]):  # type: ignore[type-var]
            raise ValueError("QoS classes must be ordered by max_prompt_tokens")
        return self


OTLP_PROTOCOLS = ("http/protobuf", "grpc")


class Otlp(_Strict):
    """OpenTelemetry export of spans and GenAI metrics, as the OTEL_EXPORTER_OTLP_* variables
    say it; a variable that is set wins over its key here (serving/telemetry_env.py)."""

    endpoint: str | None = Field(None, description="OTEL_EXPORTER_OTLP_ENDPOINT: traces and metrics")
    traces_endpoint: str | None = Field(None, description="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    metrics_endpoint: str | None = Field(None, description="OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    protocol: Literal["http/protobuf", "grpc"] | None = Field(None, description="OTEL_EXPORTER_OTLP_PROTOCOL")
    headers: dict[str, str] = Field(default_factory=dict, description="OTEL_EXPORTER_OTLP_HEADERS")
    metric_export_interval_ms: int | None = Field(None, ge=100, le=3_600_000, description="OTEL_METRIC_EXPORT_INTERVAL")

    @field_validator("endpoint", "traces_endpoint", "metrics_endpoint")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"OTLP endpoint {url!r} is not an http:// or https:// URL")
        return url

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not name or not all(c.isalnum() or c in "-_" for c in name) or len(name) > 128:
                raise ValueError(f"OTLP header name {name!r} is not a plain token")
            if any(c in value for c in ",\r\n") or len(value) > 4096:
                raise ValueError(f"OTLP header {name!r}: its value may not hold a comma or a line break")
        return headers


class GatewayConfig(_Strict):
    tiers: dict[str, Tier] = Field(default_factory=lambda: {"default": Tier()})
    tenants: dict[str, Tenant] = Field(default_factory=dict)
    anonymous_tier: str | None = Field(
        None, description="tier for requests without a key when keys are configured (None: 401)"
    )
    qos: Qos = Qos()
    otlp: Otlp = Otlp()
    max_body_bytes: int = Field(16 << 20, ge=1024, le=1 << 30)
    max_json_depth: int = Field(64, ge=8, le=1000, description="deepest nesting a request body may have")
    prefix_hit_window_seconds: float = Field(60.0, gt=0)
    inline_render_chars: int = Field(
        INLINE_RENDER_CHARS,
        ge=0,
        le=1 << 20,
        description="prompts of at most this many characters are rendered on the event loop, longer ones in "
        "vLLM's thread pool (0: every one there, as vLLM does)",
    )
    admin_keys: tuple[str, ...] = Field((), description="keys for admin and dev routes (none: they are 404)")
    metrics_token: str | None = Field(None, description="a bearer token /metrics asks for (None: open)")
    # Shared quotas (serving/quota_redis.py): every replica's buckets in one Redis.
    quota_backend: str | None = Field(
        None, description="redis://host:port/db or rediss://... (None: each process keeps its own buckets)"
    )
    quota_fail: Literal["open", "closed"] = Field(
        "open", description="when the backend is down or slow: admit (open) or refuse with a 503 (closed)"
    )
    quota_timeout_ms: int = Field(50, ge=1, le=5000, description="connect and command timeout of each quota call")
    quota_password_file: Path | None = Field(
        None, description=f"the Redis password, read from this file (else ${QUOTA_PASSWORD_ENV})"
    )
    quota_key_prefix: str = Field("kvscope:quota", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")

    @field_validator("quota_password_file")
    @classmethod
    def _password_file(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():  # found at load, not after the engine's minutes of start
            raise ValueError(f"quota_password_file {str(path)!r} is not a readable file")
        return path

    @field_validator("quota_backend")
    @classmethod
    def _backend_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("quota_backend is a redis://host:port/db or rediss://host:port/db URL")
        if parts.password is not None:
            raise ValueError(
                f"quota_backend must not carry a password: use quota_password_file or ${QUOTA_PASSWORD_ENV}"
            )
        return url

    @model_validator(mode="after")
    def _tiers_exist(self) -> GatewayConfig:
        for name, tenant in self.tenants.items():
            if tenant.tier not in self.tiers:
                raise ValueError(f"tenant {name!r} names unknown tier {tenant.tier!r}")
        if self.anonymous_tier is not None and self.anonymous_tier not in self.tiers:
            raise ValueError(f"anonymous_tier names unknown tier {self.anonymous_tier!r}")
        seen: dict[str, str] = {}
        for name, tenant in self.tenants.items():
            digests = [*(hashlib.sha256(k.encode()).hexdigest() for k in tenant.api_keys), *tenant.api_key_sha256]
            for digest in digests:
                other = seen.setdefault(digest.lower(), name)
                if other != name or digests.count(digest) > 1:
                    raise ValueError(f"an API key of tenant {name!r} is also given to {other!r}: keys must be unique")
        for key in (*self.admin_keys, *([self.metrics_token] if self.metrics_token else [])):
            _valid_key(key)
            if hashlib.sha256(key.encode()).hexdigest() in seen:
                raise ValueError("an admin or metrics key is also a tenant's API key")
        return self

    @property
    def auth_required(self) -> bool:
        return bool(self.tenants)

    @property
    def default_tier(self) -> str:
        """The tier of requests without a key: anonymous_tier, else the first tier."""
        return self.anonymous_tier or next(iter(self.tiers))

    def authenticate(self, api_key: bytes | None) -> tuple[str, str] | None:
        """(tenant, tier) for an API key (compared as bytes, in constant time); the anonymous
        tenant when no keys are configured, or when the key is missing and anonymous_tier is set."""
        if not self.auth_required:
            return ANONYMOUS, self.default_tier
        if api_key:
            digest = hashlib.sha256(api_key).hexdigest().encode()
            found = None
            for name, tenant in self.tenants.items():
                plain = any(hmac.compare_digest(api_key, k.encode()) for k in tenant.api_keys)
                hashed = any(hmac.compare_digest(digest, d.lower().encode()) for d in tenant.api_key_sha256)
                if (plain or hashed) and found is None:
                    found = (name, tenant.tier)
            return found
        if self.anonymous_tier is not None:
            return ANONYMOUS, self.anonymous_tier
        return None

    def is_admin(self, api_key: bytes | None) -> bool:
        return bool(api_key) and any(hmac.compare_digest(api_key or b"", k.encode()) for k in self.admin_keys)

    def metrics_allowed(self, api_key: bytes | None) -> bool:
        if self.metrics_token is None:
            return True
        return bool(api_key) and hmac.compare_digest(api_key or b"", self.metrics_token.encode())


def load_gateway_config(path: Path | None) -> GatewayConfig:
    """The `gateway:` section of the kvscope.yaml at `path` (None: $KVSCOPE_CONFIG, else the
    defaults); ConfigError with a one-line reason when it is bad."""
    return config.load(path).section("gateway", GatewayConfig)
