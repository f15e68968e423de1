"""Shared fixtures."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail if a test leaves tasks running."""
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert leaked == [], f"leaked tasks: {leaked}"


@pytest.fixture
def scratch_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the scratch folders a tool makes (the bash tool's full output logs) inside the
    test's folder: ``tempfile`` hands out ``<tmp_path>/tmp``."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
