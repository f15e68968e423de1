"""ketch as an MCP server: any MCP client can use ketch's tools (and a whole agent).

    python examples/mcp/ketch_as_server.py

Needs the ``mcp`` extra. ``ketch mcp serve`` serves the built-in tools of a workspace
(read, write, edit, bash, grep, find, ls) and a ``ketch_agent`` tool that runs a whole
ketch agent on a task. Every call goes through ketch's permission engine: in the
``default`` mode reads run, and a write, which would need someone to approve it, is
refused with a message saying how to allow it. This client is the official ``mcp``
SDK's; Claude Code, editors and other agents connect the same way.
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from mcp.client.stdio import stdio_client

from mcp import ClientSession
from mcp import StdioServerParameters


def text_of(result: object) -> str:
    return "".join(getattr(block, "text", "") for block in getattr(result, "content", []))


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "notes.txt").write_text("buy milk\ncall Ada\n")
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "ketch", "mcp", "serve", "--no-agent", "--tools", "read,write,ls", "--cwd", folder],
        )
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            for t in listed.tools:
                print(f"{t.name}: read-only={t.annotations.read_only_hint if t.annotations else None}")
            result = await session.call_tool("read", {"path": "notes.txt"})
            print("read:", text_of(result).replace("\t", " "))
            result = await session.call_tool("write", {"path": "notes.txt", "content": "gone"})
            print(f"write refused={result.is_error}: {text_of(result)}")


if __name__ == "__main__":
    asyncio.run(main())
