"""`--web.config.file`: the exporter-toolkit web configuration node_exporter, dcgm-exporter's
peers and Prometheus itself read, so the file a cluster already has works here unchanged.

    tls_server_config:
      cert_file: /etc/tls/tls.crt
      key_file: /etc/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert     # mTLS
      client_ca_file: /etc/tls/ca.crt
      min_version: TLS12
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2y$10$...                            # bcrypt (htpasswd -nBC 10)

What Python's TLS stack cannot do as Go's does (RequestClientCert and RequireAnyClientCert,
which take a client certificate without verifying it; client_allowed_sans; cipher and curve
choices; rate_limit; inline PEM) is refused at start with a one-line error naming the key,
never silently ignored.
"""

from __future__ import annotations

import hashlib
import ssl
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvscope.config import ConfigError

TlsVersion = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED = ("RequestClientCert", "RequireAnyClientCert")
_NOT_SUPPORTED = {
    "cert": "inline PEM: give cert_file",
    "key": "inline PEM: give key_file",
    "client_ca": "inline PEM: give client_ca_file",
    "client_allowed_sans": "Python's TLS server cannot check client SANs",
    "cipher_suites": "Python uses OpenSSL's cipher choice",
    "curve_preferences": "Python uses OpenSSL's curve choice",
    "prefer_server_cipher_suites": "Python uses OpenSSL's cipher choice",
}
AUTH_CACHE_SIZE = 256  # bcrypt costs ~70 ms at cost 10: a good (user, password) is checked once


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsServerConfig(_Strict):
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: TlsVersion = "TLS12"
    max_version: TlsVersion = "TLS13"

    @field_validator("client_auth_type")
    @classmethod
    def _auth_type(cls, value: str) -> str:
        if value in _UNVERIFIED:
            raise ValueError(f"{value} accepts client certificates without verifying them; use VerifyClientCertIfGiven")
        if value not in _CLIENT_AUTH:
            raise ValueError(f"unknown client_auth_type {value!r} (one of {', '.join(_CLIENT_AUTH)})")
        return value

    @model_validator(mode="after")
    def _ca(self) -> TlsServerConfig:
        if self.client_auth_type != "NoClientCert" and self.client_ca_file is None:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        if _VERSIONS[self.min_version] > _VERSIONS[self.max_version]:
            raise ValueError(f"min_version {self.min_version} is above max_version {self.max_version}")
        return self


class HttpServerConfig(_Strict):
    http2: bool = True  # accepted for compatibility; uvicorn serves HTTP/1.1
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header in value.items():
            if not name.isascii() or not header.isascii() or any(c in header + name for c in "\r\n\0"):
                raise ValueError(f"header {name!r} must be ASCII on one line")
        return value


class WebConfig(_Strict):
    tls_server_config: TlsServerConfig | None = None
    http_server_config: HttpServerConfig = HttpServerConfig()
    basic_auth_users: dict[str, str] = Field(default_factory=dict)

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt(cls, value: dict[str, str]) -> dict[str, str]:
        for user, hashed in value.items():
            if not hashed.startswith(("$2a$", "$2b$", "$2y$")) or len(hashed) != 60:
                raise ValueError(f'the password of {user!r} must be a bcrypt hash (htpasswd -nBC 10 "")')
        return value

    def ssl_context(self) -> ssl.SSLContext | None:
        tls = self.tls_server_config
        if tls is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = _VERSIONS[tls.min_version]
        context.maximum_version = _VERSIONS[tls.max_version]
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
            if tls.client_ca_file is not None:
                context.load_verify_locations(cafile=str(tls.client_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"web config: cannot load the TLS files: {exc}") from None
        context.verify_mode = _CLIENT_AUTH[tls.client_auth_type]
        return context


def load_web_config(path: Path) -> WebConfig:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"--web.config.file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--web.config.file {path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--web.config.file {path}: must be a mapping")
    tls = data.get("tls_server_config")
    for key, why in _NOT_SUPPORTED.items():
        if isinstance(tls, dict) and key in tls:
            raise ConfigError(f"--web.config.file {path}: tls_server_config.{key} is not supported ({why})")
    if "rate_limit" in data:
        raise ConfigError(f"--web.config.file {path}: rate_limit is not supported; limit at the scraper")
    try:
        config = WebConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"--web.config.file {path}: {where + ': ' if where else ''}{message}") from None
    config.ssl_context()  # the TLS files are read now: a bad one fails the start, not the first scrape
    return config


class BasicAuthUsers:
    """Checks basic-auth credentials against bcrypt hashes, remembering the recent good ones."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = {name.encode(): hashed.encode() for name, hashed in users.items()}
        self._good: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, user: bytes, password: bytes) -> bool:
        import bcrypt

        hashed = self.users.get(user)
        # a missing user costs a bcrypt check too, so timing does not tell which users exist
        target = hashed or next(iter(self.users.values()))
        key = hashlib.sha256(user + b"\0" + password + b"\0" + target).digest()
        with self._lock:
            if key in self._good:
                self._good.move_to_end(key)
                return hashed is not None
        try:
            ok = bcrypt.checkpw(password, target)
        except ValueError:
            return False
        if ok and hashed is not None:
            with self._lock:
                self._good[key] = None
                while len(self._good) > AUTH_CACHE_SIZE:
                    self._good.popitem(last=False)
        return ok and hashed is not None
