"""KV lanes: requests of a QoS class together hold at most a share of the engine's KV pool.

vLLM admits a waiting request when its whole prompt fits in the free KV blocks *now*, and
does not reserve them: two 12K-token prompts admitted one step apart both fit an empty
20K-token pool, then outgrow it as they prefill, and the engine preempts (seed 000's
avalanche). A lane holds such requests at the gateway instead: a request enters the engine
while its class's requests in flight, its own tokens included, stay within the share; one
always may, so a prompt larger than the share still runs, alone. Waiting requests enter in
priority order (the QoS virtual deadline), so the lane keeps the class's own ageing.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    tokens: int = field(compare=False)
    granted: asyncio.Future[None] = field(compare=False)


class KvLane:
    """At most `capacity` KV tokens in flight for one class; the rest wait in priority order."""

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"KV lane {name!r}: capacity must be at least 1 token, got {capacity}")
        self.name = name
        self.capacity = capacity
        self.in_use = 0
        self.running = 0
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiting if not w.granted.done())

    def _fits(self, tokens: int) -> bool:
        return self.running == 0 or self.in_use + tokens <= self.capacity

    def _grant(self, tokens: int) -> None:
        self.in_use += tokens
        self.running += 1

    def _wake(self) -> None:
        """Let waiting requests in, head first, while they fit (strict order: no overtaking)."""
        while self._waiting:
            head = self._waiting[0]
            if head.granted.done():  # cancelled while waiting
                heapq.heappop(self._waiting)
                continue
            if not self._fits(head.tokens):
                return
            heapq.heappop(self._waiting)
            self._grant(head.tokens)
            head.granted.set_result(None)

    def release(self, tokens: int) -> None:
        self.in_use -= tokens
        self.running -= 1
        self._wake()

    def try_acquire(self, tokens: int) -> bool:
        """Enter now if nobody waits and the tokens fit; False: call `acquire` and wait."""
        if self.waiting or not self._fits(tokens):
            return False
        self._grant(tokens)
        return True

    async def acquire(self, tokens: int, priority: int) -> bool:
        """Wait until the request may enter the engine; True when it had to wait."""
        if self.try_acquire(tokens):
            return False
        waiter = _Waiter(priority, next(self._seq), tokens, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        self._wake()  # a higher-priority arrival may be the head now
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(tokens)  # granted as the wait was cancelled: hand the room on
            else:
                waiter.granted.cancel()
                self._wake()
            raise
        return True

    @contextlib.asynccontextmanager
    async def hold(self, tokens: int, priority: int) -> AsyncIterator[bool]:
        waited = await self.acquire(tokens, priority)
        try:
            yield waited
        finally:
            self.release(tokens)
