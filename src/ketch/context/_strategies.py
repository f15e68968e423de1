"""Cheap, transient context strategies: no model calls, the transcript is never changed.

Each returns a new list (sharing unchanged messages) and the tokens it saved.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..llm import AssistantMessage
from ..llm import Message
from ..llm import TextContent
from ..llm import ToolCall
from ..llm import ToolResultMessage
from ..llm import UserMessage
from ..llm._tokens import estimate_message_tokens

CLEARED_TOOL_RESULT = "[tool result cleared to save context]"


def _call_key(m: ToolResultMessage, calls: dict[str, ToolCall]) -> str:
    call = calls.get(m.tool_call_id)
    args = msgspec.json.encode(call.args).decode() if call is not None else m.tool_call_id
    return f"{m.tool_name}:{args}"


def _cleared(m: ToolResultMessage) -> ToolResultMessage:
    return msgspec.structs.replace(m, content=[TextContent(text=CLEARED_TOOL_RESULT)])


class ClearedView:
    """The transcript with old tool results cleared, maintained incrementally.

    Keeps the results of the newest ``keep_recent`` distinct calls (by tool name and
    arguments; an older copy of an identical call is cleared even when recent) and
    replaces the content of every other result with :data:`CLEARED_TOOL_RESULT`. For an
    append-only transcript each :meth:`update` costs O(new messages); any other change
    rebuilds. ``tokens`` is the estimated size of the view.
    """

    __slots__ = ("_calls", "_first", "_kept", "_last", "_seen", "keep_recent", "tokens", "view")

    def __init__(self, keep_recent: int = 5) -> None:
        self.keep_recent = keep_recent
        self._reset()

    def _reset(self) -> None:
        self.view: list[Message] = []
        self.tokens = 0
        self._seen = 0
        self._first: Message | None = None
        self._last: Message | None = None
        self._calls: dict[str, ToolCall] = {}
        self._kept: dict[str, int] = {}

    def _clear_at(self, index: int) -> None:
        old = self.view[index]
        assert isinstance(old, ToolResultMessage)
        if len(old.content) == 1 and type(old.content[0]) is TextContent and old.content[0].text == CLEARED_TOOL_RESULT:
            return
        new = _cleared(old)
        self.tokens += estimate_message_tokens(new) - estimate_message_tokens(old)
        self.view[index] = new

    def update(self, messages: Sequence[Message]) -> list[Message]:
        """The cleared view of ``messages``."""
        seen = self._seen
        if seen and (len(messages) < seen or messages[0] is not self._first or messages[seen - 1] is not self._last):
            self._reset()
            seen = 0
        view, kept, calls = self.view, self._kept, self._calls
        for m in messages[seen:]:
            view.append(m)
            self.tokens += estimate_message_tokens(m)
            if type(m) is AssistantMessage:
                assert isinstance(m, AssistantMessage)
                for b in m.content:
                    if type(b) is ToolCall:
                        calls[b.id] = b
            elif type(m) is ToolResultMessage:
                assert isinstance(m, ToolResultMessage)
                key = _call_key(m, calls)
                previous = kept.pop(key, None)
                if previous is not None:
                    self._clear_at(previous)
                kept[key] = len(view) - 1
                if len(kept) > self.keep_recent:
                    oldest = next(iter(kept))
                    self._clear_at(kept.pop(oldest))
        self._seen = len(messages)
        if messages:
            self._first, self._last = messages[0], messages[-1]
        return view


def clear_old_tool_results(messages: Sequence[Message], keep_recent: int = 5) -> tuple[list[Message], int]:
    """Replace the content of tool results older than the newest ``keep_recent`` distinct
    calls (by tool name and arguments) with a short note; calls and ids stay. Returns the
    new list (sharing unchanged messages) and the tokens saved."""
    cleared = ClearedView(keep_recent)
    view = list(cleared.update(messages))
    saved = sum(estimate_message_tokens(m) for m in messages) - cleared.tokens
    return view, saved


def _trim(text: str, head: int, tail: int) -> str:
    cut = len(text) - head - tail
    return f"{text[:head]}\n[{cut} characters trimmed]\n{text[-tail:]}"


def trim_long_text(
    messages: Sequence[Message],
    keep_recent: int = 4,
    threshold: int = 4000,
    head: int = 1200,
    tail: int = 800,
) -> tuple[list[Message], int]:
    """Shorten text blocks over ``threshold`` characters in all but the newest
    ``keep_recent`` messages to their head and tail, with a note of how much was cut."""
    out = list(messages)
    saved = 0
    for i in range(max(0, len(out) - keep_recent)):
        m = out[i]
        if type(m) not in (UserMessage, AssistantMessage, ToolResultMessage):
            continue
        content = m.content  # type: ignore[attr-defined]
        if not any(type(b) is TextContent and len(b.text) > threshold for b in content):
            continue
        new_content = [
            TextContent(text=_trim(b.text, head, tail)) if type(b) is TextContent and len(b.text) > threshold else b
            for b in content
        ]
        trimmed = msgspec.structs.replace(m, content=new_content)
        saved += estimate_message_tokens(m) - estimate_message_tokens(trimmed)
        out[i] = trimmed
    return out, saved
