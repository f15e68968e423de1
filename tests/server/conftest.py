"""Fixtures of the server tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from serverhelp import Server
from serverhelp import start_server


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await servers(script, tools=..., **options)`` starts an in-process server; all
    are stopped after the test."""
    started: list[Server] = []
    count = 0

    async def start(script: Callable[[], list[Any]], **kwargs: Any) -> Server:
        nonlocal count
        count += 1
        root = tmp_path / f"server{count}"
        root.mkdir()
        server = await start_server(root, script, **kwargs)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            await server.close()
