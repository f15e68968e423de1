"""Give an agent the tools of an MCP server.

    python examples/mcp/use_a_server.py

Needs the ``mcp`` extra (``pip install -e '.[mcp]'``). The configuration has the common
``.mcp.json`` shape (``load_mcp_json`` also reads a file); here it starts
examples/mcp/clock_server.py over stdio with this Python. ``MCPManager`` starts servers
(on first use by default), turns their tools into ketch tools and stops them when the
``async with`` block ends.
"""

import asyncio
import os
import sys
from pathlib import Path

from ketch import Agent
from ketch import ToolResultMessage
from ketch.mcp import MCPManager
from ketch.mcp import load_mcp_json
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

SERVER = Path(__file__).with_name("clock_server.py")


async def main() -> None:
    config = load_mcp_json({"mcpServers": {"clock": {"command": sys.executable, "args": [str(SERVER)]}}})
    model = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel([
        reply(tool_call("mcp__clock__now", {"timezone": "Asia/Tokyo"})),
        "I looked it up on the clock server.",
    ])
    async with MCPManager(config, startup="eager") as mcp:
        agent = Agent(model, system_prompt="Use the clock tools for times.")
        await mcp.attach(agent)  # adds the servers' tools; a server's list_changed refreshes them
        print("tools:", [t.name for t in agent.tools])
        result = await agent.prompt("What time is it in Tokyo?")
        for message in result.messages:
            if isinstance(message, ToolResultMessage):
                print("the tool said:", message.text)
        print(result.text)
        for status in mcp.status():
            print(f"server {status.name}: {status.state}, tools {list(status.tools)}")


if __name__ == "__main__":
    asyncio.run(main())
