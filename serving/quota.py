"""Per-tenant budgets: token buckets refilled continuously up to one minute's worth.

One quota interface, two stores: the in-process `TenantQuotas` here and the shared Redis one
(serving/quota_redis.py). Both take a request's two buckets (requests, tokens) all or nothing
and answer a `Taken`; `refusal` turns a refused take into the one 429 (or 413) both serve.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from serving.errors import Rejection

Kind = Literal["requests", "tokens"]


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


@dataclass(frozen=True)
class Answer:
    """One bucket's state after a take: whether it gave what was asked, and what it holds."""

    taken: bool
    level: float
    per_minute: int

    @property
    def left(self) -> int:
        return max(0, int(self.level))

    def headers(self, unit: str) -> dict[str, str]:
        return rate_limit_headers(unit, self.per_minute, self.left)

    def seconds_until(self, tokens: int) -> float:
        """How long until `tokens` are available (inf if more than the bucket holds)."""
        if tokens > self.per_minute:
            return math.inf
        return max(0.0, (tokens - self.level) * 60 / self.per_minute)


@dataclass(frozen=True)
class Taken:
    """A request's take from its buckets (None: the tier sets no such budget), all or nothing:
    each answer's `taken` says whether that bucket held enough; `refused` names the first that
    did not, and then neither bucket gave."""

    requests: Answer | None
    tokens: Answer | None

    @property
    def refused(self) -> Kind | None:
        if self.requests is not None and not self.requests.taken:
            return "requests"
        if self.tokens is not None and not self.tokens.taken:
            return "tokens"
        return None

    def headers(self) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers for the buckets the take read."""
        headers: dict[str, str] = {}
        if self.tokens is not None:
            headers |= self.tokens.headers("tokens")
        if self.requests is not None:
            headers |= self.requests.headers("requests")
        return headers


def over_a_minute(tenant: str, per_minute: int, tokens: int) -> Rejection | None:
    """A request larger than a whole minute's budget can never be admitted: a 413, not a 429."""
    if tokens <= per_minute:
        return None
    return Rejection(
        413,
        "request_exceeds_quota",
        f"the request needs {tokens} tokens, more than tenant '{tenant}' may use in a "
        f"minute ({per_minute}): over by {tokens - per_minute}",
    )


def refusal(tenant: str, tokens: int, taken: Taken, headers: Mapping[str, str] | None = None) -> Rejection | None:
    """The 429 for a refused take (None when it was admitted), with retry-after and the
    x-ratelimit headers (`headers`, else the take's own)."""
    kind = taken.refused
    rate = dict(taken.headers() if headers is None else headers)
    if kind == "requests" and taken.requests is not None:
        answer = taken.requests
        wait = math.ceil(answer.seconds_until(1))
        return Rejection(
            429,
            "request_quota_exhausted",
            f"tenant '{tenant}' is over its request budget of {answer.per_minute} per minute; retry in {wait} s",
            headers={"retry-after": str(max(1, wait)), **rate},
        )
    if kind == "tokens" and taken.tokens is not None:
        answer = taken.tokens
        wait = math.ceil(answer.seconds_until(tokens))
        return Rejection(
            429,
            "quota_exhausted",
            f"tenant '{tenant}' is over its token budget: the request needs {tokens} tokens, "
            f"{answer.left} of {answer.per_minute} per minute are left (short by {tokens - answer.left}); "
            f"retry in {wait} s",
            headers={"retry-after": str(max(1, wait)), **rate},
        )
    return None


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

    def answer(self, taken: bool = True) -> Answer:
        self._refill()
        return Answer(taken, self.level, self.per_minute)

    def headers(self, unit: str = "tokens") -> dict[str, str]:
        """OpenAI's x-ratelimit-*-<unit> headers: the budget, what is left, when it is full again."""
        return self.answer().headers(unit)

    def seconds_until(self, tokens: int) -> float:
        """How long until `tokens` are available (inf if more than the bucket holds)."""
        return self.answer().seconds_until(tokens)


def take_both(requests: TokenBucket | None, tokens: TokenBucket | None, n: int) -> Taken:
    """One request and `n` tokens, all or nothing (what the Redis script does in one step)."""
    needs = ((requests, 1), (tokens, n))
    short = next((bucket for bucket, want in needs if bucket is not None and want > bucket.answer().level), None)
    if short is None:
        for bucket, want in needs:
            if bucket is not None:
                bucket.try_take(want)
    return Taken(
        None if requests is None else requests.answer(short is not requests),
        None if tokens is None else tokens.answer(short is not tokens),
    )


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
