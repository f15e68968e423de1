"""Fixtures for the MCP client tests: real servers, started here and stopped after.

``mcp-server-time`` (PyPI) and the test's own ``changing_server.py`` run over stdio with
this interpreter; ``@modelcontextprotocol/server-everything`` (npm) runs over stdio and
over streamable HTTP on a free loopback port. scripts/test.sh installs server-everything
into ``.cache/npm`` of the checkout; nothing is downloaded at test time, and a missing
install fails the tests (it does not skip them).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ketch.mcp import MCPManager
from ketch.mcp import MCPServerConfig
from ketch.mcp import load_mcp_json

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
EVERYTHING = ROOT / ".cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
LOOPBACK = HERE / "loopback.cjs"


def everything_entry() -> Path:
    """The installed server-everything's entry point (fails loudly when missing)."""
    if not EVERYTHING.is_file():
        pytest.fail(
            f"{EVERYTHING} is missing: run scripts/test.sh, or "
            "npm install --prefix .cache/npm @modelcontextprotocol/server-everything@2026.8.31",
            pytrace=False,
        )
    return EVERYTHING


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[Any]:
    """Where stdio servers' stderr goes."""
    with open(tmp_path / "servers.log", "w") as f:
        yield f


@pytest.fixture
def time_config() -> dict[str, MCPServerConfig]:
    return load_mcp_json(
        {"mcpServers": {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}}}
    )


@pytest.fixture
def changing_config() -> dict[str, MCPServerConfig]:
    return load_mcp_json({"mcpServers": {"c": {"command": sys.executable, "args": [str(HERE / "changing_server.py")]}}})


@pytest.fixture
def everything_stdio() -> dict[str, MCPServerConfig]:
    return load_mcp_json({"mcpServers": {"e": {"command": "node", "args": [str(everything_entry()), "stdio"]}}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve_everything(mode: str, ready: str, path: str) -> Iterator[str]:
    """server-everything in ``mode`` on a free loopback port until the generator is closed."""
    entry = everything_entry()
    port = _free_port()
    proc = subprocess.Popen(
        ["node", "--require", str(LOOPBACK), str(entry), mode],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:  # the server says when it listens (no sleeping)
        seen.append(line)
        if ready in line:
            break
    else:
        proc.wait()
        pytest.fail(f"server-everything ({mode}) did not start: {''.join(seen)}", pytrace=False)
    drain = threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True)
    drain.start()
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def everything_http_url() -> Iterator[str]:
    """server-everything in streamable HTTP mode on a free loopback port, for the whole session."""
    yield from _serve_everything("streamableHttp", "listening on port", "/mcp")


@pytest.fixture(scope="session")
def everything_sse_url() -> Iterator[str]:
    """server-everything in legacy HTTP+SSE mode on a free loopback port, for the whole session."""
    yield from _serve_everything("sse", "Server is running on port", "/sse")


@pytest.fixture
def everything_http(everything_http_url: str) -> dict[str, MCPServerConfig]:
    return load_mcp_json({"mcpServers": {"e": {"type": "http", "url": everything_http_url}}})


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> dict[str, MCPServerConfig]:
    """server-everything over stdio and over streamable HTTP (both named ``e``)."""
    name = "everything_stdio" if request.param == "stdio" else "everything_http"
    config: dict[str, MCPServerConfig] = request.getfixturevalue(name)
    return config


@pytest.fixture
async def manager_factory(errlog: Any) -> AsyncIterator[Any]:
    """Build managers that are closed after the test."""
    made: list[MCPManager] = []

    def make(configs: dict[str, MCPServerConfig], **kwargs: Any) -> MCPManager:
        kwargs.setdefault("errlog", errlog)
        manager = MCPManager(configs, **kwargs)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.aclose()
