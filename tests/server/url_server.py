"""An MCP server (the ``mcp`` SDK, over stdio) for the server tests: its tool ``connect``
refuses its first call with ``-32042`` (URL elicitation required, the page to open is
https://acme.example/connect) and answers ``connected on call N`` after."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import ElicitRequestURLParams

server = MCPServer("linker")
calls = 0


@server.tool()
def connect() -> str:
    """Connect the account (the first call asks the user to open a page)."""
    global calls
    calls += 1
    if calls == 1:
        raise UrlElicitationRequiredError(
            [ElicitRequestURLParams(mode="url", message="Sign in to Acme", url="https://acme.example/connect", elicitation_id="e1")]
        )
    return f"connected on call {calls}"


if __name__ == "__main__":
    server.run()
