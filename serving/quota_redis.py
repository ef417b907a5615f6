"""Token buckets shared by every gateway replica, kept in Redis (`quota_backend: redis://...`).

One Lua script refills a request's buckets by the time elapsed on Redis' own clock (`TIME`: the
replicas' clocks never meet) and takes the request and its tokens all or nothing (or charges or
refunds tokens) in the same atomic step and one round trip, so N replicas enforce one budget.
The refusals are serving.quota's, the same as the in-process store's. Keys are
`<quota_key_prefix>:<tenant>:<kind>` (tenants come from the config, never from clients) and
expire after KEY_TTL_SECONDS idle: a bucket idle for a minute is full again, which is what a
missing key means.

When Redis is down or slower than `quota_timeout_ms`, `quota_fail` decides: `open` admits the
request unmetered, `closed` refuses it with a 503. Either way the failure is counted
(catalog.GATEWAY_QUOTA_BACKEND_ERRORS, by reason) and logged once per outage; the next call
that succeeds ends the outage.

`redis` is imported only when a backend is configured: the in-process default needs none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from serving.errors import Rejection
from serving.gateway_config import QUOTA_PASSWORD_ENV, GatewayConfig, Tier
from serving.quota import Answer, Kind, Taken, refusal

log = logging.getLogger("kvscope.serve")

KEY_TTL_SECONDS = 120  # twice the time an empty bucket takes to fill
MAX_CONNECTIONS = 64  # per gateway process; a call holds one for a round trip
Op = Literal["take", "charge", "refund", "peek"]

# KEYS: the buckets. ARGV: op, ttl seconds, then per key its per_minute and tokens. Returns
# {given 0|1, level} per key. take: all or nothing over every key (a request and its tokens;
# a key short of what it is asked gives 0 and then no key gives); charge: as much as is left
# (output past what was reserved); refund: back up to the cap; peek: refill only. Levels go
# back as strings: Redis truncates Lua numbers to integers, and the level is fractional.
SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local op = ARGV[1]
local levels, caps, wants, enough = {}, {}, {}, {}
local all = true
for i, key in ipairs(KEYS) do
  local cap = tonumber(ARGV[2 * i + 1])
  local n = math.max(0, tonumber(ARGV[2 * i + 2]))
  local state = redis.call('HMGET', key, 'level', 'stamp')
  local level = tonumber(state[1])
  local stamp = tonumber(state[2])
  if level == nil or stamp == nil then
    level, stamp = cap, now
  end
  if now > stamp then
    level = level + (now - stamp) * cap / 60000000
  end
  if level > cap then level = cap end
  levels[i], caps[i], wants[i] = level, cap, n
  enough[i] = n <= level
  if not enough[i] then all = false end
end
local reply = {}
for i, key in ipairs(KEYS) do
  local level, n = levels[i], wants[i]
  if op == 'take' and all then
    level = level - n
  elseif op == 'charge' then
    level = level - math.min(n, math.max(0, level))
  elseif op == 'refund' then
    level = math.min(caps[i], level + n)
  end
  redis.call('HSET', key, 'level', string.format('%.17g', level), 'stamp', string.format('%.17g', now))
  redis.call('EXPIRE', key, tonumber(ARGV[2]))
  reply[2 * i - 1] = (op ~= 'take' or enough[i]) and 1 or 0
  reply[2 * i] = string.format('%.17g', level)
end
return reply
"""
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()  # Redis names scripts by their SHA-1


@dataclass(frozen=True)
class Reservation:
    """What a request holds in the shared buckets (nothing when admitted with the backend down)."""

    tenant: str
    tier: str
    held: bool


def _reason(exc: BaseException) -> str:
    import redis.exceptions as rexc

    if isinstance(exc, TimeoutError | rexc.TimeoutError):
        return "timeout"
    if isinstance(exc, rexc.AuthenticationError | rexc.AuthorizationError):
        return "auth"  # a wrong password is not an outage the network will end
    if isinstance(exc, rexc.ConnectionError | OSError):
        return "connection"
    return "error"


def redacted(url: str) -> str:
    """The backend URL as logs show it: without user information."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def read_password(config: GatewayConfig) -> str | None:
    """The Redis password: quota_password_file, else $KVSCOPE_QUOTA_REDIS_PASSWORD, else none."""
    if config.quota_password_file is not None:
        return config.quota_password_file.read_text().strip() or None
    return os.environ.get(QUOTA_PASSWORD_ENV) or None


class SharedQuotas:
    """The gateway's token and request buckets, in Redis; one per gateway process."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        on_error: Callable[[str], None] = lambda reason: None,
        password: str | None = None,
    ) -> None:
        assert config.quota_backend is not None
        self.config = config
        self.url = config.quota_backend
        self.timeout = config.quota_timeout_ms / 1000
        self.fail_open = config.quota_fail == "open"
        self._password = password if password is not None else read_password(config)
        self._on_error = on_error
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._down = False
        self._last: dict[tuple[str, Kind], Answer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def key(self, tenant: str, kind: Kind) -> str:
        return f"{self.config.quota_key_prefix}:{tenant}:{kind}"

    def _redis(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is not loop:
            self._client = None  # its connections belong to another (closed) loop
        if self._client is None:
            self._client_loop = loop
            import redis.asyncio
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            # A burst past MAX_CONNECTIONS waits for a connection (within the timeout) instead
            # of failing; no retries: a retry would multiply the latency the quota adds.
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                self.url,
                max_connections=MAX_CONNECTIONS,
                timeout=self.timeout,
                password=self._password,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                decode_responses=True,
            )
            self._client = redis.asyncio.Redis(connection_pool=pool)
        return self._client

    async def call(self, tenant: str, kind: Kind, per_minute: int, tokens: int, op: Op) -> Answer | None:
        """Run the script on one bucket; None when the backend failed (counted, logged once)."""
        answers = await self.run(tenant, ((kind, per_minute, tokens),), op)
        return None if answers is None else answers[0]

    async def run(self, tenant: str, buckets: tuple[tuple[Kind, int, int], ...], op: Op) -> tuple[Answer, ...] | None:
        """Run the script over the tenant's `buckets` (kind, per_minute, tokens) in one atomic
        step; None when the backend failed (counted, logged once)."""
        import redis.exceptions as rexc

        self._loop = asyncio.get_running_loop()
        keys = [self.key(tenant, kind) for kind, _, _ in buckets]
        args = [op, KEY_TTL_SECONDS, *(x for _, per_minute, tokens in buckets for x in (per_minute, tokens))]
        try:
            async with asyncio.timeout(self.timeout):
                client = self._redis()
                try:
                    reply = await client.evalsha(SCRIPT_SHA, len(keys), *keys, *args)
                except rexc.NoScriptError:  # new, restarted or flushed Redis: EVAL runs and caches it
                    reply = await client.eval(SCRIPT, len(keys), *keys, *args)
        except (TimeoutError, rexc.RedisError, OSError) as exc:
            self._failed(exc)
            return None
        self._recovered()
        answers = tuple(
            Answer(bool(int(reply[2 * i])), float(reply[2 * i + 1]), per_minute)
            for i, (_, per_minute, _) in enumerate(buckets)
        )
        for (kind, _, _), answer in zip(buckets, answers, strict=True):
            self._last[tenant, kind] = answer
        return answers

    def _failed(self, exc: BaseException) -> None:
        reason = _reason(exc)
        self._on_error(reason)
        if not self._down:
            self._down = True
            action = "admitting requests unmetered" if self.fail_open else "refusing requests with 503"
            log.warning(
                "the shared quota backend %s failed (%s: %s); %s (quota_fail: %s) until it answers again",
                redacted(self.url),
                reason,
                type(exc).__name__,
                action,
                self.config.quota_fail,
            )

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            log.warning("the shared quota backend %s answers again; quotas are enforced", redacted(self.url))

    @property
    def down(self) -> bool:
        return self._down

    def _unavailable(self) -> Reservation | None:
        """quota_fail open: admitted, holding nothing; closed: a 503 the client may retry."""
        if self.fail_open:
            return None
        raise Rejection(
            503,
            "quota_backend_unavailable",
            "the shared quota store cannot be reached, and this gateway refuses requests it cannot meter "
            "(quota_fail: closed); retry shortly",
            headers={"retry-after": "1"},
        )

    async def reserve(self, tenant: str, tier_name: str, tokens: int) -> Reservation:
        """Take one request and `tokens` from the tenant's shared buckets in one step, all or
        nothing, or refuse (429, 503)."""
        tier = self.config.tiers[tier_name]
        wanted: tuple[tuple[Kind, int | None, int], ...] = (
            ("requests", tier.requests_per_minute, 1),
            ("tokens", tier.tokens_per_minute, tokens),
        )
        buckets = tuple((kind, per_minute, n) for kind, per_minute, n in wanted if per_minute is not None)
        if not buckets:
            return Reservation(tenant, tier_name, held=True)
        answers = await self.run(tenant, buckets, "take")
        if answers is None:
            return self._unavailable() or Reservation(tenant, tier_name, held=False)
        by_kind = {kind: answer for (kind, _, _), answer in zip(buckets, answers, strict=True)}
        if (refused := refusal(tenant, tokens, Taken(by_kind.get("requests"), by_kind.get("tokens")))) is not None:
            raise refused
        return Reservation(tenant, tier_name, held=True)

    def headers(self, tenant: str, tier_name: str) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers from the script's latest answers for the tenant."""
        tier = self.config.tiers[tier_name]
        headers: dict[str, str] = {}
        kinds: tuple[tuple[Kind, int | None], ...] = (
            ("tokens", tier.tokens_per_minute),
            ("requests", tier.requests_per_minute),
        )
        for kind, per_minute in kinds:
            answer = self._last.get((tenant, kind))
            if per_minute is not None and answer is not None:
                headers |= answer.headers(kind)
        return headers

    def remaining(self, tenant: str) -> float:
        """Tokens left in the tenant's bucket at the script's latest answer (NaN before one)."""
        answer = self._last.get((tenant, "tokens"))
        return math.nan if answer is None else float(answer.left)

    def bucket(self, reservation: Reservation, tier: Tier) -> SharedBucket | None:
        """The refund side of a reservation the backend holds (None: nothing to settle)."""
        if not reservation.held or tier.tokens_per_minute is None:
            return None
        return SharedBucket(self, reservation.tenant, tier.tokens_per_minute)

    def spawn(self, coro_fn: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run a quota call in the gateway's loop without waiting for it (refunds, charges)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def start() -> None:
            task = loop.create_task(coro_fn())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            start()
        else:  # the stat logger may report from another thread
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(start)

    async def drain(self) -> None:
        """Wait for the refunds and charges in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        await self.drain()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None


@dataclass
class SharedBucket:
    """The sync face the gateway settles a request through: refunds and charges go to Redis
    in the background (a lost one, with Redis down, only ever costs the tenant)."""

    quotas: SharedQuotas
    tenant: str
    per_minute: int

    def refund(self, tokens: int) -> None:
        if tokens > 0:
            self.quotas.spawn(lambda: self.quotas.call(self.tenant, "tokens", self.per_minute, tokens, "refund"))

    def available(self) -> int:
        left = self.quotas.remaining(self.tenant)
        return 0 if math.isnan(left) else int(left)

    def charge(self, tokens: int) -> None:
        """Take up to `tokens` (output past the reservation): as much as the bucket holds."""
        if tokens > 0:
            self.quotas.spawn(lambda: self.quotas.call(self.tenant, "tokens", self.per_minute, tokens, "charge"))
