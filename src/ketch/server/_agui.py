"""AG-UI: a run of the served agent as an AG-UI event stream, for AG-UI frontends
(CopilotKit and others).

``POST /agui`` takes a ``RunAgentInput`` (``threadId``, ``runId``, ``messages``, and on a
run that answers interrupts, ``resume``) and answers ``text/event-stream``: one AG-UI
event per ``data:`` line, camelCase as the protocol writes them —

- ``RUN_STARTED``, then a ``STATE_SNAPSHOT`` (the session: id, model, context, cost);
- per assistant message ``TEXT_MESSAGE_START``/``_CONTENT``/``_END`` (and thinking as
  ``REASONING_START``, ``REASONING_MESSAGE_START``/``_CONTENT``/``_END``, ``REASONING_END``);
- per tool call ``TOOL_CALL_START``/``_ARGS``/``_END`` as the model streams it and
  ``TOOL_CALL_RESULT`` once the tool (on the server) has run;
- a last ``STATE_SNAPSHOT``, then ``RUN_FINISHED`` whose ``outcome`` is ``success``,
  ``cancelled`` (aborted) or ``interrupt``: the calls that wait for approval, one
  interrupt each (``id`` = the tool call's id, ``reason`` ``tool_approval``). The next
  run on the thread answers them with ``resume`` entries: ``resolved`` with payload
  ``{"approved": true}`` approves, ``{"approved": false, "reason": "..."}`` or
  ``cancelled`` denies. A failed run ends with ``RUN_ERROR``.

A thread is a session: the first run of a thread makes one from its ``messages``; a
later run (same ``threadId``) sends the thread's last user message to it. Tools of the
frontend's own (``tools``) are refused (400): the agent runs its own tools.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec
from aiohttp import web

from ketch import AgentEvent
from ketch import Message
from ketch import approve
from ketch import deny
from ketch.llm import AssistantMessage
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage

from ._hub import HUB
from ._live import BadRequest
from ._live import Conflict
from ._live import LiveSession
from ._runs import ProtocolError
from ._runs import message_text
from ._runs import open_session
from ._runs import run_events
from ._runs import split_prompt
from ._runs import text_of
from ._runs import to_message

_encode = msgspec.json.Encoder().encode
_THREADS_KEPT = 1000
PROTOCOL_VERSION = "1.0"


def _frame(kind: str, **fields: Any) -> bytes:
    return b"data: " + _encode({"type": kind, "timestamp": int(time.time() * 1000), **fields}) + b"\n\n"


def _history(messages: Any) -> list[Message]:
    """AG-UI messages as ketch messages (a tool round the agent made before comes back
    as its call and its result)."""
    if not isinstance(messages, list):
        raise ProtocolError(400, "'messages': expected a list of messages", param="messages")
    out: list[Message] = []
    names: dict[str, str] = {}
    for number, message in enumerate(messages):
        where = f"messages[{number}]"
        if not isinstance(message, dict):
            raise ProtocolError(400, f"{where}: expected an object", param=where)
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("toolCallId", ""))
            text = text_of(message.get("content"), where=f"{where}.content")
            out.append(ToolResultMessage(tool_call_id=call_id, tool_name=names.get(call_id, ""), content=[TextContent(text=text)]))
            continue
        if role in ("activity", "reasoning"):
            continue  # what the frontend showed, not conversation
        text = text_of(message.get("content"), where=f"{where}.content")
        converted = to_message(str(role), text, where=where)
        calls = message.get("toolCalls") if role == "assistant" else None
        if calls and isinstance(converted, AssistantMessage):
            for call in calls:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    args = {}
                names[str(call.get("id"))] = str(function.get("name", ""))
                converted.content.append(ToolCall(id=str(call.get("id")), name=str(function.get("name", "")), args=args if isinstance(args, dict) else {}))
        out.append(converted)
    return out


def _decisions(resume: Any, live: LiveSession) -> dict[str, Any]:
    """The approvals a ``resume`` list gives (``interruptId`` = the waiting call's id)."""
    if not isinstance(resume, list) or not resume:
        raise ProtocolError(400, "'resume': expected a list of {interruptId, status, payload}", param="resume")
    decisions: dict[str, Any] = {}
    for number, entry in enumerate(resume):
        where = f"resume[{number}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("interruptId"), str):
            raise ProtocolError(400, f"{where}: expected an object with interruptId", param=where)
        payload = entry.get("payload")
        status = entry.get("status")
        reason = payload.get("reason") if isinstance(payload, dict) else None
        approved = isinstance(payload, dict) and payload.get("approved") is True
        if status not in ("resolved", "cancelled"):
            raise ProtocolError(400, f"{where}.status: expected 'resolved' or 'cancelled', got {status!r}", param=where)
        decisions[entry["interruptId"]] = approve() if status == "resolved" and approved else deny(reason if isinstance(reason, str) else None)
    return decisions


class _Translate:
    """Agent events to AG-UI events, for one run."""

    def __init__(self, live: LiveSession) -> None:
        self.live = live
        self.message_id: str | None = None  # the assistant message being streamed
        self.text_open = False
        self.reasoning_open = False
        self.count = 0
        self.calls: dict[int, str] = {}  # content index -> tool call id, in this message

    def _new_message(self) -> str:
        self.count += 1
        return f"{self.live.session.id}-{self.live.last_event_id}-{self.count}"

    def _close_reasoning(self) -> list[bytes]:
        if not self.reasoning_open or self.message_id is None:
            return []
        self.reasoning_open = False
        rid = self.message_id + "-reasoning"
        return [_frame("REASONING_MESSAGE_END", messageId=rid), _frame("REASONING_END", messageId=rid)]

    def feed(self, event: AgentEvent) -> list[bytes]:
        if event.type == "message_start" and event.message.role == "assistant":
            self.message_id = self._new_message()
            self.text_open = False
            self.calls = {}
            return []
        if event.type == "message_update" and self.message_id is not None:
            return self._update(event.event)
        if event.type == "message_end" and event.message.role == "assistant":
            out = self._close_reasoning()
            if self.text_open and self.message_id is not None:
                out.append(_frame("TEXT_MESSAGE_END", messageId=self.message_id))
            self.text_open = False
            self.message_id = None
            return out
        if event.type == "tool_execution_end":
            result = getattr(event, "result", None)
            content = message_text(result) if result is not None else ""
            return [
                _frame(
                    "TOOL_CALL_RESULT",
                    messageId=self._new_message(),
                    toolCallId=event.tool_call_id,
                    content=content,
                    role="tool",
                )
            ]
        return []

    def _update(self, inner: Any) -> list[bytes]:
        mid = self.message_id
        assert mid is not None
        if inner.type == "thinking_delta" and inner.delta:
            out = []
            if not self.reasoning_open:
                self.reasoning_open = True
                rid = mid + "-reasoning"
                out += [_frame("REASONING_START", messageId=rid), _frame("REASONING_MESSAGE_START", messageId=rid, role="reasoning")]
            out.append(_frame("REASONING_MESSAGE_CONTENT", messageId=mid + "-reasoning", delta=inner.delta))
            return out
        if inner.type == "text_delta" and inner.delta:
            out = self._close_reasoning()
            if not self.text_open:
                self.text_open = True
                out.append(_frame("TEXT_MESSAGE_START", messageId=mid, role="assistant"))
            out.append(_frame("TEXT_MESSAGE_CONTENT", messageId=mid, delta=inner.delta))
            return out
        if inner.type == "toolcall_start":
            call = inner.partial.content[inner.index]
            self.calls[inner.index] = call.id
            return [*self._close_reasoning(), _frame("TOOL_CALL_START", toolCallId=call.id, toolCallName=call.name, parentMessageId=mid)]
        if inner.type == "toolcall_delta" and inner.delta and inner.index in self.calls:
            return [_frame("TOOL_CALL_ARGS", toolCallId=self.calls[inner.index], delta=inner.delta)]
        if inner.type == "toolcall_end" and inner.index in self.calls:
            return [_frame("TOOL_CALL_END", toolCallId=self.calls[inner.index])]
        return []


async def _snapshot(live: LiveSession) -> bytes:
    state = await live.state(messages=False)
    snapshot = {key: state[key] for key in ("id", "title", "model", "context", "cost", "pending_approvals")}
    return _frame("STATE_SNAPSHOT", snapshot={"session": snapshot})


async def run_agent(request: web.Request) -> web.StreamResponse:
    """``POST /agui``: one run of the served agent as AG-UI events."""
    hub = request.app[HUB]
    try:
        try:
            data = json.loads(await request.read() or b"null")
        except ValueError:
            raise ProtocolError(400, "the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ProtocolError(400, "the body must be a RunAgentInput object")
        thread, run = data.get("threadId"), data.get("runId")
        if not isinstance(thread, str) or not thread or not isinstance(run, str) or not run:
            raise ProtocolError(400, "'threadId' and 'runId': expected non-empty strings")
        if data.get("tools"):
            raise ProtocolError(400, "'tools': a served ketch agent runs its own tools on the server; send no frontend tools", param="tools")
        live = await hub.get_known(hub.threads.get(thread))
        resume = data.get("resume")
        if resume:
            if live is None or not live.pending():
                raise ProtocolError(409, f"thread {thread!r} waits on no interrupt", param="resume")
            decisions = _decisions(resume, live)
            chosen = live
            events = run_events(live, lambda: (chosen.decide(decisions), None)[1])
        else:
            history = _history(data.get("messages"))
            if live is not None:
                text = split_prompt(history, where="messages")[1]
            else:
                before, text = split_prompt(history, where="messages")
                live = await open_session(hub, before)
                hub.threads[thread] = live.session.id
                while len(hub.threads) > _THREADS_KEPT:
                    hub.threads.popitem(last=False)
            chosen = live
            events = run_events(live, lambda: chosen.prompt(text))
        first = await anext(events, None)  # starts the run: a conflict is an HTTP error
    except ProtocolError as exc:
        return web.json_response({"error": exc.message}, status=exc.status)
    except (Conflict, BadRequest) as exc:
        return web.json_response({"error": str(exc)}, status=409 if isinstance(exc, Conflict) else 400)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    try:
        await response.write(_frame("RUN_STARTED", threadId=thread, runId=run, protocolVersion=PROTOCOL_VERSION))
        await response.write(await _snapshot(live))
        await _stream_run(response, live, first, events, thread, run)
    finally:
        await events.aclose()
    return response


async def _stream_run(
    response: web.StreamResponse, live: LiveSession, first: AgentEvent | None, events: AsyncGenerator[AgentEvent, None], thread: str, run: str
) -> None:
    translate = _Translate(live)
    end: Any = None
    pending = [first] if first is not None else []
    while True:
        event = pending.pop() if pending else await anext(events, None)
        if event is None:
            break
        if event.type == "agent_end":
            end = event.summary
        for frame in translate.feed(event):
            await response.write(frame)
    await response.write(await _snapshot(live))
    reason = end.end_reason if end is not None else (live.last_end or {}).get("end_reason", "error")
    if reason == "approval_required":
        interrupts = [
            {
                "id": p["tool_call_id"],
                "reason": "tool_approval",
                "message": f"Allow {p['tool_name']}({json.dumps(p['args'], ensure_ascii=False)[:500]})?" + (f" {p['reason']}" if p["reason"] else ""),
                "toolCallId": p["tool_call_id"],
                "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}}, "required": ["approved"]},
            }
            for p in live.pending()
            if not p["decided"]
        ]
        await response.write(_frame("RUN_FINISHED", threadId=thread, runId=run, outcome={"type": "interrupt", "interrupts": interrupts}))
    elif reason == "aborted":
        await response.write(_frame("RUN_FINISHED", threadId=thread, runId=run, outcome={"type": "cancelled"}))
    elif reason in ("error", "output_invalid"):
        error = (end.error if end is not None else None) or (live.last_end or {}).get("error") or "the run failed"
        await response.write(_frame("RUN_ERROR", message=str(error), code=reason))
    else:
        await response.write(_frame("RUN_FINISHED", threadId=thread, runId=run, outcome={"type": "success"}))


ROUTES: tuple[tuple[str, str, Any], ...] = (("POST", "/agui", run_agent),)
"""The routes of this module: ``(method, path, handler)``."""
