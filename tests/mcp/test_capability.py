"""MCP servers through the capability seam: ``Agent(model, capabilities=[MCPServers(...)])``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.mcp import MCPManager
from ketch.mcp import MCPServers
from ketch.mcp import load_mcp_json
from ketch.subagents import Subagents
from ketch.subagents import SubagentSpec
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

CHANGING = Path(__file__).with_name("changing_server.py")


def texts(messages: list[Any]) -> list[list[str]]:
    return [[b.text for b in m.content if isinstance(b, TextContent)] for m in messages if isinstance(m, ToolResultMessage)]


def changing(errlog: Any) -> MCPServers:
    config = load_mcp_json({"mcpServers": {"c": {"command": sys.executable, "args": [str(CHANGING)]}}})
    return MCPServers(config, protocol="legacy", errlog=errlog)


async def test_the_servers_tools_come_with_the_capability_and_a_change_reaches_the_next_turn(errlog: Any) -> None:
    async with changing(errlog) as mcp:
        model = ScriptedModel(
            [reply(tool_call("mcp__c__add_tool", {"name": "extra"})), reply(tool_call("mcp__c__extra")), "done"]
        )
        agent: Agent[None] = Agent(model, capabilities=[mcp])
        await agent.prompt("go")
        assert texts(agent.messages) == [["added extra"], ["I am extra"]]
        first, second = (r.tool_names for r in model.requests[:2])
        assert "mcp__c__extra" not in first and "mcp__c__add_tool" in first
        assert second == [*first[:4], "mcp__c__extra", *first[4:]]  # in the server's order
        assert agent.tools == []  # the agent's own tools are never changed
        # the next run starts with the new list
        model.add(reply(tool_call("mcp__c__extra")))
        model.add("again")
        await agent.prompt("again")
        assert "mcp__c__extra" in model.requests[-1].tool_names
        assert texts(agent.messages)[-1] == ["I am extra"]


async def test_a_subagent_inherits_the_servers(errlog: Any) -> None:
    async with changing(errlog) as mcp:
        child = ScriptedModel([reply(tool_call("mcp__c__add_tool", {"name": "kid"})), "child done"])
        parent_model = ScriptedModel(
            [reply(tool_call("subagent", {"agent": "helper", "task": "add a tool"})), "parent done"]
        )
        agent: Agent[None] = Agent(parent_model, capabilities=[mcp])
        Subagents([SubagentSpec("helper", "Adds tools", model=child)]).attach(agent)
        await agent.prompt("go")
        assert "mcp__c__add_tool" in child.requests[0].tool_names
        assert texts(agent.messages) == [["child done"]]
        # the child's call reached the parent's server: the tool it added is there
        assert (await mcp.manager.call("c", "kid")).text == "I am kid"


async def test_a_manager_given_takes_no_options_and_stays_open(errlog: Any) -> None:
    manager = MCPManager(load_mcp_json({"mcpServers": {"c": {"command": sys.executable, "args": [str(CHANGING)]}}}))
    with pytest.raises(TypeError, match=r"^MCPServers: options \(errlog\) go to the MCPManager given, not here$"):
        MCPServers(manager, errlog=errlog)
    try:
        mcp = await MCPServers(manager).start()
        assert [t.name for t in mcp.tools][:2] == ["mcp__c__add_tool", "mcp__c__wait"]
    finally:
        await manager.aclose()
