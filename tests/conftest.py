"""Shared test helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest


def describe(event: Any) -> str:
    """A compact label of an event: its type, plus the role or tool call id where useful."""
    kind = event.type
    if kind in ("message_start", "message_end"):
        return f"{kind}:{event.message.role}"
    if kind in ("tool_execution_start", "tool_execution_end", "tool_execution_update"):
        return f"{kind}:{event.tool_call_id}"
    return kind


async def collect(stream: Any) -> list[Any]:
    """All events of a run stream."""
    return [ev async for ev in stream]


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail if a test leaves tasks running."""
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert leaked == [], f"leaked tasks: {leaked}"
