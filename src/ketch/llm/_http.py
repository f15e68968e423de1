"""The shared HTTP client and an incremental Server-Sent Events reader.

:func:`get_session` returns one :class:`aiohttp.ClientSession` per running event loop,
created on first use and closed when the loop shuts down (``asyncio.run`` and every
``asyncio.Runner`` finalise it), so connections are pooled and kept alive across
requests and a fresh loop (a new test, a new ``asyncio.run``) gets a fresh session.

:func:`iter_sse` turns a response body into Server-Sent Events, delivered in one
:class:`SSEBatch` per read. It works on raw byte chunks: it splits complete lines out of a buffer,
keeps the remainder, and allocates only for the lines it returns.

:class:`Deadline` keeps the idle and total time limits of one request on a single
timer, and :class:`TimedContent` reads a body under them.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Coroutine
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import NamedTuple
from typing import Protocol
from typing import TypeVar

from ._errors import ModelError
from ._errors import RequestTimeoutError
from ._errors import ServerError
from ._errors import StreamIdleError
from ._signal import Aborted
from ._signal import AbortSignal
from ._signal import take_pending_cancel

if TYPE_CHECKING:
    import aiohttp


T = TypeVar("T")

# loop -> (session, keeper async generator that closes the session at loop shutdown)
_sessions: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncGenerator[None, None]]] = {}
_last: tuple[asyncio.AbstractEventLoop | None, aiohttp.ClientSession | None] = (None, None)

SENSITIVE_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}
)
"""Header names whose values are always redacted."""


async def _keeper(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
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
        await keeper.aclose()


class ByteSource(Protocol):
    """Anything with aiohttp's ``readany``: returns the next bytes, ``b""`` at the end."""

    async def readany(self) -> bytes:
        """The next available bytes (``b""`` at end of stream)."""
        ...


class Deadline:
    """The idle and total time limits of one request attempt, on a single timer, and
    its abort signal.

    ``idle`` bounds each wait for bytes (the response headers, then every read of the
    body); ``total`` bounds the whole attempt. Starting a wait only records the time:
    the timer fires at the earliest limit and re-arms itself when that limit has moved
    on, so nothing is rescheduled per chunk. A limit that passes, or ``signal``
    aborting, while the owning task waits in :meth:`wait` cancels the wait, which then
    raises :class:`~ketch.llm._errors.StreamIdleError`,
    :class:`~ketch.llm._errors.RequestTimeoutError` or
    :class:`~ketch.llm.Aborted`; one that happens between waits sets
    :attr:`error` and is raised by the next wait. A cancellation from anywhere else
    propagates unchanged. :meth:`close` when the attempt ends.
    """

    __slots__ = (
        "_cancelled",
        "_end",
        "_handle",
        "_idle",
        "_loop",
        "_remove",
        "_since",
        "_task",
        "_waiting",
        "error",
    )

    def __init__(self, idle: float | None, total: float | None, signal: AbortSignal | None = None) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._loop = loop
        self._task = asyncio.current_task()
        self._idle = idle
        self._end = now + total if total is not None else math.inf
        self._since = now
        self._waiting = False
        self._cancelled = False
        self.error: ModelError | Aborted | None = None
        """Why waiting ended early: the limit that passed, or the abort."""
        self._handle = loop.call_at(self._due(now), self._fire) if idle is not None or total is not None else None
        self._remove = signal.add_callback(self._on_abort) if signal is not None else None

    def _due(self, now: float) -> float:
        if self._idle is None:
            return self._end
        return min(self._end, (self._since if self._waiting else now) + self._idle)

    def _fire(self) -> None:
        self._handle = None
        if self.error is not None:  # aborted already
            return
        now = self._loop.time()
        if now >= self._end:
            error: ModelError = RequestTimeoutError("The request timed out")
        elif self._idle is not None and self._waiting and now >= self._since + self._idle:
            error = StreamIdleError(f"The provider sent no data for {self._idle:g} seconds")
        else:
            self._handle = self._loop.call_at(self._due(now), self._fire)
            return
        self._stop(error)

    def _on_abort(self) -> None:
        self._stop(Aborted("aborted"))  # an abort wins over a limit that passed first

    def _stop(self, error: ModelError | Aborted) -> None:
        self.error = error
        if self._waiting and self._task is not None and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` (sending the request, reading bytes) under the limits."""
        if self.error is not None:
            if isinstance(awaitable, Coroutine):
                awaitable.close()  # never awaited: no warning
            raise self.error
        self._since = self._loop.time()
        self._waiting = True
        try:
            result = await awaitable
        except asyncio.CancelledError:
            if self._cancelled and self._undo_cancel():
                raise self._passed() from None
            raise
        finally:
            self._waiting = False
        if self._cancelled:
            await take_pending_cancel(self._undo_cancel)
            raise self._passed() from None
        return result

    def _passed(self) -> ModelError | Aborted:
        assert self.error is not None
        return self.error

    def _undo_cancel(self) -> bool:
        # True when the limit's cancellation was the only one the task had.
        self._cancelled = False
        assert self._task is not None
        return self._task.uncancel() == 0

    def close(self) -> None:
        """Stop the timer and stop watching the signal (the attempt is over)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._remove is not None:
            self._remove()
            self._remove = None


class TimedContent:
    """A :class:`ByteSource` read under a :class:`Deadline`."""

    __slots__ = ("_content", "_deadline")

    def __init__(self, content: ByteSource, deadline: Deadline) -> None:
        self._content = content
        self._deadline = deadline

    async def readany(self) -> bytes:
        """The next available bytes (``b""`` at end of stream)."""
        return await self._deadline.wait(self._content.readany())


class SSEBatch(NamedTuple):
    """The Server-Sent Events that one read of a body completed."""

    data: list[bytes]
    """Each event's data (several ``data:`` lines joined with ``\\n``)."""
    events: list[str] | None
    """Each event's ``event:`` field ("" when absent), aligned with :attr:`data`; None
    when no event of the batch has one."""


DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The default limit on one Server-Sent Event (or one line of it) and on one
non-streamed response body: 16 MiB."""


def event_too_large(limit: int) -> ModelError:
    """The error for an event or body over ``limit`` bytes."""
    return ServerError(
        f"The provider sent an event larger than {limit} bytes (the max_event_bytes limit); "
        "the response was dropped"
    )


async def iter_sse(
    content: ByteSource, *, first: bytes = b"", max_event: int | None = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[SSEBatch]:
    """Yield the Server-Sent Events in ``content``, one :class:`SSEBatch` per read that
    completed any (so a body that arrives at once costs one step).

    ``first`` holds bytes already read from ``content``. Comments (``:`` lines),
    ``id:`` and ``retry:`` fields are ignored, ``\\r\\n`` and ``\\n`` line ends both
    work. At end of stream an event whose lines are complete but lacks the closing
    blank line is still delivered; a line cut off mid-way is dropped. A line or an
    event longer than ``max_event`` bytes (None: no limit) raises a
    :class:`~ketch.llm._errors.ServerError` before more of it is kept.
    """
    limit = max_event if max_event is not None else math.inf
    rest = b""
    pending: list[bytes] = []  # chunks of one unfinished long line, joined once it ends
    pending_size = 0
    event = ""
    data: bytes | None = None
    names_seen: dict[bytes, str] = {}  # "event:" lines decoded so far (a stream repeats a few)
    while True:
        if first:
            chunk, first = first, b""
        else:
            chunk = await content.readany()
        if not chunk:
            break
        if b"\n" not in chunk:
            pending.append(chunk)
            pending_size += len(chunk)
            if pending_size + len(rest) > limit:
                raise event_too_large(int(limit))
            continue
        if pending:
            chunk = b"".join((rest, *pending, chunk))
            pending.clear()
            pending_size = 0
        elif rest:
            chunk = rest + chunk
        if b"\r" in chunk:
            # A "\r" cut off at the end stays in ``rest`` and meets its "\n" here next time.
            chunk = chunk.replace(b"\r\n", b"\n")
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if len(rest) > limit:
            raise event_too_large(int(limit))
        datas: list[bytes] = []
        names: list[str] | None = None
        for line in lines:
            if not line:
                if data is not None:
                    if event:
                        if names is None:
                            names = [""] * len(datas)
                        names.append(event)
                    elif names is not None:
                        names.append("")
                    datas.append(data)
                    data = None
                event = ""
            elif line.startswith(b"data: "):
                data = line[6:] if data is None else data + b"\n" + line[6:]
                if len(data) > limit:
                    raise event_too_large(int(limit))
            elif line.startswith(b"event:"):
                name = names_seen.get(line)
                if name is None:
                    name = line[6:].strip().decode("utf-8", "replace")
                    if len(names_seen) < 64:
                        names_seen[line] = name
                event = name
            elif line.startswith(b"data:"):
                data = line[5:] if data is None else data + b"\n" + line[5:]
                if len(data) > limit:
                    raise event_too_large(int(limit))
            # Comments, id:, retry: and unknown fields are ignored.
        if datas:
            yield SSEBatch(datas, names)
    # A line cut off by the end of the stream is incomplete and dropped.
    if data is not None:
        yield SSEBatch([data], [event] if event else None)


async def read_limited(content: ByteSource, limit: int | None, first: bytes = b"") -> bytes:
    """The rest of ``content`` after ``first``; more than ``limit`` bytes (None: no
    limit) raises a :class:`~ketch.llm._errors.ServerError` without keeping them."""
    parts = [first] if first else []
    size = len(first)
    while True:
        chunk = await content.readany()
        if not chunk:
            break
        size += len(chunk)
        if limit is not None and size > limit:
            raise event_too_large(limit)
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def redact_headers(headers: Any, secrets: tuple[str, ...] = ()) -> dict[str, str]:
    """A copy of ``headers`` with credentials replaced by ``***``."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower() in SENSITIVE_HEADERS:
            out[name] = "***"
        else:
            out[name] = redact_text(str(value), secrets)
    return out


_USERINFO = re.compile(r"(//)[^/?#]*@")
_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_SECRET_PARAM_WORDS = ("key", "token", "secret", "pass", "pwd", "auth", "sig", "cred", "session", "code")
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")


def _secret_param(name: str) -> bool:
    """Whether a query parameter called ``name`` holds a credential (``api-key``, ``key``,
    ``token``, ``access_token``, ``sig``, ``password``, …)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_PARAM_WORDS)


def redact_url(url: str) -> str:
    """``url`` with its credentials shown as ``***``: those of its authority
    (``user:password@`` or a token as the user name, ``TOKEN@``) and the values of query
    parameters whose names say they hold one (``?api-key=``, ``key=``, ``token=``,
    ``access_token=``, ``sig=``, …)."""
    shown = _USERINFO.sub(r"\1***@", url, count=1)
    if "=" not in shown:
        return shown
    return _QUERY_PARAM.sub(lambda m: f"{m[1]}{m[2]}=***" if _secret_param(m[2]) and m[3] else m[0], shown)


def url_password(url: str) -> str | None:
    """The password of ``url``'s authority (``user:password@``), None without one."""
    from urllib.parse import unquote
    from urllib.parse import urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials written into ``url`` (as they appear in it and decoded): its
    authority's user name and password, and the values of the query parameters
    :func:`redact_url` hides."""
    from urllib.parse import unquote

    found: dict[str, None] = {}
    userinfo = _USERINFO.search(url)
    if userinfo is not None:
        for part in userinfo[0][2:-1].split(":", 1):
            if part:
                found.update(dict.fromkeys((part, unquote(part))))
    for m in _QUERY_PARAM.finditer(url):
        if m[3] and _secret_param(m[2]):
            found.update(dict.fromkeys((m[3], unquote(m[3]))))
    return tuple(found)


def json_unescaped(text: str) -> str:
    """``text`` with JSON's ``\\/`` and ``\\uXXXX`` escapes written out (not surrogates), so
    a secret a server echoed escaped is found by :func:`redact_text`."""
    if "\\" not in text:
        return text

    def char(m: re.Match[str]) -> str:
        code = int(m.group(1), 16)
        return m.group(0) if 0xD800 <= code <= 0xDFFF else chr(code)

    return _JSON_ESCAPE.sub(char, text).replace("\\/", "/")


def redact_text(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every occurrence of each non-empty secret replaced by ``***``, and
    a text that ends (before a clipping ``…``) with the first four or more characters of
    a secret with those masked too."""
    for secret in secrets:
        if not secret:
            continue
        if secret in text:
            text = text.replace(secret, "***")
        body = text[:-1] if text.endswith("…") else text
        for size in range(min(len(secret) - 1, len(body)), 3, -1):
            if body.endswith(secret[:size]):
                text = body[:-size] + "***" + text[len(body) :]
                break
    return text


CONVENTIONAL_KEY_ENV: tuple[str, ...] = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GROQ_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "TOGETHER_API_KEY",
    "MISTRAL_API_KEY",
    "XAI_API_KEY",
    "FIREWORKS_API_KEY",
    "CEREBRAS_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "HF_TOKEN",
)
"""Environment variables that conventionally hold provider keys: their values are
redacted from errors and exchanges whichever provider a request goes to."""

_MIN_ENV_SECRET = 8  # shorter values are not keys, and masking them would garble text


def secrets_from_env(names: tuple[str, ...] = (), environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values (8 characters or more) of the variables ``names`` and of
    :data:`CONVENTIONAL_KEY_ENV` that are set, longest first."""
    env = os.environ if environ is None else environ
    found: set[str] = set()
    for name in (*names, *CONVENTIONAL_KEY_ENV):
        value = env.get(name)
        if value and len(value) >= _MIN_ENV_SECRET:
            found.add(value)
    return tuple(sorted(found, key=len, reverse=True))
