"""MCP client: the tools (and resources and prompts) of MCP servers as ketch tools.

Needs the ``mcp`` extra (``pip install 'ketch[mcp]'``, the official ``mcp`` SDK), which
is imported only when a server is started::

    from ketch import Agent
    from ketch.mcp import MCPServers, load_mcp_json

    async with MCPServers(load_mcp_json(".mcp.json"), roots=["."]) as mcp:
        agent = Agent("openai:gpt-4.1-mini", capabilities=[mcp])   # tools, list_changed refresh
        await agent.prompt("What time is it in Tokyo?")

(:meth:`MCPManager.attach` wires a manager into an agent with hooks instead: its tools
join ``agent.tools``, and the agent's model can serve sampling.)

Tools are named ``mcp__<server>__<tool>``. A tool annotated ``readOnlyHint`` is
``read_only`` (permission modes run it unasked) and runs in parallel; otherwise a tool
that may be destructive or is not idempotent is ``sequential``. See :class:`MCPManager`
for the lifecycle (lazy or eager start, timeouts, restart after a crash, cancellation,
progress, shutdown) and the server requests (elicitation, sampling, roots).

:class:`KetchMCPServer` serves ketch tools (and, with ``ketch_agent``, a whole agent)
to MCP clients; ``ketch mcp serve`` is the command built on it.
"""

from ._auth import LoginRequired
from ._auth import TokenFile
from ._auth import default_auth_dir
from ._capability import MCPServers
from ._client import LOG_LEVELS
from ._client import NO_ELICITATION
from ._client import ElicitationCallback
from ._client import ElicitationRequest
from ._client import ElicitationResponse
from ._client import MCPManager
from ._client import MCPTool
from ._client import ServerLog
from ._client import ServerState
from ._client import ServerStatus
from ._config import MCPConfigError
from ._config import MCPServerConfig
from ._config import load_mcp_json
from ._config import server_config
from ._login import login
from ._server import AGENT_TOOL
from ._server import KetchMCPServer
from ._tools import tool_name

__all__ = [
    "AGENT_TOOL",
    "LOG_LEVELS",
    "NO_ELICITATION",
    "ElicitationCallback",
    "ElicitationRequest",
    "ElicitationResponse",
    "KetchMCPServer",
    "LoginRequired",
    "MCPConfigError",
    "MCPManager",
    "MCPServerConfig",
    "MCPServers",
    "MCPTool",
    "ServerLog",
    "ServerState",
    "ServerStatus",
    "TokenFile",
    "default_auth_dir",
    "load_mcp_json",
    "login",
    "server_config",
    "tool_name",
]
