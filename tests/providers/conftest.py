"""Fixtures for provider tests: the scripted loopback server and a real llama.cpp server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from loopback import LoopbackServer


@pytest.fixture
async def loopback() -> AsyncIterator[LoopbackServer]:
    """A started :class:`LoopbackServer` on 127.0.0.1 (stopped after the test)."""
    async with LoopbackServer() as server:
        yield server
