"""Fetching /metrics pages from outside, bounded: a total wall-clock deadline (a target that
drips its page byte by byte is cut off when the deadline passes, however often it sends), a
byte cap, and every target at once, so one bad target never stalls the others. A target's
credentials (the URL's user:password, or a bearer token) go in the Authorization header and
never in what labels or messages show. The exporter and `kvscope diagnose --scrape` read
their targets through here.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

DEFAULT_MAX_BYTES = 32 << 20  # a vLLM page with LoRA and many engines stays far below


@dataclass(frozen=True)
class Target:
    """A page to scrape: its URL without credentials (what labels show) and the auth header."""

    url: str
    authorization: str | None = None

    @classmethod
    def of(cls, url: str, token: bytes | None = None) -> Target:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            host = parts.hostname or ""
            netloc = f"[{host}]" if ":" in host else host
            if parts.port is not None:
                netloc += f":{parts.port}"
            secret = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
            bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
            return cls(bare, "Basic " + base64.b64encode(secret).decode())
        return cls(url, f"Bearer {token.decode()}" if token else None)


@dataclass
class Fetched:
    url: str
    body: bytes | None  # None: not fetched, `error` says why
    seconds: float
    error: str = ""


class PageTooLargeError(Exception):
    pass


async def _fetch(client: httpx.AsyncClient, target: Target, max_bytes: int) -> bytes:
    headers = {"authorization": target.authorization} if target.authorization else {}
    async with client.stream("GET", target.url, headers=headers) as response:
        response.raise_for_status()
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise PageTooLargeError(f"the page is {int(declared):,} bytes, over the {max_bytes:,}-byte cap")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise PageTooLargeError(f"the page is over the {max_bytes:,}-byte cap")
        return bytes(body)


async def _fetch_one(client: httpx.AsyncClient, target: Target, deadline: float, max_bytes: int) -> Fetched:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(deadline):
            body = await _fetch(client, target, max_bytes)
    except TimeoutError:
        return Fetched(target.url, None, time.perf_counter() - started, f"no page within {deadline:g} s")
    except (httpx.HTTPError, PageTooLargeError) as exc:
        return Fetched(target.url, None, time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
    return Fetched(target.url, body, time.perf_counter() - started)


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's default verifying context, made once: loading the CA bundle costs 20 ms, more
    than parsing a vLLM page, and a new client per pass would load it every time."""
    return httpx.create_ssl_context()


async def _fetch_all(targets: Sequence[Target], deadline: float, max_bytes: int) -> list[Fetched]:
    async with httpx.AsyncClient(timeout=deadline, follow_redirects=False, verify=_tls()) as client:
        return list(await asyncio.gather(*(_fetch_one(client, t, deadline, max_bytes) for t in targets)))


def fetch_all(targets: Sequence[Target], deadline: float, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Fetched]:
    """Every target at once, each within `deadline` seconds of wall clock and `max_bytes`.

    Runs its own event loop: call it from a worker thread, never from a running loop.
    """
    return asyncio.run(_fetch_all(targets, deadline, max_bytes))
