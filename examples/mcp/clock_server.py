"""A tiny MCP server (the official ``mcp`` SDK) that examples/mcp/use_a_server.py starts.

    python examples/mcp/clock_server.py      # speaks MCP on stdin/stdout

Any MCP server works the same way: ketch starts it from a ``.mcp.json`` entry
(``command`` + ``args``) and offers its tools to the model as ``mcp__<server>__<tool>``.
"""

from datetime import datetime
from zoneinfo import ZoneInfo

from mcp.server.mcpserver import MCPServer

server = MCPServer("clock")


@server.tool()
def now(timezone: str = "UTC") -> str:
    """The current date and time in a time zone.

    Args:
        timezone: An IANA time zone name, e.g. "Asia/Tokyo".
    """
    return datetime.now(ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M %Z")


if __name__ == "__main__":
    server.run("stdio")
