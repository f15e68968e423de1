"""A small MCP server for the client tests (run as a script over stdio).

``add_tool(name)`` registers a tool ``name`` (it answers its own name) and says the tool
list changed: ``notifications/tools/list_changed`` to a 2025 client, an event on the
``subscriptions/listen`` streams of a 2026-07-28 one. ``touch(uri)`` says the resource
``uri`` changed the same two ways (``res://counter`` is a resource). ``wait()`` reports progress 0 (the call has arrived), then waits until cancelled and counts the
cancellation; ``cancellations()`` answers that count once it is at least one (or 0 after
10 s), so a test can ask whether the server saw ``notifications/cancelled`` without
sleeping.
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver import MCPServer
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

server = MCPServer("changing")
cancelled = 0
seen = anyio.Event()


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool called ``name``."""

    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"The tool {name}.")
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def wait(ctx: Context) -> str:
    """Report progress 0, then wait until cancelled."""
    global cancelled
    await ctx.report_progress(0)
    try:
        await anyio.sleep_forever()
    finally:
        cancelled += 1
        seen.set()
    return "never"


@server.tool()
async def cancellations() -> int:
    """How many wait() calls were cancelled (waits up to 10 s for the first)."""
    with anyio.move_on_after(10):
        await seen.wait()
    return cancelled


@server.resource("res://counter")
def counter() -> str:
    """A resource that changes when touched."""
    return "counter"


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Say that the resource ``uri`` changed."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await ctx.notify_resource_updated(uri)
    else:
        await ctx.session.send_resource_updated(uri)
    return f"touched {uri}"


if __name__ == "__main__":
    server.run("stdio")
