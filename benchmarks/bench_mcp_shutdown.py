"""How long closing an MCP stdio server takes when it is still busy with a call it was
told to cancel and ignores (``tests/mcp/stubborn_server.py``: it ignores the
cancellation, SIGTERM and the end of its stdin; only SIGKILL ends it), against an idle
server (the same script, no call made).

Each sample: a fresh :class:`~ketch.mcp.MCPManager`, its tool list, then (busy) one call
of ``slow`` that times out after 0.2 s, then ``aclose()``, which is what is timed
(median of 5). The command (``ketch run`` after Ctrl-C) exits after this close.

Run: ``python benchmarks/bench_mcp_shutdown.py`` (prints a Markdown table); nothing here
is a test.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ketch.mcp import MCPManager
from ketch.mcp import load_mcp_json

ROOT = Path(__file__).resolve().parent.parent
STUBBORN = ROOT / "tests/mcp/stubborn_server.py"
SAMPLES = 5
DEVNULL = open(os.devnull, "w")  # the server's stderr, for the whole run


async def close_seconds(busy: bool) -> float:
    times = []
    devnull = DEVNULL
    with tempfile.TemporaryDirectory() as folder:
        log = str(Path(folder) / "server.log")
        configs = load_mcp_json({"mcpServers": {"s": {"command": sys.executable, "args": [str(STUBBORN), log]}}})
        for _ in range(SAMPLES):
            manager = MCPManager(configs, errlog=devnull, call_timeout=0.2)
            await manager.tools()
            if busy:
                result = await manager.call("s", "slow")
                assert result.is_error, result
            start = time.perf_counter()
            await manager.aclose()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main() -> None:
    busy = await close_seconds(True)
    idle = await close_seconds(False)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}\n")
    print("| close of a stdio MCP server | median s |")
    print("|---|---|")
    print(f"| busy with an ignored, cancelled call (SIGTERM ignored too) | {busy:.2f} |")
    print(f"| idle (its stdin closed; it ignores that and SIGTERM) | {idle:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
