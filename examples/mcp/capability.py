"""Give an agent the tools of an MCP server through the capability seam.

    python examples/mcp/capability.py

``MCPServers`` is a capability: each run gets the servers' tools (as listed last; a
server's ``list_changed`` reaches the next turn), the agent's own ``tools`` stay as they
are, and subagents inherit the servers as they inherit every capability.
"""

import asyncio
import os
import sys
from pathlib import Path

from ketch import Agent
from ketch import ToolResultMessage
from ketch.mcp import MCPServers
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
    async with MCPServers(config) as mcp:  # starts the servers and lists their tools
        agent = Agent(model, system_prompt="Use the clock tools for times.", capabilities=[mcp])
        print("MCP tools:", [t.name for t in mcp.tools], "- the agent's own:", agent.tools)
        result = await agent.prompt("What time is it in Tokyo?")
        for message in result.messages:
            if isinstance(message, ToolResultMessage):
                print("the tool said:", message.text)
        print(result.text)


if __name__ == "__main__":
    asyncio.run(main())
