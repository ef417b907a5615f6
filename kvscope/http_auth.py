"""The credentials kvscope's own servers ask for (the exporter, the webhook): secrets read from a
file or the environment, never the command line, and the Authorization header checked as bytes
in constant time, so any header is a 401 at worst, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
from collections.abc import Callable
from pathlib import Path

from kvscope.config import ConfigError

MAX_SECRET_BYTES = 4096
BasicCheck = Callable[[bytes, bytes], bool]  # (user, password) -> allowed


def read_secret(what: str, path: Path | None = None, env: str | None = None) -> bytes | None:
    """A secret from `path` (first) or the environment variable `env`, or None when neither is set.

    One line of printable ASCII; ConfigError naming what is wrong (never the secret itself).
    """
    value = os.environ.get(env) if env else None
    if path is not None:
        try:
            with path.open("rb") as handle:
                raw = handle.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} file {path}: {exc.strerror}") from None
        if len(raw) > MAX_SECRET_BYTES:
            raise ConfigError(f"the {what} file {path} is over {MAX_SECRET_BYTES} bytes")
        value = raw.decode("utf-8", "replace").strip()
    if value is None:
        return None
    if not value or not value.isascii() or not value.isprintable():
        raise ConfigError(f"the {what} must be one line of printable ASCII")
    return value.encode()


def fixed_basic(user: bytes, password: bytes) -> BasicCheck:
    """A basic-auth check against one user and password, in constant time."""

    def check(given_user: bytes, given_password: bytes) -> bool:
        same_user = hmac.compare_digest(given_user, user)
        return hmac.compare_digest(given_password, password) and same_user

    return check


def authorized(header: bytes | None, *, token: bytes | None, basic: BasicCheck | None) -> bool:
    """Whether the Authorization header carries the bearer `token` or passes `basic`.

    With neither configured, everything is allowed.
    """
    if token is None and basic is None:
        return True
    scheme, _, value = (header or b"").partition(b" ")
    value = value.strip()
    if token is not None and scheme.lower() == b"bearer":
        return hmac.compare_digest(value, token)
    if basic is not None and scheme.lower() == b"basic":
        try:
            user, sep, password = base64.b64decode(value, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        return bool(sep) and basic(user, password)
    return False
