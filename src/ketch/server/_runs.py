"""One run of the served agent for a protocol request (OpenAI, AG-UI, A2A).

Each request that starts a conversation gets a session of its own (the page lists it,
so what an API client asked can be watched and its approvals decided there); the
events of the run come as :class:`ketch.AgentEvent` objects, in order; a client that
goes away aborts the run. Helpers turn the messages of those protocols into ketch's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from collections.abc import Callable
from typing import Any

from ketch import AgentEvent
from ketch import AssistantMessage
from ketch import Message
from ketch import TextContent
from ketch import UserMessage
from ketch.llm import TextDelta

from ._hub import Hub
from ._live import LiveSession


class ProtocolError(Exception):
    """A request a protocol route refuses: HTTP ``status`` and a one-line message naming
    the bad value (``param``: the field, when there is one)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


async def open_session(hub: Hub, history: list[Message]) -> LiveSession:
    """A new session of the served agent whose transcript is ``history`` (recorded)."""
    live = await hub.create()
    if history:
        try:
            await live.seed(history)
        except BaseException:
            await hub.discard(live.session.id)
            raise
    return live


async def run_events(live: LiveSession, start: Callable[[], None]) -> AsyncGenerator[AgentEvent, None]:
    """The events of the run ``start()`` begins on ``live`` (``live.prompt(text)`` or
    ``live.decide(...)``), until the run is over. Closing the iterator early (the client
    went away) aborts the run."""
    queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
    unsubscribe = live.agent.subscribe(queue.put_nowait)
    finished = False
    try:
        start()
        task = live.task
        if task is None:
            finished = True
            return
        task.add_done_callback(lambda _: queue.put_nowait(None))
        while (event := await queue.get()) is not None:
            yield event
        finished = True
    finally:
        unsubscribe()
        if not finished and live.running:
            live.abort()


def text_of(content: Any, *, where: str, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of a protocol message's ``content``: a string, or a list of parts whose
    ``type`` is one of ``kinds`` (joined). Another part is a :class:`ProtocolError`."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise ProtocolError(400, f"{where}: expected a string or a list of parts, got {type(content).__name__}", param=where)
    texts = []
    for number, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds or not isinstance(part.get("text"), str):
            allowed = " or ".join(repr(k) for k in kinds)
            raise ProtocolError(
                400, f"{where}[{number}]: only text parts ({allowed}) are accepted, got {kind!r}", param=f"{where}[{number}]"
            )
        texts.append(part["text"])
    return "".join(texts)


def to_message(role: str, text: str, *, where: str) -> Message:
    """A ketch message for a protocol message of ``role``: user, assistant, or system and
    developer (which become user messages: the served agent keeps its own system prompt)."""
    if role in ("user", "system", "developer"):
        return UserMessage(content=[TextContent(text=text)])
    if role == "assistant":
        return AssistantMessage(content=[TextContent(text=text)] if text else [])
    raise ProtocolError(400, f"{where}: role {role!r} is not accepted: expected user, assistant, system or developer", param=where)


def message_text(message: Message) -> str:
    """The text blocks of a user or assistant message, joined."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content or () if isinstance(b, TextContent))


def split_prompt(history: list[Message], *, where: str) -> tuple[list[Message], str]:
    """``history`` without its last message, and that message's text: the prompt of the
    run (it must be a user message with text)."""
    if not history:
        raise ProtocolError(400, f"{where}: expected at least one message", param=where)
    last = history[-1]
    text = message_text(last) if isinstance(last, UserMessage) else ""
    if not isinstance(last, UserMessage) or not text.strip():
        raise ProtocolError(400, f"{where}: the last message must be a user message with text", param=where)
    return history[:-1], text


def paused_note(live: LiveSession) -> str:
    """What to tell a client whose run paused for approval (one line)."""
    calls = ", ".join(f"{p['tool_name']} ({p['tool_call_id']})" for p in live.pending())
    return f"[paused: {calls} needs approval; decide it on the ketch page, session {live.session.id}]"


class Answer:
    """What a run said so far, for the answer of a request: text deltas as they come
    (a blank line between the texts of two assistant messages), and how it ended."""

    def __init__(self, live: LiveSession) -> None:
        self.live = live
        self.parts: list[str] = []
        self.wrote = False  # some text was given out
        self.gap = False  # a new assistant message started after text: a blank line first
        self.usage = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        self.end_reason = "stop"
        self.error: str | None = None
        self.cut = False  # the last message stopped at the token limit

    def feed(self, event: AgentEvent) -> str:
        """The text ``event`` adds to the answer ("" for none)."""
        if event.type == "message_update":
            inner = event.event
            if type(inner) is not TextDelta or not inner.delta:
                return ""
            text: str = inner.delta
            if self.gap:
                text = "\n\n" + text
                self.gap = False
            self.wrote = True
            self.parts.append(text)
            return text
        if event.type == "message_start" and event.message.role == "assistant":
            self.gap = self.wrote
        elif event.type == "message_end" and type(event.message) is AssistantMessage:
            self.cut = event.message.stop_reason == "length"
        elif event.type == "agent_end":
            summary = event.summary
            self.end_reason = summary.end_reason
            self.error = summary.error
            usage = summary.usage
            self.usage = {
                "input": usage.input + usage.cache_read + usage.cache_write,
                "output": usage.output,
                "cache_read": usage.cache_read,
                "cache_write": usage.cache_write,
            }
        return ""

    def closing(self) -> str:
        """Text to add once the run is over ("" for none): the note of a pause."""
        if self.end_reason == "approval_required":
            note = ("\n\n" if self.wrote else "") + paused_note(self.live)
            self.parts.append(note)
            return note
        return ""

    def failure(self) -> str | None:
        """Why the run failed (None when it gave an answer)."""
        last = self.live.last_end or {}
        if last.get("end_reason") == "error" and self.end_reason == "stop" and last.get("error"):
            return str(last["error"])  # the run could not start (a hook or the agent failed)
        if self.end_reason in ("error", "output_invalid"):
            return self.error or "the run failed"
        if self.end_reason == "aborted":
            return "the run was aborted"
        return None

    @property
    def finish(self) -> str:
        return "length" if self.cut else "stop"

    @property
    def text(self) -> str:
        return "".join(self.parts)
