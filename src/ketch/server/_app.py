"""The aiohttp application: routes, authentication, limits, CORS, the SSE stream."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from importlib import resources
from typing import Any

import msgspec
from aiohttp import web

from ketch import AgentEvent
from ketch import approve
from ketch import deny
from ketch.sessions import SessionLockedError
from ketch.sessions import SessionNotFoundError
from ketch.sessions import SessionStore
from ketch.sessions import export_json

from . import _a2a
from . import _agui
from . import _openai
from ._hub import HEARTBEAT
from ._hub import HUB
from ._hub import AgentFactory
from ._hub import Hub
from ._hub import default_encode
from ._hub import error
from ._hub import read_json
from ._live import BadRequest
from ._live import Conflict
from ._live import LiveSession
from ._openapi import openapi_document

log = logging.getLogger("ketch.server")

TOKEN_COOKIE = "ketch_token"
MAX_BODY = 1024 * 1024
STATIC_FILES = {"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css"}
VENDOR_FILES = {  # static/vendor/: marked (MIT), DOMPurify (Apache-2.0/MPL-2.0), highlight.js (BSD-3-Clause)
    "marked.umd.js": "text/javascript",
    "purify.min.js": "text/javascript",
    "highlight.min.js": "text/javascript",
    "highlight-github.min.css": "text/css",
}
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback_host(host: str) -> bool:
    """Whether ``host``, a bind address or the name part of a ``Host`` header (``[::1]``
    in brackets too), names this machine's loopback interface."""
    return host.removeprefix("[").removesuffix("]") in _LOOPBACK_NAMES


def _host_name(header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8765`` -> ``[::1]``, ``a:1`` -> ``a``."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0]

def _auth_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(TOKEN_COOKIE)


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _middlewares(
    token: str | None, cors_origins: Sequence[str], loopback_only: bool, own_auth: Sequence[web.Application] = ()
) -> list[Any]:
    origins = set(cors_origins)
    # mounted sub-applications that check their own tokens (the model proxy's client
    # tokens): a request the router matched to one of their routes skips the server's
    own = {id(sub) for sub in own_auth}

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            text = exc.text if exc.text and not exc.text.startswith(str(exc.status)) else exc.reason
            response = error(exc.status, text or exc.reason)
        if origins and request.headers.get("Origin") in origins and not response.prepared:
            response.headers["Access-Control-Allow-Origin"] = request.headers["Origin"]
            response.headers["Vary"] = "Origin"
        return response

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        if loopback_only:
            if not is_loopback_host(_host_name(request.host or "")):
                return error(421, f"Host {request.host!r} is not this server's loopback address")
        if request.method in _CHANGING:
            refused = _cross_site(request, origins)
            if refused is not None:
                return error(403, refused)
        if request.method == "OPTIONS" and origins:
            origin = request.headers.get("Origin")
            if origin not in origins:
                return error(403, f"origin {origin!r} is not allowed (CORS)")
            return web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Origin": origin,
                    "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                    "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
                    "Access-Control-Max-Age": "600",
                    "Vary": "Origin",
                },
            )
        public = request.method == "GET" and request.path == _a2a.CARD_PATH  # discovery: the card says a token is needed
        if token is not None and not public and not (own and any(id(a) in own for a in request.match_info.apps)):
            given = _auth_token(request)
            if not _same(given, token):
                query = request.query.get("token")
                # the URL printed at start: GET / with ?token= sets the cookie and leaves the
                # token out of the address bar
                if request.method == "GET" and request.path == "/" and _same(query, token):
                    response = web.Response(status=303, headers={"Location": "/"})
                    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", path="/")
                    return response
                if request.method == "GET" and request.path == "/" and "text/html" in request.headers.get("Accept", ""):
                    return web.Response(status=401, text=_SIGN_IN_PAGE, content_type="text/html", headers={**_PAGE_HEADERS, "WWW-Authenticate": "Bearer"})
                return error(
                    401,
                    "missing or wrong token: send 'Authorization: Bearer <token>' (the token ketch serve printed)",
                    **{"WWW-Authenticate": "Bearer"},
                )
        if request.method in _CHANGING and request.method != "DELETE":
            kind = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if not _is_json(kind):
                return error(415, f"Content-Type {kind or '(none)'!r}: expected application/json")
        answer: web.StreamResponse = await handler(request)
        return answer

    return [errors, guard]


_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _is_json(kind: str) -> bool:
    """Whether a media type is JSON (``application/json`` or ``application/<x>+json``)."""
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _cross_site(request: web.Request, allowed: set[str]) -> str | None:
    """Why a state-changing request looks like it comes from another site's page (None
    when it does not). Every port of a host is one "site" for a browser's cookies, so
    ``SameSite`` does not keep a page on another port out: the ``Origin`` (sent with
    every cross-origin POST, ``no-cors`` included) must be this server's, or one of the
    CORS origins, and ``Sec-Fetch-Site`` must not say another origin sent it."""
    origin = request.headers.get("Origin")
    if origin is not None and origin in allowed:
        return None
    if origin is not None:
        own = f"{request.scheme}://{request.host}"
        if origin != own and origin.partition("://")[2] != request.host:
            return f"origin {origin!r} may not change this server's state (only pages of {own} may)"
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"a request from another origin ({fetch_site}) may not change this server's state"
    return None


def _hub(request: web.Request) -> Hub:
    return request.app[HUB]


async def _live(request: web.Request) -> LiveSession:
    session_id = request.match_info["id"]
    try:
        return await _hub(request).get(session_id)
    except SessionNotFoundError:
        raise web.HTTPNotFound(text=f"no session {session_id!r}") from None
    except SessionLockedError as exc:
        raise web.HTTPConflict(text=str(exc)) from None


def _command(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Conflict as exc:
            return error(409, str(exc))
        except BadRequest as exc:
            return error(400, str(exc))

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


# -- handlers ---------------------------------------------------------------------------------
async def list_sessions(request: web.Request) -> web.Response:
    hub = _hub(request)
    everywhere = request.query.get("all") in ("1", "true")
    try:
        limit = max(1, min(200, int(request.query.get("limit", "50"))))
    except ValueError:
        raise web.HTTPBadRequest(text=f"limit {request.query.get('limit')!r}: expected an integer 1-200") from None
    cwd = None if everywhere else hub.cwd
    cursor = request.query.get("cursor") or None
    query = " ".join(request.query.get("q", "").split()).casefold()
    try:
        if query:
            found, cursor = await _search(hub.store, cwd, query, limit, cursor)
        else:
            page = await hub.store.list(cwd=cwd, limit=limit, cursor=cursor)
            found, cursor = page.sessions, page.next_cursor
    except ValueError as exc:  # a malformed cursor
        raise web.HTTPBadRequest(text=str(exc)) from None
    sessions = []
    for info in found:
        item = msgspec.to_builtins(info)
        live = hub.live.get(info.id)
        item["running"] = live is not None and live.running
        item["waiting"] = live is not None and bool(live.pending())
        sessions.append(item)
    return web.json_response({"sessions": sessions, "next_cursor": cursor})


SEARCH_PAGES = 10
"""How many pages of 200 sessions one search request reads before it answers with the
matches so far and a cursor to go on from."""


async def _search(store: SessionStore, cwd: str | None, query: str, limit: int, cursor: str | None) -> tuple[list[Any], str | None]:
    """Up to ``limit`` sessions whose title or id contains ``query`` (case-folded), and
    the cursor to search on from (None at the end)."""
    found: list[Any] = []
    for _ in range(SEARCH_PAGES):
        page = await store.list(cwd=cwd, limit=200, cursor=cursor)
        for number, info in enumerate(page.sessions):
            if query in info.title.casefold() or info.id.startswith(query):
                found.append(info)
                if len(found) == limit:
                    rest = number + 1 < len(page.sessions) or page.next_cursor is not None
                    # the stores' cursor after ``info``: "<updated!r>:<id>"
                    return found, (f"{info.updated!r}:{info.id}" if rest else None)
        cursor = page.next_cursor
        if cursor is None:
            break
    return found, cursor


@_command
async def create_session(request: web.Request) -> web.Response:
    data = await read_json(request)
    live = await _hub(request).create()
    model = data.get("model")
    if isinstance(model, str) and model.strip():
        await live.set_model(model.strip())
    return web.json_response(await live.state(), status=201)


async def get_session(request: web.Request) -> web.Response:
    hub = _hub(request)
    session_id = request.match_info["id"]
    try:
        live = await hub.get(session_id)
    except SessionNotFoundError:
        raise web.HTTPNotFound(text=f"no session {session_id!r}") from None
    except SessionLockedError as exc:  # open in another process: a read-only view
        entries = await hub.store.load(session_id)
        doc = json.loads(export_json(entries, session_id=session_id))
        return web.json_response(
            {"id": session_id, "title": doc["title"], "cwd": doc["cwd"], "messages": doc["messages"], "writable": False, "error": str(exc)}
        )
    return web.json_response(await live.state())


async def _send_text(request: web.Request, send: Callable[[LiveSession, str], None]) -> LiveSession:
    """The request's session, after ``send(session, text)`` with the body's ``text``."""
    data = await read_json(request, "text")
    live = await _live(request)
    send(live, data["text"])
    return live


def _accepted(**more: Any) -> web.Response:
    """202 with ``{"accepted": true}`` and ``more``."""
    return web.json_response({"accepted": True, **more}, status=202)


@_command
async def prompt(request: web.Request) -> web.Response:
    live = await _send_text(request, LiveSession.prompt)
    return _accepted(last_event_id=live.last_event_id)


@_command
async def steer(request: web.Request) -> web.Response:
    await _send_text(request, LiveSession.steer)
    return _accepted()


@_command
async def follow_up(request: web.Request) -> web.Response:
    await _send_text(request, LiveSession.follow_up)
    return _accepted()


@_command
async def abort(request: web.Request) -> web.Response:
    await read_json(request)
    live = await _live(request)
    live.abort()
    return _accepted()


@_command
async def approvals(request: web.Request) -> web.Response:
    data = await read_json(request)
    raw = data.get("decisions")
    if not isinstance(raw, dict) or not raw:
        raise BadRequest('"decisions": expected an object {"<tool_call_id>": {"decision": "approve"|"deny", "reason": "..."}}')
    decisions: dict[str, Any] = {}
    for call_id, value in raw.items():
        kind = value.get("decision") if isinstance(value, dict) else value
        reason = value.get("reason") if isinstance(value, dict) else None
        if kind == "approve":
            decisions[call_id] = approve()
        elif kind == "deny":
            decisions[call_id] = deny(reason if isinstance(reason, str) and reason.strip() else None)
        else:
            raise BadRequest(f"decision for {call_id!r}: expected 'approve' or 'deny', got {kind!r}")
    live = await _live(request)
    left = live.decide(decisions)
    return _accepted(undecided=left, resumed=not left)


@_command
async def elicitations(request: web.Request) -> web.Response:
    data = await read_json(request)
    ident, action, content = data.get("id"), data.get("action"), data.get("content")
    if not isinstance(ident, str) or not ident:
        raise BadRequest('"id": expected the id of a pending elicitation (the state\'s pending_elicitations)')
    if content is not None and not isinstance(content, dict):
        raise BadRequest(f'"content": expected an object (the form\'s answers), got {type(content).__name__}')
    live = await _live(request)
    live.answer(ident, action if isinstance(action, str) else repr(action), content)
    return _accepted()


@_command
async def set_model(request: web.Request) -> web.Response:
    data = await read_json(request, "model")
    live = await _live(request)
    model = await live.set_model(data["model"].strip())
    return web.json_response({"model": model})


@_command
async def rename(request: web.Request) -> web.Response:
    data = await read_json(request, "title")
    live = await _live(request)
    title = await live.rename(data["title"])
    return web.json_response({"id": live.session.id, "title": title})


async def delete_session(request: web.Request) -> web.Response:
    hub = _hub(request)
    session_id = request.match_info["id"]
    live = hub.live.get(session_id)
    if live is not None:
        if live.running:
            return error(409, f"session {session_id} is running: abort it (POST .../abort) before deleting it")
        await hub.discard(session_id)
    try:
        await hub.store.delete(session_id)
    except SessionNotFoundError:
        raise web.HTTPNotFound(text=f"no session {session_id!r}") from None
    except SessionLockedError as exc:
        raise web.HTTPConflict(text=str(exc)) from None
    return web.json_response({"deleted": session_id})


async def events(request: web.Request) -> web.StreamResponse:
    hub = _hub(request)
    if hub.streams >= hub.max_streams:
        return error(
            503, f"too many open event streams ({hub.max_streams}): close other pages or clients", **{"Retry-After": "5"}
        )
    live = await _live(request)
    heartbeat: float = request.app[HEARTBEAT]
    last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    queue = live.subscribe(last)  # before the headers go out: a client that has them is subscribed
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    hub.streams += 1
    try:
        await response.prepare(request)
        while True:
            try:
                frame = await asyncio.wait_for(queue.get(), heartbeat)
            except TimeoutError:
                await response.write(b": ping\n\n")
                continue
            closed = not frame
            chunk = [frame]
            while not closed and not queue.empty():  # what queued meanwhile goes out in one write
                more = queue.get_nowait()
                closed = not more
                chunk.append(more)
            await response.write(b"".join(chunk))
            if closed:
                break
    except (ConnectionResetError, ConnectionError):
        pass  # the client went away; the run goes on
    finally:
        hub.streams -= 1
        live.unsubscribe(queue)
    return response


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def _static(name: str) -> bytes:
    return resources.files("ketch.server").joinpath("static", name).read_bytes()


async def index(request: web.Request) -> web.Response:
    return web.Response(body=_static("index.html"), content_type="text/html", charset="utf-8", headers=_PAGE_HEADERS)


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = STATIC_FILES.get(name)
    if kind is None or name == "index.html":
        raise web.HTTPNotFound(text=f"no static file {name!r}")
    return web.Response(body=_static(name), content_type=kind, charset="utf-8", headers=_PAGE_HEADERS)


async def vendor(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = VENDOR_FILES.get(name)
    if kind is None:
        raise web.HTTPNotFound(text=f"no static file {'vendor/' + name!r}")
    body = resources.files("ketch.server").joinpath("static", "vendor", name).read_bytes()
    return web.Response(body=body, content_type=kind, charset="utf-8", headers=_PAGE_HEADERS)


_SIGN_IN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>ketch: not signed in</title></head>
<body><h1>Not signed in</h1>
<p>This page needs the token <code>ketch serve</code> printed: open the URL it printed
(<code>http://…/?token=…</code>). A restarted server prints a new token unless it was given one
(<code>--token</code> or <code>KETCH_SERVER_TOKEN</code>).</p></body></html>
"""

_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:",
}

_TABLE: tuple[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]], ...] = (
    ("GET", "/", index),
    ("GET", "/static/{name}", static),
    ("GET", "/static/vendor/{name}", vendor),
    ("GET", "/openapi.json", openapi),
    ("GET", "/api/sessions", list_sessions),
    ("POST", "/api/sessions", create_session),
    ("GET", "/api/sessions/{id}", get_session),
    ("DELETE", "/api/sessions/{id}", delete_session),
    ("POST", "/api/sessions/{id}/title", rename),
    ("POST", "/api/sessions/{id}/prompt", prompt),
    ("POST", "/api/sessions/{id}/steer", steer),
    ("POST", "/api/sessions/{id}/follow_up", follow_up),
    ("POST", "/api/sessions/{id}/abort", abort),
    ("POST", "/api/sessions/{id}/approvals", approvals),
    ("POST", "/api/sessions/{id}/elicitations", elicitations),
    ("POST", "/api/sessions/{id}/model", set_model),
    ("GET", "/api/sessions/{id}/events", events),
    *_openai.ROUTES,
    *_agui.ROUTES,
    *_a2a.ROUTES,
)

ROUTES: tuple[tuple[str, str], ...] = tuple((method, path) for method, path, _ in _TABLE)
"""Every route of the server: ``(method, path)``."""


def create_app(
    factory: AgentFactory,
    *,
    store: SessionStore,
    cwd: str,
    token: str | None,
    encode: Callable[[AgentEvent], bytes] | None = None,
    cors_origins: Sequence[str] = (),
    loopback_only: bool = True,
    max_body: int = MAX_BODY,
    buffer: int = 2000,
    heartbeat: float = 15.0,
    subapps: Sequence[tuple[str, web.Application]] = (),
    max_streams: int = 256,
    max_open: int = 64,
    stream_queue: int = 10000,
    name: str = "ketch",
    description: str = "A ketch agent",
) -> web.Application:
    """The server as an aiohttp application.

    ``factory(session)`` builds the agent of each session the server opens (``Agent`` or
    :class:`Hosted`); sessions live in ``store`` and new ones are created for ``cwd``
    (which the list shows). ``token``: the bearer token every route needs (``None``
    turns authentication off: only for tests and trusted setups). ``encode`` turns an
    event into its JSON bytes (``ketch serve`` passes the stream-json encoder of ``ketch
    run``; default: the event as msgspec encodes it). ``cors_origins``: origins allowed
    to call the API from a browser (default none). ``loopback_only``: refuse requests
    whose ``Host`` is not a loopback name (DNS rebinding). ``max_body``: request size
    limit in bytes (413 past it). ``buffer``: events kept per session for
    ``Last-Event-ID`` resumption. ``heartbeat``: seconds between SSE comments on an idle
    stream. ``subapps``: ``(prefix, app)`` pairs mounted under the server's Host and CORS
    checks that authenticate their own requests (the model proxy checks its client tokens,
    which are not the server's token); an app that cannot do that does not belong here.
    ``max_streams``: event streams open at once (503 past it). ``max_open``: sessions kept
    open; past it the least recently used idle ones are closed (they reopen when asked
    for). ``stream_queue``: frames queued for one event stream before its client counts
    as too slow (it gets a ``reset`` with reason ``slow_client`` and its stream ends).
    ``name``: the served agent's name (its model id on the OpenAI-compatible routes, its
    A2A card's name); ``description``: what it does (the A2A card).
    Closing the application aborts the runs and closes the sessions.
    """
    app = web.Application(client_max_size=max_body, middlewares=_middlewares(token, cors_origins, loopback_only, [sub for _, sub in subapps]))
    hub = Hub(store, factory, cwd, encode or default_encode, buffer, max_open=max_open, max_streams=max_streams, queue_limit=stream_queue)
    hub.name = name
    hub.description = description
    app[HUB] = hub
    app[HEARTBEAT] = heartbeat
    for method, path, handler in _TABLE:
        app.router.add_route(method, path, handler)
    for prefix, sub in subapps:
        app.add_subapp(prefix, sub)

    async def shutdown(app: web.Application) -> None:
        await hub.close()

    app.on_shutdown.append(shutdown)
    return app
