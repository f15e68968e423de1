"""The server's open sessions (:class:`Hub`) and what every route module shares: the
error answer, the JSON body reader, the application keys."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from ketch import AgentEvent
from ketch.llm import encode_json
from ketch.sessions import Session
from ketch.sessions import SessionStore

from ._live import Hosted
from ._live import LiveSession

log = logging.getLogger("ketch.server")

MAX_TEXT = 256 * 1024

AgentFactory = Callable[[Session], Awaitable[Any]]
"""``async def factory(session) -> Agent | Hosted``: the agent for a session the server
opens (attach the session: ``Agent(..., session=session)``)."""

HUB: web.AppKey[Hub] = web.AppKey("ketch_hub")
HEARTBEAT: web.AppKey[float] = web.AppKey("ketch_heartbeat")


def error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


_events = msgspec.json.Encoder(enc_hook=str)


def default_encode(event: AgentEvent) -> bytes:
    return encode_json(event, _events)


class Hub:
    """The server's open sessions."""

    def __init__(
        self,
        store: SessionStore,
        factory: AgentFactory,
        cwd: str,
        encode: Callable[[AgentEvent], bytes],
        buffer: int,
        max_open: int = 64,
        max_streams: int = 256,
        queue_limit: int = 10000,
    ) -> None:
        self.queue_limit = queue_limit
        self.name = "ketch"
        """The served agent's name: its model id (``/v1/models``), its A2A card's name."""
        self.description = "A ketch agent"
        self.started = time.time()
        self.responses: OrderedDict[str, str] = OrderedDict()
        """Response id -> session id of the latest ``/v1/responses`` answers."""
        self.threads: OrderedDict[str, str] = OrderedDict()
        """AG-UI thread id -> session id (the latest threads)."""
        self.contexts: OrderedDict[str, str] = OrderedDict()
        """A2A context id -> session id (the latest contexts)."""
        self.tasks: OrderedDict[str, Any] = OrderedDict()
        """A2A task id -> task (the latest tasks)."""
        self.store = store
        self.factory = factory
        self.cwd = cwd
        self.encode = encode
        self.buffer = buffer
        self.max_open = max_open
        self.max_streams = max_streams
        self.streams = 0
        self.live: dict[str, LiveSession] = {}  # least recently used first
        # a lock per session id being opened, with how many requests wait on it; gone
        # when the last one is done (ids asked about are not remembered)
        self._opening: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    async def _host(self, session: Session) -> LiveSession:
        try:
            made = await self.factory(session)
        except Exception as exc:  # a bad config, say: one line for the client, no traceback
            await session.close()
            from ketch.llm import exception_text
            from ketch.llm import redact_text

            from ._proxy import env_secrets

            text = redact_text(exception_text(exc), tuple(sorted(env_secrets(), key=len, reverse=True)))
            raise web.HTTPInternalServerError(text=f"Cannot start an agent for the session: {text}") from None
        except BaseException:
            await session.close()
            raise
        hosted = made if isinstance(made, Hosted) else Hosted(agent=made)
        live = LiveSession(session, hosted, self.encode, buffer=self.buffer, queue_limit=self.queue_limit)
        self.live[session.id] = live
        await self._evict()
        return live

    async def _evict(self) -> None:
        """Close the least recently used sessions past ``max_open`` that nothing uses (no
        run, no subscriber, no decision half made); they open again when asked for."""
        if len(self.live) <= self.max_open:
            return
        for session_id, live in list(self.live.items()):
            if len(self.live) <= self.max_open:
                break
            if live.running or live.subscriber_count or live.decisions:
                continue
            await self.discard(session_id)

    async def discard(self, session_id: str) -> None:
        """Close the open session ``session_id`` (if open) and forget it."""
        live = self.live.pop(session_id, None)
        if live is None:
            return
        try:
            await live.close()
        except Exception:
            log.exception("closing session %s failed", session_id)

    async def create(self) -> LiveSession:
        session = await Session.create(self.store, cwd=self.cwd)
        return await self._host(session)

    async def get_known(self, session_id: str | None) -> LiveSession | None:
        """The open session ``session_id`` (opened now if need be), or None when there is
        no such id, the session is gone or another process holds it."""
        from ketch.sessions import SessionLockedError
        from ketch.sessions import SessionNotFoundError

        if session_id is None:
            return None
        try:
            return await self.get(session_id)
        except (SessionNotFoundError, SessionLockedError):
            return None

    async def get(self, session_id: str) -> LiveSession:
        """The open session ``session_id``, opened now if need be."""
        live = self.live.pop(session_id, None)
        if live is not None:
            self.live[session_id] = live  # most recently used
            return live
        lock, users = self._opening.get(session_id) or self._opening.setdefault(session_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                live = self.live.get(session_id)
                if live is None:
                    session = await Session.open(self.store, session_id)
                    live = await self._host(session)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._opening[session_id]
        return live

    async def close(self) -> None:
        for live in list(self.live.values()):
            try:
                await live.close()
            except Exception:
                log.exception("closing session %s failed", live.session.id)
        self.live.clear()


async def read_json(request: web.Request, *required: str) -> dict[str, Any]:
    raw = await request.read()  # aiohttp answers 413 past client_max_size
    if not raw:
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except ValueError:
            raise web.HTTPBadRequest(text="the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    for name in required:
        value = data.get(name)
        if not isinstance(value, str) or not value.strip():
            raise web.HTTPBadRequest(text=f"{name!r}: expected a non-empty string")
        if len(value) > MAX_TEXT:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_TEXT, actual_size=len(value), text=f"{name!r} is longer than {MAX_TEXT} characters")
    return data
