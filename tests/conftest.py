"""Shared fixtures."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def model_registry_restored() -> Iterator[None]:
    """Undo what a test registers (``register_provider``, ``register_model``, a config's
    providers): the process-wide registry is the same after every test. White-box: it
    copies the registry module's private tables."""
    registry = sys.modules.get("ketch.llm._registry")
    tables = ("_models", "_aliases", "_providers", "_inherited_api")
    saved = [dict(getattr(registry, t)) for t in tables] if registry is not None and registry._loaded else None
    yield
    registry = sys.modules.get("ketch.llm._registry")
    if registry is None or (saved is None and not registry._loaded):
        return
    for table, before in zip(tables, saved or [{}] * len(tables), strict=True):
        current = getattr(registry, table)
        if current != before:
            current.clear()
            current.update(before)
    if saved is None:
        registry._loaded = False  # loaded during the test: loads again on first use


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
