"""The webhook's section of kvscope.yaml (`kvscope diagnose --listen`): who may post alerts and
how much work one post may cause.

    webhook:
      bearer_token_file: /etc/kvscope/webhook-token     # Alertmanager: http_config.authorization
      basic_auth: {username: alertmanager, password_file: /etc/kvscope/webhook-password}
      max_body_bytes: 1048576
      max_alerts: 100
      workers: 2
      queue: 64
      keep_reports: 500
      keep_for: 7d
      after_start: 2m                                   # diagnose at the alert's startsAt + this
      external_url: https://kvscope.example.com/webhook # the base of report links in notifications
      forward_timeout: 10s                              # --forward: each attempt's whole budget
      forward_attempts: 3                               # ... tried again after 1 s, 2 s, ...

Secrets come from files or the environment (KVSCOPE_WEBHOOK_TOKEN, KVSCOPE_WEBHOOK_PASSWORD),
never from the command line, where any user of the machine can read them. The names follow
Alertmanager's own `http_config`, so the receiver's settings mirror the sender's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvscope import config
from kvscope.config import ConfigError
from kvscope.durations import parse_duration
from kvscope.http_auth import BasicCheck, authorized, fixed_basic, read_secret

TOKEN_ENV = "KVSCOPE_WEBHOOK_TOKEN"
PASSWORD_ENV = "KVSCOPE_WEBHOOK_PASSWORD"
_BASE_URL = re.compile(r"https?://[^/\s?#]+(/[^\s?#]*)?")  # scheme, host, an optional path: no query


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BasicAuth(_Strict):
    username: str = Field(min_length=1, max_length=256)
    password_file: Path | None = None


class WebhookConfig(_Strict):
    bearer_token_file: Path | None = None
    basic_auth: BasicAuth | None = None
    max_body_bytes: int = Field(1 << 20, ge=1024, le=64 << 20, description="largest webhook payload")
    max_alerts: int = Field(100, ge=1, le=10_000, description="most alerts in one payload")
    workers: int = Field(2, ge=1, le=16, description="diagnoses run at once")
    queue: int = Field(64, ge=1, le=10_000, description="alerts waiting for a worker (then 503)")
    keep_reports: int = Field(500, ge=1, le=100_000, description="reports kept (in memory and on disk)")
    keep_for: str = Field("7d", description="reports older than this are pruned")
    after_start: str = Field(
        "2m", description="diagnose at the alert's startsAt plus this (never later than its arrival); 0s: at it"
    )
    external_url: str | None = Field(
        None, description="where people reach this receiver: the base of report links (default: the --listen address)"
    )
    forward_timeout: str = Field("10s", description="--forward: the most one attempt may take, answer included")
    forward_attempts: int = Field(3, ge=1, le=10, description="--forward: attempts before the notification is given up")

    @field_validator("keep_for", "forward_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value

    @field_validator("after_start")
    @classmethod
    def _offset(cls, value: str) -> str:
        _seconds_or_zero(value)
        return value

    @field_validator("external_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is not None and not _BASE_URL.fullmatch(value):
            raise ValueError(f"must be an http(s) URL without a query or #fragment, not {value[:80]!r}")
        return value.rstrip("/") if value is not None else None

    @property
    def keep_seconds(self) -> float:
        return parse_duration(self.keep_for)

    @property
    def after_start_seconds(self) -> float:
        return _seconds_or_zero(self.after_start)

    @property
    def forward_timeout_seconds(self) -> float:
        return parse_duration(self.forward_timeout)


def _seconds_or_zero(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0s") else parse_duration(text)


@dataclass(frozen=True)
class Credentials:
    """What a poster must present: a bearer token, basic auth, either, or (both None) nothing."""

    token: bytes | None = None
    basic: BasicCheck | None = None

    @property
    def required(self) -> bool:
        return self.token is not None or self.basic is not None

    def allow(self, header: bytes | None) -> bool:
        return authorized(header, token=self.token, basic=self.basic)


def credentials(settings: WebhookConfig) -> Credentials:
    try:
        token = read_secret("webhook bearer token", settings.bearer_token_file, TOKEN_ENV)
        basic = None
        if settings.basic_auth is not None:
            password = read_secret("webhook basic-auth password", settings.basic_auth.password_file, PASSWORD_ENV)
            if password is None:
                raise ConfigError(f"basic_auth needs a password_file or ${PASSWORD_ENV}")
            basic = fixed_basic(settings.basic_auth.username.encode(), password)
    except ConfigError as exc:
        raise ConfigError(f"webhook: {exc}") from None
    return Credentials(token, basic)


def load_webhook_config(settings: config.Config) -> WebhookConfig:
    return settings.section("webhook", WebhookConfig)
