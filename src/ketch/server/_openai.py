"""OpenAI-compatible routes: the served agent as a model.

- ``GET /v1/models``: the served agents (``{"object": "list", "data": [...]}``).
- ``POST /v1/chat/completions``: Chat Completions, streaming (``stream: true``,
  ``stream_options.include_usage``) or not.
- ``POST /v1/responses``: the Responses API as the Open Responses specification states
  it, streaming (its semantic events) or not; ``previous_response_id`` continues the
  session of an earlier response.

The agent's tools run on the server; the client sees the answer: the text of the run's
assistant messages (several are joined by a blank line). Tools of the client's own
(``tools``) and tool messages are refused with a one-line 400: the served agent has its
tools. ``system`` and ``developer`` messages (and ``instructions``) reach the agent as
user messages before the conversation; sampling options (temperature, max_tokens …) are
ignored: the agent's settings apply. A run that pauses for approval ends its answer with
a ``[paused: …]`` line naming the calls and the session (decide them on the page). Every
request makes a session (listed on the page); the previous messages sent with a request
are its transcript.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec
from aiohttp import web

from ketch import AgentEvent
from ketch import Message
from ketch.sessions import SessionLockedError
from ketch.sessions import SessionNotFoundError

from ._hub import HUB
from ._hub import Hub
from ._live import Conflict
from ._live import LiveSession
from ._runs import Answer
from ._runs import ProtocolError
from ._runs import message_text
from ._runs import open_session
from ._runs import run_events
from ._runs import split_prompt
from ._runs import text_of
from ._runs import to_message

_encode = msgspec.json.Encoder().encode
_OWNED_BY = "ketch"
_RESPONSES_KEPT = 1000  # response id -> session id, for previous_response_id


def _id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


def _fail(exc: ProtocolError) -> web.Response:
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    body = {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": exc.code}}
    return web.json_response(body, status=exc.status)


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        data = json.loads(await request.read() or b"null")
    except ValueError:
        raise ProtocolError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ProtocolError(400, "the body must be a JSON object")
    return data


def _check_model(hub: Hub, data: dict[str, Any]) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError(400, "'model': expected the name of a served agent", param="model")
    if model != hub.name:
        raise ProtocolError(
            404, f"The model {model!r} does not exist: this server serves {hub.name!r}", param="model", code="model_not_found"
        )
    return model


def _no_client_tools(data: dict[str, Any]) -> None:
    if data.get("tools"):
        raise ProtocolError(
            400, "'tools': a served ketch agent runs its own tools on the server; send no tools of the client's", param="tools"
        )


async def _start(hub: Hub, history: list[Message], text: str, live: LiveSession | None = None) -> tuple[LiveSession, AsyncGenerator[AgentEvent, None]]:
    if live is None:
        live = await open_session(hub, history)
    chosen = live
    return live, run_events(live, lambda: chosen.prompt(text))


async def _finish(hub: Hub, live: LiveSession, events: AsyncGenerator[AgentEvent, None]) -> None:
    await events.aclose()
    if not live.pending():
        await hub.discard(live.session.id)


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + _encode(data) + b"\n\n"


async def _stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    return response


# -- /v1/models ------------------------------------------------------------------------------
async def list_models(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    model = {"id": hub.name, "object": "model", "created": int(hub.started), "owned_by": _OWNED_BY}
    return web.json_response({"object": "list", "data": [model]})


# -- /v1/chat/completions ----------------------------------------------------------------------
def _chat_history(data: dict[str, Any]) -> list[Message]:
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ProtocolError(400, "'messages': expected a list of messages", param="messages")
    out: list[Message] = []
    for number, message in enumerate(messages):
        where = f"messages[{number}]"
        if not isinstance(message, dict):
            raise ProtocolError(400, f"{where}: expected an object", param=where)
        role = message.get("role")
        if role == "tool" or message.get("tool_calls"):
            raise ProtocolError(400, f"{where}: tool calls of the client's are not accepted (the agent runs its own tools)", param=where)
        text = text_of(message.get("content"), where=f"{where}.content")
        out.append(to_message(str(role), text, where=where))
    return out


async def chat_completions(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    try:
        data = await _json(request)
        model = _check_model(hub, data)
        _no_client_tools(data)
        history, text = split_prompt(_chat_history(data), where="messages")
        live, events = await _start(hub, history, text)
    except ProtocolError as exc:
        return _fail(exc)
    ident = _id("chatcmpl")
    created = int(time.time())
    answer = Answer(live)
    try:
        if not data.get("stream"):
            async for event in events:
                answer.feed(event)
            answer.closing()
            failed = answer.failure()
            if failed is not None:
                return _fail(ProtocolError(502, failed))
            message = {"role": "assistant", "content": answer.text, "refusal": None}
            return web.json_response({
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": answer.finish, "logprobs": None}],
                "usage": _chat_usage(answer),
            })
        options = data.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        response = await _stream(request)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return _sse({"id": ident, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]})

        await response.write(chunk({"role": "assistant", "content": ""}))
        async for event in events:
            piece = answer.feed(event)
            if piece:
                await response.write(chunk({"content": piece}))
        note = answer.closing()
        if note:
            await response.write(chunk({"content": note}))
        failed = answer.failure()
        if failed is not None:
            await response.write(_sse({"error": {"message": failed, "type": "server_error", "param": None, "code": None}}))
        else:
            await response.write(chunk({}, answer.finish))
            if include_usage:
                usage = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [], "usage": _chat_usage(answer)}
                await response.write(_sse(usage))
        await response.write(b"data: [DONE]\n\n")
        return response
    finally:
        await _finish(hub, live, events)


def _chat_usage(answer: Answer) -> dict[str, int]:
    prompt, completion = answer.usage["input"], answer.usage["output"]
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# -- /v1/responses -------------------------------------------------------------------------------
def _response_input(data: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    instructions = data.get("instructions")
    if isinstance(instructions, str) and instructions.strip():
        out.append(to_message("developer", instructions, where="instructions"))
    given = data.get("input")
    if isinstance(given, str):
        out.append(to_message("user", given, where="input"))
        return out
    if not isinstance(given, list):
        raise ProtocolError(400, "'input': expected a string or a list of input items", param="input")
    for number, item in enumerate(given):
        where = f"input[{number}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind != "message":
            raise ProtocolError(400, f"{where}: only message items are accepted (the agent runs its own tools), got {kind!r}", param=where)
        role = str(item.get("role"))
        text = text_of(item.get("content"), where=f"{where}.content", kinds=("input_text", "output_text", "text"))
        out.append(to_message(role, text, where=where))
    return out


def _remember(hub: Hub, response_id: str, session_id: str) -> None:
    """Keep the session a response left, for ``previous_response_id`` (the latest
    responses only)."""
    kept = hub.responses
    kept[response_id] = session_id
    while len(kept) > _RESPONSES_KEPT:
        kept.popitem(last=False)


async def _previous(hub: Hub, previous: Any) -> LiveSession:
    session_id = hub.responses.get(previous) if isinstance(previous, str) else None
    if session_id is not None:
        try:
            return await hub.get(session_id)
        except (SessionNotFoundError, SessionLockedError):
            pass
    raise ProtocolError(404, f"previous response {previous!r} is not known to this server", param="previous_response_id")


async def responses(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``."""
    hub = request.app[HUB]
    try:
        data = await _json(request)
        model = _check_model(hub, data)
        _no_client_tools(data)
        messages = _response_input(data)
        previous = data.get("previous_response_id")
        live: LiveSession | None = None
        if previous is not None:
            live = await _previous(hub, previous)
            if any(m.role != "user" for m in messages):
                raise ProtocolError(400, "'input': after previous_response_id only user input is accepted", param="input")
            text = "\n\n".join(message_text(m) for m in messages)
            history: list[Message] = []
        else:
            history, text = split_prompt(messages, where="input")
        live, events = await _start(hub, history, text, live)
    except ProtocolError as exc:
        return _fail(exc)
    except Conflict as exc:
        return _fail(ProtocolError(409, str(exc)))
    run = _ResponseRun(_id("resp"), model, data, answer=Answer(live))
    keep = False
    try:
        if not data.get("stream"):
            async for event in events:
                run.feed(event)
            run.finish()
            keep = run.status == "completed"
            return web.json_response(run.body())
        response = await _stream(request)
        for frame in run.opening():
            await response.write(frame)
        async for event in events:
            for frame in run.feed(event):
                await response.write(frame)
        for frame in run.closing():
            await response.write(frame)
        keep = run.status == "completed"
        return response
    finally:
        if keep:
            _remember(hub, run.id, live.session.id)
        await events.aclose()
        if not keep and not live.pending():
            await hub.discard(live.session.id)


class _ResponseRun:
    """One response: its output items and, when streaming, the Open Responses events."""

    def __init__(self, ident: str, model: str, data: dict[str, Any], *, answer: Answer) -> None:
        self.id = ident
        self.model = model
        self.data = data
        self.answer = answer
        self.created = int(time.time())
        self.completed: int | None = None
        self.seq = 0
        self.status = "in_progress"
        self.output: list[dict[str, Any]] = []
        self.item: dict[str, Any] | None = None  # the message item being streamed
        self.parts: list[str] = []
        self.error: dict[str, str] | None = None
        self.incomplete: dict[str, str] | None = None

    def body(self) -> dict[str, Any]:
        usage = None
        if self.status != "in_progress":
            i, o = self.answer.usage["input"], self.answer.usage["output"]
            usage = {
                "input_tokens": i,
                "input_tokens_details": {"cached_tokens": self.answer.usage["cache_read"], "cache_write_tokens": self.answer.usage["cache_write"]},
                "output_tokens": o,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": i + o,
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "completed_at": self.completed,
            "status": self.status,
            "model": self.model,
            "output": list(self.output),
            "error": self.error,
            "incomplete_details": self.incomplete,
            "instructions": self.data.get("instructions") if isinstance(self.data.get("instructions"), str) else None,
            "previous_response_id": self.data.get("previous_response_id"),
            "usage": usage,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "temperature": None,
            "top_p": None,
            "max_output_tokens": None,
            "truncation": "disabled",
            "text": {"format": {"type": "text"}},
            "reasoning": None,
            "store": True,
            "metadata": self.data.get("metadata") if isinstance(self.data.get("metadata"), dict) else {},
        }

    def _event(self, kind: str, **fields: Any) -> bytes:
        self.seq += 1
        return _sse({"type": kind, "sequence_number": self.seq, **fields}, kind)

    def opening(self) -> list[bytes]:
        return [self._event("response.created", response=self.body()), self._event("response.in_progress", response=self.body())]

    def _open_item(self) -> list[bytes]:
        self.item = {"id": _id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        self.parts = []
        index = len(self.output)
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._event("response.output_item.added", output_index=index, item=dict(self.item)),
            self._event("response.content_part.added", item_id=self.item["id"], output_index=index, content_index=0, part=part),
        ]

    def _close_item(self) -> list[bytes]:
        item = self.item
        if item is None:
            return []
        self.item = None
        text = "".join(self.parts)
        part = {"type": "output_text", "text": text, "annotations": []}
        item["content"] = [part]
        item["status"] = "completed"
        index = len(self.output)
        self.output.append(item)
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [
            self._event("response.output_text.done", **where, text=text, logprobs=[]),
            self._event("response.content_part.done", **where, part=part),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _text(self, text: str) -> list[bytes]:
        frames = self._open_item() if self.item is None else []
        assert self.item is not None
        self.parts.append(text)
        where = {"item_id": self.item["id"], "output_index": len(self.output), "content_index": 0}
        frames.append(self._event("response.output_text.delta", **where, delta=text, logprobs=[]))
        return frames

    def feed(self, event: AgentEvent) -> list[bytes]:
        """The stream's events for one agent event."""
        answer = self.answer
        gap = answer.gap
        text = answer.feed(event)
        if text:
            if gap:  # a message of its own: an item, not a blank line
                text = text[2:]
            return self._text(text) if text else []
        if event.type == "message_end" and event.message.role == "assistant":
            return self._close_item()
        return []

    def finish(self) -> list[bytes]:
        frames = self._close_item()
        note = self.answer.closing()
        if note:
            frames += self._text(note.strip())
            frames += self._close_item()
        failed = self.answer.failure()
        self.completed = int(time.time())
        if failed is not None:
            self.status = "failed"
            self.error = {"code": "server_error", "message": failed}
        elif self.answer.cut:
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
        else:
            self.status = "completed"
        return frames

    def closing(self) -> list[bytes]:
        frames = self.finish()
        kind = {"completed": "response.completed", "failed": "response.failed", "incomplete": "response.incomplete"}[self.status]
        frames.append(self._event(kind, response=self.body()))
        return frames


ROUTES: tuple[tuple[str, str, Any], ...] = (
    ("GET", "/v1/models", list_models),
    ("POST", "/v1/chat/completions", chat_completions),
    ("POST", "/v1/responses", responses),
)
"""The routes of this module: ``(method, path, handler)``."""
