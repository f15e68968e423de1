"""Fixtures for the ``ketch`` command tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import FakeServer
from clihelp import Terminal
from clihelp import make_env


@pytest.fixture
def env(tmp_path: Path) -> Env:
    """A clean environment: no provider keys, HOME and XDG_CONFIG_HOME under tmp_path."""
    return make_env(tmp_path)


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """A running :class:`FakeServer`, stopped after the test."""
    server = FakeServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    """Collects :class:`Terminal` sessions and kills any still running after the test."""
    started: list[Terminal] = []
    try:
        yield started
    finally:
        for terminal in started:
            terminal.close()
