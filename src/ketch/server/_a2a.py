"""A2A (Agent2Agent, protocol 1.0, JSON-RPC binding): the served agent as an A2A agent.

- ``GET /.well-known/agent-card.json``: the agent card (public, as discovery wants it:
  the agent's name and description, its JSON-RPC endpoint, that it streams, that calls
  need the bearer token).
- ``POST /a2a``: JSON-RPC 2.0 — ``SendMessage`` (waits for the task to end, or
  ``configuration.returnImmediately``), ``SendStreamingMessage`` and ``SubscribeToTask``
  (Server-Sent Events of ``StreamResponse`` objects: the task, then status and artifact
  updates), ``GetTask``, ``CancelTask``.

A message starts a task: one run of the agent. Its answer is the task's ``answer``
artifact (streamed as it is written) and its final status message. A ``contextId`` is a
session: the next message with the same ``contextId`` continues it. A run that pauses
for approval leaves its task ``TASK_STATE_INPUT_REQUIRED`` (the status message names
the calls); a message on that task (its ``taskId``) whose text starts with "approve"
approves them, any other text denies them with that text as the reason, and the run
goes on. Tasks are kept in memory (the latest 1000).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from ketch import AgentEvent
from ketch import approve
from ketch import deny
from ketch.sessions import SessionLockedError
from ketch.sessions import SessionNotFoundError

from ._hub import HUB
from ._hub import Hub
from ._live import BadRequest
from ._live import Conflict
from ._live import LiveSession
from ._runs import Answer
from ._runs import open_session
from ._runs import paused_note
from ._runs import run_events

_encode = msgspec.json.Encoder().encode
CARD_PATH = "/.well-known/agent-card.json"
PROTOCOL_VERSION = "1.0"
_TASKS_KEPT = 1000
_TERMINAL = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"})

# JSON-RPC and A2A error codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
VERSION_NOT_SUPPORTED = -32009


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _message(role: str, text: str, *, task_id: str, context_id: str) -> dict[str, Any]:
    return {"messageId": os.urandom(16).hex(), "contextId": context_id, "taskId": task_id, "role": role, "parts": [{"text": text}]}


class _Task:
    """One task: its record as A2A shows it, the run that drives it, and the streams
    that follow it."""

    def __init__(self, hub: Hub, live: LiveSession, context_id: str, request: dict[str, Any]) -> None:
        self.hub = hub
        self.live = live
        self.id = os.urandom(16).hex()
        self.context_id = context_id
        request = {**request, "taskId": self.id, "contextId": context_id}
        self.history: list[dict[str, Any]] = [request]
        self.state = "TASK_STATE_SUBMITTED"
        self.status_message: dict[str, Any] | None = None
        self.timestamp = _now()
        self.parts: list[str] = []  # the answer artifact's text
        self.followers: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.driver: asyncio.Task[None] | None = None

    @property
    def terminal(self) -> bool:
        return self.state in _TERMINAL

    @property
    def settled(self) -> bool:
        """Terminal, or waiting on input: the run is over for now."""
        return self.terminal or self.state == "TASK_STATE_INPUT_REQUIRED"

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "timestamp": self.timestamp}
        if self.status_message is not None:
            out["message"] = self.status_message
        return out

    def record(self) -> dict[str, Any]:
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id, "status": self.status(), "history": list(self.history)}
        if self.parts:
            task["artifacts"] = [{"artifactId": "answer", "name": "answer", "parts": [{"text": "".join(self.parts)}]}]
        return task

    def _emit(self, update: dict[str, Any] | None) -> None:
        for queue in list(self.followers):
            queue.put_nowait(update)

    def _set_state(self, state: str, text: str | None = None) -> None:
        self.state = state
        self.timestamp = _now()
        self.status_message = None if text is None else _message("ROLE_AGENT", text, task_id=self.id, context_id=self.context_id)
        self._emit({"statusUpdate": {"taskId": self.id, "contextId": self.context_id, "status": self.status()}})

    def _artifact(self, text: str, *, last: bool = False) -> None:
        first = not self.parts
        self.parts.append(text)
        update = {
            "taskId": self.id,
            "contextId": self.context_id,
            "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": text}]},
            "append": not first,
            "lastChunk": last,
        }
        self._emit({"artifactUpdate": update})

    def start(self, begin: Callable[[], None]) -> None:
        """Run ``begin`` (the prompt or the decisions) and follow the run in the
        background; raises :class:`Conflict` or :class:`BadRequest` at once."""
        events = run_events(self.live, begin)
        first = asyncio.get_running_loop().create_future()
        self.driver = asyncio.create_task(self._drive(events, first), name=f"ketch-a2a-task-{self.id}")
        self._first = first

    async def started(self) -> None:
        """Wait until the run has started (or failed to): its error raised here."""
        await self._first

    async def _drive(self, events: Any, first: asyncio.Future[None]) -> None:
        answer = Answer(self.live)
        try:
            try:
                event: AgentEvent | None = await anext(events, None)
            except BaseException as exc:
                first.set_exception(exc)
                raise
            first.set_result(None)
            self._set_state("TASK_STATE_WORKING")
            while event is not None:
                text = answer.feed(event)
                if text:
                    self._artifact(text)
                event = await anext(events, None)
            self._finish(answer)
        except (Conflict, BadRequest):
            pass  # told to the request that started it
        except Exception as exc:
            self._set_state("TASK_STATE_FAILED", f"the run failed: {exc}")
        finally:
            await events.aclose()
            self._emit(None)

    def cancel(self) -> None:
        """Cancel a task that waits on input (its run is over)."""
        self._set_state("TASK_STATE_CANCELED", "the task was canceled")

    def _finish(self, answer: Answer) -> None:
        if answer.end_reason == "approval_required":
            if self.parts:
                self._artifact("", last=True)
            self._set_state("TASK_STATE_INPUT_REQUIRED", paused_note(self.live) + " (or answer this task: approve, or a reason to deny)")
            return
        failed = answer.failure()
        if self.parts:
            self._artifact("", last=True)
        if answer.end_reason == "aborted":
            self._set_state("TASK_STATE_CANCELED", "the task was canceled")
        elif failed is not None:
            self._set_state("TASK_STATE_FAILED", failed)
        else:
            self._set_state("TASK_STATE_COMPLETED", answer.text)
            if self.status_message is not None:
                self.history.append(self.status_message)


def _tasks(hub: Hub) -> dict[str, _Task]:
    return hub.tasks


def _keep(hub: Hub, task: _Task) -> None:
    kept = hub.tasks
    kept[task.id] = task
    while len(kept) > _TASKS_KEPT:
        kept.popitem(last=False)


def _text(message: dict[str, Any]) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise RpcError(INVALID_PARAMS, "params.message.parts: expected a list of parts")
    texts = []
    for number, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, f"params.message.parts[{number}]: only text parts are accepted")
        texts.append(part["text"])
    text = "\n".join(texts)
    if not text.strip():
        raise RpcError(INVALID_PARAMS, "params.message: expected some text")
    return text


async def _send(hub: Hub, params: dict[str, Any]) -> _Task:
    """Start the task a ``SendMessage`` asks for (a new one, or the one it answers)."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "params.message: expected a message")
    if message.get("role") not in ("ROLE_USER", "user"):
        raise RpcError(INVALID_PARAMS, f"params.message.role: expected ROLE_USER, got {message.get('role')!r}")
    text = _text(message)
    task_id = message.get("taskId")
    if task_id:
        task = _tasks(hub).get(str(task_id))
        if task is None:
            raise RpcError(TASK_NOT_FOUND, f"task {task_id!r} not found")
        if task.state != "TASK_STATE_INPUT_REQUIRED":
            raise RpcError(INVALID_PARAMS, f"task {task_id} is {task.state}: it takes no more messages; send one without taskId")
        try:
            task.live = await hub.get(task.live.session.id)  # closed meanwhile (least recently used): opened again
        except (SessionNotFoundError, SessionLockedError) as exc:
            raise RpcError(INVALID_PARAMS, f"task {task_id}: its session cannot be opened: {exc}") from None
        waiting = [p["tool_call_id"] for p in task.live.pending()]
        yes = text.strip().lower().startswith("approve")
        decisions = {c: approve() if yes else deny(text.strip()) for c in waiting}
        task.history.append({**message, "taskId": task.id, "contextId": task.context_id})
        paused = task.live
        task.start(lambda: (paused.decide(decisions), None)[1])
        return task
    context_id = message.get("contextId") or os.urandom(16).hex()
    live = await hub.get_known(hub.contexts.get(str(context_id)))
    if live is None:
        live = await open_session(hub, [])
        hub.contexts[str(context_id)] = live.session.id
        while len(hub.contexts) > _TASKS_KEPT:
            hub.contexts.popitem(last=False)
    task = _Task(hub, live, str(context_id), message)
    chosen = live
    task.start(lambda: chosen.prompt(text))
    _keep(hub, task)
    return task


def _rpc(ident: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _rpc_error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


async def _follow(request: web.Request, ident: Any, task: _Task, queue: asyncio.Queue[dict[str, Any] | None]) -> web.StreamResponse:
    """Stream ``task`` to the client: the task first, then its updates until it settles."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    try:
        await response.write(b"data: " + _encode(_rpc(ident, {"task": task.record()})) + b"\n\n")
        while (update := await queue.get()) is not None:
            await response.write(b"data: " + _encode(_rpc(ident, update)) + b"\n\n")
    except ConnectionError:
        pass  # the client went away; the task goes on (CancelTask stops it)
    finally:
        task.followers.discard(queue)
    return response


async def endpoint(request: web.Request) -> web.StreamResponse:
    """``POST /a2a``: one JSON-RPC request."""
    hub = request.app[HUB]
    ident: Any = None
    try:
        version = request.headers.get("A2A-Version", PROTOCOL_VERSION)
        if version.split(".")[0] != "1":
            raise RpcError(VERSION_NOT_SUPPORTED, f"A2A-Version {version!r}: this agent speaks {PROTOCOL_VERSION}")
        try:
            call = json.loads(await request.read() or b"null")
        except ValueError:
            raise RpcError(PARSE_ERROR, "the body is not valid JSON") from None
        if not isinstance(call, dict) or call.get("jsonrpc") != "2.0" or not isinstance(call.get("method"), str):
            raise RpcError(INVALID_REQUEST, "expected a JSON-RPC 2.0 request object")
        ident = call.get("id")
        params: dict[str, Any] = call["params"] if isinstance(call.get("params"), dict) else {}
        method = call["method"]
        if method in ("SendMessage", "SendStreamingMessage"):
            task = await _send(hub, params)
            queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
            task.followers.add(queue)
            try:
                await task.started()
            except (Conflict, BadRequest) as exc:
                task.followers.discard(queue)
                hub.tasks.pop(task.id, None)
                raise RpcError(INVALID_PARAMS, str(exc)) from None
            if method == "SendStreamingMessage":
                return await _follow(request, ident, task, queue)
            task.followers.discard(queue)
            configuration: dict[str, Any] = params["configuration"] if isinstance(params.get("configuration"), dict) else {}
            if not configuration.get("returnImmediately") and task.driver is not None:
                await asyncio.shield(task.driver)
            return web.json_response(_rpc(ident, {"task": task.record()}))
        if method in ("GetTask", "CancelTask", "SubscribeToTask"):
            task_id = params.get("id")
            found = _tasks(hub).get(str(task_id))
            if found is None:
                raise RpcError(TASK_NOT_FOUND, f"task {task_id!r} not found")
            task = found
            if method == "GetTask":
                return web.json_response(_rpc(ident, task.record()))
            if method == "SubscribeToTask":
                if task.settled:
                    raise RpcError(UNSUPPORTED, f"task {task.id} is {task.state}: there is nothing to follow")
                queue = asyncio.Queue()
                task.followers.add(queue)
                return await _follow(request, ident, task, queue)
            if task.terminal:
                raise RpcError(TASK_NOT_CANCELABLE, f"task {task.id} is {task.state}")
            if task.live.running:
                task.live.abort()
                if task.driver is not None:
                    await asyncio.shield(task.driver)
            else:  # waiting on input
                task.cancel()
            return web.json_response(_rpc(ident, task.record()))
        raise RpcError(METHOD_NOT_FOUND, f"method {method!r} is not supported: SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask")
    except RpcError as exc:
        return web.json_response(_rpc_error(ident, exc.code, exc.message))


async def agent_card(request: web.Request) -> web.Response:
    """``GET /.well-known/agent-card.json``."""
    from ketch import __version__

    hub = request.app[HUB]
    base = f"{request.scheme}://{request.host}"
    card = {
        "name": hub.name,
        "description": hub.description,
        "version": __version__,
        "supportedInterfaces": [{"url": f"{base}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION}],
        "capabilities": {"streaming": True, "pushNotifications": False},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "the token ketch serve printed"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": hub.name, "name": hub.name, "description": hub.description, "tags": ["ketch"]}],
    }
    return web.json_response(card, headers={"Cache-Control": "no-cache"})


ROUTES: tuple[tuple[str, str, Any], ...] = (
    ("GET", CARD_PATH, agent_card),
    ("POST", "/a2a", endpoint),
)
"""The routes of this module: ``(method, path, handler)``."""
