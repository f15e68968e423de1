"""Fixtures for the ``ketch`` command tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import SRC, Env, FakeServer, Terminal


@pytest.fixture
def env(tmp_path: Path) -> Env:
    """A clean environment: no provider keys, HOME and XDG_CONFIG_HOME under tmp_path."""
    home = tmp_path / "home"
    xdg = tmp_path / "xdg"
    work = tmp_path / "work"
    for d in (home, xdg, work):
        d.mkdir()
    variables = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(xdg),
        "PYTHONPATH": SRC,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }
    return Env(home, xdg, work.resolve(), variables)


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
