"""Cheap, transient context strategies: no model calls, the transcript is never changed.

Each returns a new list (sharing unchanged messages) and the tokens it saved.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..llm.messages import AssistantMessage, Message, TextContent, ToolCall, ToolResultMessage, UserMessage
from ..llm.tokens import estimate_message_tokens

__all__ = ["CLEARED_TOOL_RESULT", "clear_old_tool_results", "trim_long_text"]

CLEARED_TOOL_RESULT = "[tool result cleared to save context]"


def clear_old_tool_results(messages: Sequence[Message], keep_recent: int = 5) -> tuple[list[Message], int]:
    """Replace the content of tool results older than the newest ``keep_recent`` distinct
    calls (by tool name and arguments) with a short note; calls and ids stay."""
    calls: dict[str, ToolCall] = {}
    for m in messages:
        if type(m) is AssistantMessage:
            assert isinstance(m, AssistantMessage)
            for b in m.content:
                if type(b) is ToolCall:
                    calls[b.id] = b
    kept_keys: set[str] = set()
    keep_ids: set[str] = set()
    for m in reversed(messages):
        if type(m) is not ToolResultMessage:
            continue
        assert isinstance(m, ToolResultMessage)
        call = calls.get(m.tool_call_id)
        key = f"{m.tool_name}:{msgspec.json.encode(call.arguments).decode() if call else m.tool_call_id}"
        if key in kept_keys:
            continue
        if len(kept_keys) < keep_recent:
            kept_keys.add(key)
            keep_ids.add(m.tool_call_id)
    out: list[Message] = []
    saved = 0
    for m in messages:
        if type(m) is ToolResultMessage and m.tool_call_id not in keep_ids:
            assert isinstance(m, ToolResultMessage)
            if len(m.content) == 1 and type(m.content[0]) is TextContent and m.content[0].text == CLEARED_TOOL_RESULT:
                out.append(m)
                continue
            cleared = msgspec.structs.replace(m, content=[TextContent(text=CLEARED_TOOL_RESULT)])
            saved += estimate_message_tokens(m) - estimate_message_tokens(cleared)
            out.append(cleared)
        else:
            out.append(m)
    return out, saved


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
