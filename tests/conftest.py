"""Shared fixtures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail if a test leaves tasks running."""
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert leaked == [], f"leaked tasks: {leaked}"
