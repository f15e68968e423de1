"""A scripted HTTP server on 127.0.0.1 for provider tests.

Queue :class:`Reply` objects, point a model at ``server.url`` and inspect
``server.requests`` afterwards::

    async with LoopbackServer() as server:          # or the ``loopback`` fixture
        server.queue(sse_reply({"choices": [...]}, done=True))
        server.queue(json_reply({"error": {"message": "slow down"}}, status=429,
                                headers={"retry-after": "0"}))
        model = OpenAIChatModel("m", base_url=server.url, api_key="k")
        ...
        assert server.requests[0].json["model"] == "m"

Each request takes the next queued reply, whatever its path; with none left the server
answers 500 ``loopback: no scripted reply``. A reply can:

- send its body as several chunks (``chunks``; chunked transfer encoding unless
  ``chunked=False``);
- cut the connection after ``cut_after`` chunks (no proper end of body);
- stall after ``stall_after`` chunks until the test sets ``reply.release``
  (``reply.stalled`` is set when the stall begins);
- close the connection without sending a byte (``drop``: what a client sees when the
  server closed a kept-alive connection while the request was on its way);
- report ``reply.started`` (request received) and ``reply.disconnected`` (the client
  closed the connection before the reply was complete).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import msgspec
from aiohttp import web

__all__ = ["LoopbackServer", "Recorded", "Reply", "json_reply", "sse", "sse_reply", "text_reply"]


@dataclass
class Reply:
    """One scripted response."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    chunked: bool = True
    cut_after: int | None = None
    stall_after: int | None = None
    stall_headers: bool = False
    drop: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Recorded:
    """A request the server received. ``json`` is the decoded body (None if not JSON);
    ``peer`` the client's (host, port), which identifies its connection."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any
    peer: tuple[str, int]


def sse(*events: Any, done: bool = False, event_names: Iterable[str | None] | None = None) -> list[bytes]:
    """SSE chunks, one per event: dicts/lists are JSON-encoded, str/bytes sent as the
    data verbatim. ``done`` appends ``data: [DONE]``; ``event_names`` adds ``event:``
    lines (None for none)."""
    names = list(event_names) if event_names is not None else [None] * len(events)
    out: list[bytes] = []
    for name, ev in zip(names, events, strict=True):
        data = ev if isinstance(ev, bytes) else ev.encode() if isinstance(ev, str) else msgspec.json.encode(ev)
        head = f"event: {name}\n".encode() if name else b""
        out.append(head + b"data: " + data + b"\n\n")
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def sse_reply(*events: Any, done: bool = True, **kwargs: Any) -> Reply:
    """A 200 ``text/event-stream`` reply of ``events`` (see :func:`sse`)."""
    headers = {"content-type": "text/event-stream", **kwargs.pop("headers", {})}
    return Reply(headers=headers, chunks=sse(*events, done=done), **kwargs)


def split_events(stream: bytes, separator: bytes = b"\n\n") -> list[bytes]:
    """A recorded event stream split into one chunk per event (each keeps its blank line)."""
    return [part + separator for part in stream.split(separator) if part]


def recorded_reply(stream: bytes, separator: bytes = b"\n\n", **kwargs: Any) -> Reply:
    """A 200 ``text/event-stream`` reply sending a recorded ``stream`` one event per chunk."""
    headers = {"content-type": "text/event-stream", **kwargs.pop("headers", {})}
    return Reply(headers=headers, chunks=split_events(stream, separator), **kwargs)


def body_reply(status: int, body: bytes, headers: dict[str, str] | None = None) -> Reply:
    """A reply with a raw JSON ``body`` (error bodies written byte for byte)."""
    return Reply(
        status=status,
        headers={"content-type": "application/json", **(headers or {})},
        chunks=[body],
        chunked=False,
    )


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON reply with a content length."""
    return Reply(
        status=status,
        headers={"content-type": "application/json", **(headers or {})},
        chunks=[msgspec.json.encode(obj)],
        chunked=False,
    )


def text_reply(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A plain-text reply with a content length."""
    return Reply(
        status=status,
        headers={"content-type": "text/plain", **(headers or {})},
        chunks=[text.encode()],
        chunked=False,
    )


class LoopbackServer:
    """An aiohttp server on a free 127.0.0.1 port that replays queued replies."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: list[Reply] = []
        self.url = ""
        self.port = 0
        self._runner: web.AppRunner | None = None

    def queue(self, *replies: Reply) -> None:
        """Append replies, served in order, one per request."""
        self.replies.extend(replies)

    @property
    def connections(self) -> int:
        """How many distinct client connections sent requests."""
        return len({r.peer for r in self.requests})

    async def start(self) -> None:
        """Bind a free port and start serving."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        """Stop serving; stalled replies are released."""
        for reply in self.replies:
            reply.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> LoopbackServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            decoded = msgspec.json.decode(body) if body else None
        except msgspec.DecodeError:
            decoded = None
        peer = request.transport.get_extra_info("peername") if request.transport else ("", 0)
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.path,
                query=dict(request.query),
                headers=dict(request.headers),
                body=body,
                json=decoded,
                peer=(peer[0], peer[1]),
            )
        )
        served = sum(1 for _ in self.requests) - 1
        if served >= len(self.replies):
            return web.json_response({"error": {"message": "loopback: no scripted reply"}}, status=500)
        reply = self.replies[served]
        reply.started.set()
        try:
            return await self._serve(request, reply)
        except (asyncio.CancelledError, ConnectionError):
            reply.disconnected.set()
            raise

    async def _serve(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        if reply.drop:
            self._cut(request)
            raise asyncio.CancelledError  # nothing is written to the closed connection
        if reply.stall_headers:
            await self._stall(reply)
        response = web.StreamResponse(status=reply.status, headers=reply.headers)
        if reply.chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = sum(len(c) for c in reply.chunks)
        await response.prepare(request)
        for i, chunk in enumerate(reply.chunks):
            if reply.stall_after == i:
                await self._stall(reply)
            if reply.cut_after == i:
                self._cut(request)
                return response
            await response.write(chunk)
        if reply.stall_after is not None and reply.stall_after >= len(reply.chunks):
            await self._stall(reply)
        if reply.cut_after is not None and reply.cut_after >= len(reply.chunks):
            self._cut(request)
            return response
        await response.write_eof()
        return response

    @staticmethod
    async def _stall(reply: Reply) -> None:
        reply.stalled.set()
        await reply.release.wait()

    @staticmethod
    def _cut(request: web.Request) -> None:
        if request.transport is not None:
            request.transport.close()
