"""The shared HTTP client and an incremental Server-Sent Events reader.

:func:`get_session` returns one :class:`aiohttp.ClientSession` per running event loop,
created on first use and closed when the loop shuts down (``asyncio.run`` and every
``asyncio.Runner`` finalise it), so connections are pooled and kept alive across
requests and a fresh loop (a new test, a new ``asyncio.run``) gets a fresh session.

:func:`iter_sse` turns a response body into ``(event, data)`` pairs. It works on raw
byte chunks: it splits complete lines out of a buffer, keeps the remainder, and
allocates only for the lines it returns.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ByteSource", "close_session", "get_session", "iter_sse", "redact_headers", "redact_text"]

# loop -> (session, keeper async generator that closes the session at loop shutdown)
_sessions: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncIterator[None]]] = {}
_last: tuple[asyncio.AbstractEventLoop | None, aiohttp.ClientSession | None] = (None, None)

SENSITIVE_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}
)
"""Header names whose values are always redacted."""


async def _keeper(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    # An async generator registered with the loop: loop.shutdown_asyncgens() finalises
    # it, which closes the session before the loop closes.
    try:
        yield
    finally:
        _sessions.pop(asyncio.get_running_loop(), None)
        await session.close()


async def get_session() -> aiohttp.ClientSession:
    """The process-wide session for the running event loop (created on first use)."""
    global _last
    loop = asyncio.get_running_loop()
    last_loop, last_session = _last
    if last_loop is loop and last_session is not None and not last_session.closed:
        return last_session
    entry = _sessions.get(loop)
    if entry is not None and not entry[0].closed:
        _last = (loop, entry[0])
        return entry[0]
    for old in [lp for lp in _sessions if lp.is_closed()]:
        del _sessions[old]
    import aiohttp

    connector = aiohttp.TCPConnector(limit=256, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=60)
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        auto_decompress=True,
        # Proxies from the environment are resolved once per host by proxy_for(); aiohttp's
        # trust_env would look them (and .netrc) up in a thread on every request.
        trust_env=False,
    )
    keeper = _keeper(session)
    await anext(keeper)
    _sessions[loop] = (session, keeper)
    _last = (loop, session)
    return session


@functools.lru_cache(maxsize=256)
def _proxy(scheme: str, host: str) -> str | None:
    import urllib.request

    if urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(scheme) or proxies.get("all") or None


@functools.lru_cache(maxsize=256)
def proxy_for(url: str) -> str | None:
    """The proxy the environment (``HTTPS_PROXY``, ``NO_PROXY`` …) sets for ``url``, if any.

    Looked up once per scheme and host (and remembered per URL).
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return _proxy(parts.scheme, parts.hostname or "")


async def close_session() -> None:
    """Close the running loop's session now (a later request opens a new one)."""
    global _last
    loop = asyncio.get_running_loop()
    entry = _sessions.pop(loop, None)
    if _last[0] is loop:
        _last = (None, None)
    if entry is not None:
        session, keeper = entry
        await session.close()
        aclose = getattr(keeper, "aclose", None)
        if aclose is not None:
            await aclose()


class ByteSource(Protocol):
    """Anything with aiohttp's ``readany``: returns the next bytes, ``b""`` at the end."""

    async def readany(self) -> bytes:
        """The next available bytes (``b""`` at end of stream)."""
        ...


async def iter_sse(content: ByteSource) -> AsyncIterator[tuple[str, bytes]]:
    """Yield ``(event, data)`` for each Server-Sent Event in ``content``.

    ``event`` is the ``event:`` field ("" when absent); ``data`` joins multiple
    ``data:`` lines with ``\\n``. Comments (``:`` lines), ``id:`` and ``retry:`` fields
    are ignored, ``\\r\\n`` and ``\\n`` line ends both work. At end of stream an event
    whose lines are complete but lacks the closing blank line is still delivered; a
    line cut off mid-way is dropped.
    """
    rest = b""
    pending: list[bytes] = []  # chunks of one unfinished long line, joined once it ends
    event = ""
    data: bytes | None = None
    while True:
        chunk = await content.readany()
        if not chunk:
            break
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        if pending:
            chunk = b"".join((rest, *pending, chunk))
            pending.clear()
        elif rest:
            chunk = rest + chunk
        if b"\r" in chunk:
            # A "\r" cut off at the end stays in ``rest`` and meets its "\n" here next time.
            chunk = chunk.replace(b"\r\n", b"\n")
        lines = chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if not line:
                if data is not None:
                    yield event, data
                    data = None
                event = ""
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                data = value if data is None else data + b"\n" + value
            elif line.startswith(b"event:"):
                event = line[6:].strip().decode()
            # Comments, id:, retry: and unknown fields are ignored.
    # A line cut off by the end of the stream is incomplete and dropped.
    if data is not None:
        yield event, data


def redact_headers(headers: Any, secrets: tuple[str, ...] = ()) -> dict[str, str]:
    """A copy of ``headers`` with credentials replaced by ``***``."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower() in SENSITIVE_HEADERS:
            out[name] = "***"
        else:
            out[name] = redact_text(str(value), secrets)
    return out


def redact_text(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every occurrence of each non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "***")
    return text
