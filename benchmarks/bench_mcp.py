"""MCP client costs: time to the first tool list of a stdio server, and the per-call
overhead of an MCP tool against a native tool doing the same work.

- first tool list: a fresh :class:`~ketch.mcp.MCPManager` for ``mcp-server-time``
  (``python -m mcp_server_time``) until ``tools()`` returns: process start, Python
  imports, the MCP handshake and ``tools/list`` (median of 5).
- per call: ``echo`` of server-everything (over stdio and streamable HTTP on loopback)
  against a native ``@tool`` echo, each called through ``Tool.execute`` (median of 200
  after 10 warm-up calls). The loop's own per-call work is the same for both.

Run: ``python benchmarks/bench_mcp.py`` (prints a Markdown table). server-everything is
taken from ``.cache/npm`` (scripts/test.sh installs it); nothing here is a test.
"""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ketch.llm import AbortSignal
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.mcp import MCPManager
from ketch.mcp import load_mcp_json
from ketch.tools import tool

ROOT = Path(__file__).resolve().parent.parent
EVERYTHING = ROOT / ".cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
LOOPBACK = ROOT / "tests/mcp/loopback.cjs"
STARTS = 5
CALLS = 200
WARMUP = 10
DEVNULL = open(os.devnull, "w")  # the servers' stderr, for the whole run


@tool
def echo(message: str) -> str:
    """Echo the message."""
    return f"Echo: {message}"


async def first_list_ms() -> float:
    configs = load_mcp_json({"mcpServers": {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}})
    times = []
    for _ in range(STARTS):
        start = time.perf_counter()
        manager = MCPManager(configs, errlog=DEVNULL)
        tools = await manager.tools()
        times.append(time.perf_counter() - start)
        assert len(tools) == 2, tools
        await manager.aclose()
    return statistics.median(times) * 1000


async def per_call_ms(t: Tool) -> float:
    ctx: ToolContext[Any] = ToolContext(call_id="c", tool_name=t.name, signal=AbortSignal())
    times = []
    for i in range(WARMUP + CALLS):
        start = time.perf_counter()
        result = await t.execute({"message": "hi"}, ctx)
        elapsed = time.perf_counter() - start
        text = result if isinstance(result, str) else result.text
        assert text == "Echo: hi", text
        if i >= WARMUP:
            times.append(elapsed)
    return statistics.median(times) * 1000


async def mcp_echo_ms(configs: Any) -> float:
    async with MCPManager(configs, errlog=DEVNULL) as manager:
        (t,) = [t for t in await manager.tools() if t.name == "mcp__e__echo"]
        return await per_call_ms(t)


def _http_server() -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["node", "--require", str(LOOPBACK), str(EVERYTHING), "streamableHttp"],
        env={**os.environ, "PORT": str(port)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on port" in line:
            break
    return proc, f"http://127.0.0.1:{port}/mcp"


async def main() -> None:
    rows = [("native `@tool` echo, per call", await per_call_ms(echo))]
    rows.insert(0, ("mcp-server-time (stdio): start to first tool list", await first_list_ms()))
    if EVERYTHING.is_file():
        stdio = load_mcp_json({"mcpServers": {"e": {"command": "node", "args": [str(EVERYTHING), "stdio"]}}})
        rows.append(("server-everything `echo` over stdio, per call", await mcp_echo_ms(stdio)))
        proc, url = _http_server()
        try:
            http = load_mcp_json({"mcpServers": {"e": {"type": "http", "url": url}}})
            rows.append(("server-everything `echo` over streamable HTTP, per call", await mcp_echo_ms(http)))
        finally:
            proc.terminate()
            proc.wait()
    else:
        print(f"(server-everything not installed at {EVERYTHING}: per-call MCP rows left out)", file=sys.stderr)
    print(f"Python {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}\n")
    print("| measure | median (ms) |\n| --- | ---: |")
    for name, ms in rows:
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
