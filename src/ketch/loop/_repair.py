"""From transcript to a valid model request: default conversion and sequence repair.

:func:`default_convert_to_llm` keeps user, assistant and tool-result messages, lets a
custom message contribute model messages through its ``to_llm()`` method (by default
nothing), and turns interrupted or failed assistant messages into something every
provider accepts. :func:`repair_messages` then makes sure every tool call has exactly
one result right after its assistant message; the loop skips it for a model that
prepares its messages itself (:class:`ketch.llm.PreparesMessages`: every built-in
adapter), so each request is repaired once.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..llm._handoff import MISSING_TOOL_RESULT
from ..llm._lists import extend_with_room
from ..llm._messages import AssistantContent
from ..llm._messages import AssistantMessage
from ..llm._messages import CustomMessage
from ..llm._messages import Message
from ..llm._messages import TextContent
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ..llm._messages import UserMessage

INTERRUPTED_NOTE = "[Request interrupted by user]"
SILENT_ABORT = "silent"
"""The abort reason of a silent abort (``signal.abort("silent")``, :meth:`ketch.Agent.abort_silent`),
also the ``error_kind`` the loop gives the aborted message: no interruption note follows it."""


def default_convert_to_llm(messages: list[Message]) -> list[Message]:
    """The default conversion of a transcript into model messages.

    - user, tool-result and completed assistant messages pass through unchanged;
    - a custom message contributes what its ``to_llm()`` returns (a message, a list of
      messages, or None: the default, which drops it);
    - an aborted assistant message keeps its text (thinking and tool calls are dropped,
      and so are the text's provider signatures, which belong to a response that never
      completed) and is followed by a user note ``[Request interrupted by user]``, so the
      model learns its previous response was cut off (not after a silent abort: its
      ``error_kind`` is ``"silent"``); the error results that close its
      tool calls in the transcript are dropped with the calls;
    - an assistant message that failed (``stop_reason == "error"``) is dropped.
    """
    out: list[Message] = []
    append = out.append
    dropped: set[str] | None = None  # ids of the calls of the aborted message just seen
    for m in messages:
        cls = type(m)
        if cls is ToolResultMessage:
            if dropped is not None and m.tool_call_id in dropped:  # type: ignore[attr-defined]
                continue
            append(m)
            continue
        dropped = None
        if cls is UserMessage:
            append(m)
        elif cls is AssistantMessage:
            assert isinstance(m, AssistantMessage)
            reason = m.stop_reason
            if reason == "error":
                continue
            if reason == "aborted":
                text: list[AssistantContent] = [
                    TextContent(text=b.text) for b in m.content if type(b) is TextContent and b.text
                ]
                if text:
                    append(AssistantMessage(
                        content=text, provider=m.provider, api=m.api, model=m.model,
                        timestamp=m.timestamp,
                    ))
                if m.error_kind != SILENT_ABORT:
                    append(UserMessage(content=[TextContent(text=INTERRUPTED_NOTE)], timestamp=m.timestamp))
                ids = {b.id for b in m.content if type(b) is ToolCall}
                dropped = ids or None
                continue
            append(m)
        elif isinstance(m, CustomMessage):
            converted = m.to_llm()
            if converted is None:
                continue
            if isinstance(converted, list):
                out.extend(converted)
            else:
                append(converted)
    return out


def repair_messages(messages: list[Message]) -> list[Message]:
    """Make tool calls and results pair up, by position.

    After each assistant message with tool calls, the run of tool results that follows
    is reordered to the call order; a result missing for a call is replaced by an error
    result whose text is :data:`ketch.llm._handoff.MISSING_TOOL_RESULT` (the one text for
    a missing result, also used by the provider adapters); results matching no call of
    that message, and duplicates, are dropped. Returns ``messages`` itself when nothing
    needed fixing.
    """
    if not _scan(messages)[0]:
        return _repaired(messages)
    return messages


def validate_message_sequence(messages: Sequence[Message]) -> list[str]:
    """What :func:`repair_messages` would fix in ``messages``, as one line per problem
    (an empty list: the tool calls and results pair up), without changing anything.

    Problems: a tool call with no result before the next user or assistant message (or
    the end), a result that answers no call of the assistant message before it, and a
    second result for the same call. Messages are counted from 0.
    """
    problems: list[str] = []
    waiting: dict[str, str] = {}  # call id -> tool name, for the latest assistant message
    answered: set[str] = set()
    owner = 0

    def unanswered() -> None:
        for call_id, name in waiting.items():
            problems.append(f"message {owner}: tool call {call_id!r} ({name}) has no result")

    for i, m in enumerate(messages):
        if type(m) is ToolResultMessage:
            assert isinstance(m, ToolResultMessage)
            call_id = m.tool_call_id
            if waiting.pop(call_id, None) is not None:
                answered.add(call_id)
            elif call_id in answered:
                problems.append(f"message {i}: a second result for tool call {call_id!r}")
            else:
                problems.append(f"message {i}: tool result {call_id!r} answers no call of the assistant message before it")
            continue
        unanswered()
        waiting = {}
        answered = set()
        if type(m) is AssistantMessage:
            assert isinstance(m, AssistantMessage)
            owner = i
            waiting = {b.id: b.name for b in m.content if type(b) is ToolCall}
    unanswered()
    return problems


def _repaired(messages: list[Message]) -> list[Message]:
    """:func:`repair_messages` for a transcript known to need it (one pass)."""
    out: list[Message] = []
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        i += 1
        if type(m) is ToolResultMessage:
            continue  # orphan: not right after an assistant message with its call
        out.append(m)
        if type(m) is not AssistantMessage:
            continue
        calls = [b for b in m.content if type(b) is ToolCall]
        if not calls:
            continue
        results: dict[str, ToolResultMessage] = {}
        while i < n and type(messages[i]) is ToolResultMessage:
            r = messages[i]
            assert isinstance(r, ToolResultMessage)
            results.setdefault(r.tool_call_id, r)
            i += 1
        for call in calls:
            found = results.get(call.id)
            if found is None:
                found = ToolResultMessage(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    content=[TextContent(text=MISSING_TOOL_RESULT)],
                    is_error=True,
                    timestamp=m.timestamp,
                )
            out.append(found)
    return out


def _scan(messages: list[Message], start: int = 0) -> tuple[bool, int]:
    """Check pairing from ``start`` (a clean boundary) on.

    Returns ``(valid, boundary)``: whether every call has its result in place and no
    result is stray, and the last index at which no result was outstanding.
    """
    expected: list[str] = []
    pos = 0
    boundary = start
    for i in range(start, len(messages)):
        m = messages[i]
        cls = type(m)
        if cls is ToolResultMessage:
            assert isinstance(m, ToolResultMessage)
            if pos >= len(expected) or expected[pos] != m.tool_call_id:
                return False, boundary
            pos += 1
            continue
        if pos != len(expected):
            return False, boundary
        boundary = i
        if cls is AssistantMessage:
            assert isinstance(m, AssistantMessage)
            expected = [b.id for b in m.content if type(b) is ToolCall]
        else:
            expected = []
        pos = 0
    return pos == len(expected), boundary


class LLMView:
    """The model's view of a transcript, maintained incrementally.

    For an append-only transcript each call converts and checks only the messages
    added since the last call, so a turn costs the same at message 10 and at message
    10,000. Any other change (the transcript shrank, or its first or last-seen message
    was replaced) triggers a full rebuild. The returned list is reused by later calls:
    a model that keeps it beyond the request must copy it.
    """

    __slots__ = ("_boundary", "_first", "_last", "_out", "_seen")

    def __init__(self) -> None:
        self._out: list[Message] = []
        self._seen = 0
        self._first: Message | None = None
        self._last: Message | None = None
        self._boundary = 0

    def build(self, messages: list[Message], repair: bool = True) -> list[Message]:
        """The converted and (unless ``repair`` is false: the model prepares its messages
        itself) repaired model messages for ``messages``."""
        seen = self._seen
        n = len(messages)
        if seen and (n < seen or messages[0] is not self._first or messages[seen - 1] is not self._last):
            self._out = []
            self._boundary = 0
            seen = 0
        if n > seen:
            if seen:
                self._out.extend(default_convert_to_llm(messages[seen:]))
            else:
                extend_with_room(self._out, default_convert_to_llm(messages))
            self._seen = n
            self._first = messages[0]
            self._last = messages[-1]
        if not repair:
            return self._out
        valid, boundary = _scan(self._out, self._boundary)
        if valid:
            self._boundary = boundary
            return self._out
        return _repaired(self._out)
