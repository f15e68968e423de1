"""Helpers shared by the tests (import as ``from support import ...``)."""

from __future__ import annotations

from typing import Any


def describe(event: Any) -> str:
    """A compact label of an event: its type, plus the role or tool call id where useful."""
    kind = event.type
    if kind in ("message_start", "message_end"):
        return f"{kind}:{event.message.role}"
    if kind in ("tool_execution_start", "tool_execution_end", "tool_execution_update"):
        return f"{kind}:{event.tool_call_id}"
    return str(kind)


async def collect(stream: Any) -> list[Any]:
    """All events of a run stream."""
    return [ev async for ev in stream]
