"""OpenAI-format error responses: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# OpenAI's error types by HTTP status.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


@dataclass
class Rejection(Exception):  # noqa: N818 - a refusal, not an error of ours
    """A request the gateway refuses; `reason` labels the gateway-rejections counter."""

    status: int
    reason: str
    message: str
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return error_body(self.status, self.message, code=self.reason, param=self.param)


def error_body(status: int, message: str, *, code: str | None = None, param: str | None = None) -> bytes:
    error = {
        "message": message,
        "type": _TYPES.get(status, "api_error"),
        "param": param,
        "code": code,
    }
    return json.dumps({"error": error}).encode()
