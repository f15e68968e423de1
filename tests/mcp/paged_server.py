"""An MCP server whose tools, resources and prompts come in pages of two (three pages
each), for the client's pagination tests (run as a script over stdio)."""

from __future__ import annotations

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

NAMES = ["a", "b", "c", "d", "e", "f"]


def _page(cursor: str | None) -> tuple[list[str], str | None]:
    start = int(cursor) if cursor else 0
    end = start + 2
    return NAMES[start:end], (str(end) if end < len(NAMES) else None)


async def list_tools(ctx, params):  # type: ignore[no-untyped-def]
    names, after = _page(params.cursor if params else None)
    return types.ListToolsResult(
        tools=[types.Tool(name=f"tool_{n}", input_schema={"type": "object"}) for n in names], next_cursor=after
    )


async def list_resources(ctx, params):  # type: ignore[no-untyped-def]
    names, after = _page(params.cursor if params else None)
    return types.ListResourcesResult(
        resources=[types.Resource(uri=f"res://{n}", name=f"resource {n}") for n in names], next_cursor=after
    )


async def list_prompts(ctx, params):  # type: ignore[no-untyped-def]
    names, after = _page(params.cursor if params else None)
    return types.ListPromptsResult(prompts=[types.Prompt(name=f"prompt_{n}") for n in names], next_cursor=after)


server = Server("paged", on_list_tools=list_tools, on_list_resources=list_resources, on_list_prompts=list_prompts)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
