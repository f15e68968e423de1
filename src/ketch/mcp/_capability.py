"""MCP servers as a capability: ``Agent(model, capabilities=[MCPServers(...)])``."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ketch.llm import Message
from ketch.loop import Capability
from ketch.loop import Contribution
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolResult

from ._client import MCPManager
from ._config import MCPServerConfig
from ._values import MCPTool

__all__ = ["MCPServers"]


class MCPServers(Capability):
    """The tools of MCP servers, given to an agent as a capability::

        async with MCPServers(load_mcp_json(".mcp.json"), roots=["."]) as mcp:
            agent = Agent("openai:gpt-4.1-mini", capabilities=[mcp])
            await agent.prompt("What time is it in Tokyo?")

    ``servers`` is an :class:`MCPManager` (its owner closes it) or the configurations an
    :class:`MCPManager` is built from with ``options`` (its keyword arguments; closed by
    :meth:`aclose` or ``async with``). :meth:`start` (``async with`` calls it) starts the
    servers and lists their tools; each run is given the tools listed last. When a server
    announces that its tool list changed, the list is read again after the call that
    was running and the run's next turn has the new tools (subagents that inherit the
    capability share its servers). The agent's own ``tools`` are never changed.

    Sampling through the agent's model (``sample_with_agent``) needs the agent, which a
    capability does not see: use :meth:`MCPManager.attach` for it, or ``sampling_model``.
    """

    name = "mcp"

    def __init__(
        self, servers: MCPManager | Mapping[str, MCPServerConfig] | Iterable[MCPServerConfig], **options: Any
    ) -> None:
        if isinstance(servers, MCPManager):
            if options:
                raise TypeError(f"MCPServers: options ({', '.join(sorted(options))}) go to the MCPManager given, not here")
            self.manager = servers
        else:
            self.manager = MCPManager(servers, **options)
        self._tools: list[Tool] = []
        self._fresh = False  # the list changed since the runs now going started

    async def start(self) -> MCPServers:
        """Start the servers and list their tools (those that fail are left out: see
        ``manager.status()``); returns self."""
        self._tools = await self.manager.tools()
        return self

    @property
    def tools(self) -> list[Tool]:
        """The MCP tools the next run is given (as listed last)."""
        return list(self._tools)

    def contribute(self) -> Contribution:
        self._fresh = False
        return Contribution(tools=tuple(self._tools), after_tool_call=self._after_call, tools_view=self._view)

    async def _after_call(self, info: ToolCallInfo, result: ToolResult) -> None:
        if self.manager.changed:
            self._tools = await self.manager.tools()
            self._fresh = True

    def _view(self, tools: Sequence[Tool], messages: Sequence[Message]) -> Sequence[Tool]:
        if not self._fresh:
            return tools
        ours = set(self.manager.servers)
        kept = [t for t in tools if not (isinstance(t, MCPTool) and t.server in ours)]
        return [*kept, *self._tools]

    async def aclose(self) -> None:
        """Stop every server (see :meth:`MCPManager.aclose`)."""
        await self.manager.aclose()

    async def __aenter__(self) -> MCPServers:
        if self.manager.startup == "eager":
            await self.manager.start()
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
