"""Per-tenant token budgets: a token bucket refilled continuously up to one minute's worth."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def go_duration(seconds: float) -> str:
    """A duration as OpenAI's rate-limit headers write it: 6m0s, 1.5s, 20ms."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


def rate_limit_headers(unit: str, per_minute: int, left: int) -> dict[str, str]:
    """OpenAI's x-ratelimit-*-<unit> headers for a bucket of `per_minute` holding `left`."""
    return {
        f"x-ratelimit-limit-{unit}": str(per_minute),
        f"x-ratelimit-remaining-{unit}": str(left),
        f"x-ratelimit-reset-{unit}": go_duration((per_minute - left) * 60 / per_minute),
    }


@dataclass
class TokenBucket:
    """Holds up to `per_minute` tokens, refilled at per_minute/60 per second.

    A request reserves its worst case (prompt + max_tokens x n) up front; what it did not use
    is refunded when it finishes, so short answers do not burn the budget of long ones.
    """

    per_minute: int
    clock: Callable[[], float] = time.monotonic
    level: float = field(init=False)
    _stamp: float = field(init=False)

    def __post_init__(self) -> None:
        self.level = float(self.per_minute)
        self._stamp = self.clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.per_minute, self.level + (now - self._stamp) * self.per_minute / 60)
        self._stamp = now

    def available(self) -> int:
        self._refill()
        return int(self.level)

    def try_take(self, tokens: int) -> bool:
        """Take `tokens` if the bucket holds them; never goes negative."""
        self._refill()
        if tokens > self.level:
            return False
        self.level -= tokens
        return True

    def charge(self, tokens: int) -> None:
        """Take up to `tokens`: as many as the bucket holds (output that was not reserved)."""
        self.try_take(min(max(0, tokens), self.available()))

    def refund(self, tokens: int) -> None:
        self._refill()
        self.level = min(self.per_minute, self.level + max(0, tokens))

    def headers(self, unit: str = "tokens") -> dict[str, str]:
        """OpenAI's x-ratelimit-*-<unit> headers: the budget, what is left, when it is full again."""
        return rate_limit_headers(unit, self.per_minute, self.available())

    def seconds_until(self, tokens: int) -> float:
        """How long until `tokens` are available (inf if more than the bucket holds)."""
        if tokens > self.per_minute:
            return math.inf
        self._refill()
        return max(0.0, (tokens - self.level) * 60 / self.per_minute)


class TenantQuotas:
    """One bucket per tenant, created on first use from the tenant's tier budget."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._buckets: dict[str, TokenBucket] = {}
        self._clock = clock

    def bucket(self, tenant: str, per_minute: int) -> TokenBucket:
        bucket = self._buckets.get(tenant)
        if bucket is None or bucket.per_minute != per_minute:
            bucket = self._buckets[tenant] = TokenBucket(per_minute, self._clock)
        return bucket

    def get(self, tenant: str) -> TokenBucket | None:
        return self._buckets.get(tenant)
