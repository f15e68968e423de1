"""The cost of ``[sandbox.network]`` (a :class:`~ketch.sandbox.NetworkPolicy`): side by side,
no assertion.

1. Per request: the median time of a plain-HTTP GET from inside a sandboxed command to a
   loopback server on the host, with the host's network (``network=True``, direct) and
   through ketch's proxy (``NetworkPolicy(allow=["localhost"])``: the forwarder inside, the
   Unix socket, the proxy's checks and its own connection). Timed inside the command, so
   the command's start is left out; each request on a new connection.
2. Per bash call: the median wall time of ``true`` through the bash tool with no network
   and with the policy (the proxy's socket, the forwarder's start).

Run: ``python benchmarks/bench_network.py [--requests N] [--calls N]`` (prints a Markdown
table and the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.sandbox import NetworkPolicy
from ketch.sandbox import default_sandbox
from ketch.sandbox import sandbox_unavailable_reason
from ketch.tools import BashTool
from ketch.tools import Workspace

CLIENT = """
import sys, time, urllib.request
url, n, direct = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "direct"
opener = urllib.request.build_opener(urllib.request.ProxyHandler({})) if direct else urllib.request.build_opener()
times = []
for _ in range(n + 3):
    t = time.perf_counter()
    opener.open(url).read()
    times.append(time.perf_counter() - t)
print(" ".join(f"{x:.6f}" for x in times[3:]))
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


async def _bash(tool: BashTool, command: str) -> str:
    ctx: ToolContext[Any] = ToolContext(call_id="b", tool_name="bash", signal=AbortSignal())
    result = await tool.execute({"command": command}, ctx)
    return result.text


def _tool(root: Path, network: bool | NetworkPolicy) -> BashTool:
    return BashTool(Workspace(root), sandbox=default_sandbox(), network=network, env={"PATH": "/usr/bin:/bin"})


async def main(requests: int, calls: int) -> None:
    if default_sandbox() is None:
        sys.exit(f"no sandbox: {sandbox_unavailable_reason()}")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "client.py").write_text(CLIENT)
        policy = NetworkPolicy(allow=["localhost"])
        direct = await _bash(_tool(root, True), f"python3 -I client.py http://127.0.0.1:{port}/ {requests} direct")
        proxied = await _bash(_tool(root, policy), f"python3 -I client.py http://localhost:{port}/ {requests} proxy")
        per_request = {
            "direct (network = true)": [float(x) for x in direct.split()],
            "through the proxy ([sandbox.network])": [float(x) for x in proxied.split()],
        }
        per_call: dict[str, list[float]] = {"no network": [], "[sandbox.network] (proxy + forwarder)": []}
        tools = {"no network": _tool(root, False), "[sandbox.network] (proxy + forwarder)": _tool(root, policy)}
        for _ in range(calls):
            for name, tool in tools.items():  # taking turns: a change in load touches both
                start = time.perf_counter()
                await _bash(tool, "true")
                per_call[name].append(time.perf_counter() - start)
    server.shutdown()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, load {os.getloadavg()[0]:.2f}")
    print(f"\n| per request (plain-HTTP GET, loopback, {requests} runs) | median ms | p90 ms |\n|---|---:|---:|")
    for name, times in per_request.items():
        times.sort()
        print(f"| {name} | {statistics.median(times) * 1000:.3f} | {times[int(len(times) * 0.9)] * 1000:.3f} |")
    print(f"\n| per bash call (`true`, {calls} runs) | median ms |\n|---|---:|")
    for name, times in per_call.items():
        print(f"| {name} | {statistics.median(times) * 1000:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20)
    options = parser.parse_args()
    asyncio.run(main(options.requests, options.calls))
