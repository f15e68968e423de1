"""ToolResult.usage: what a tool spent on models counts in the run's usage and is
itemised in RunSummary.tool_usage."""

from __future__ import annotations

from typing import Any

from ketch import Agent
from ketch.llm import Cost
from ketch.llm import Usage
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def _usage(tokens: int, cost: float) -> Usage:
    return Usage(input=tokens, total_tokens=tokens, cost=Cost(input=cost, total=cost))


async def test_tool_usage_is_added_to_the_run_and_itemised() -> None:
    async def spend(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        return ToolResult(content="ok", usage={f"main/{args['who']}": _usage(10, 0.5)})

    model = ScriptedModel(
        [
            reply(tool_call("spend", {"who": "a"}), tool_call("spend", {"who": "b"}), usage=_usage(1, 0.01)),
            reply(tool_call("spend", {"who": "a"}), usage=_usage(1, 0.01)),
            reply("done", usage=_usage(1, 0.01)),
        ]
    )
    agent = Agent(model, tools=[Tool("spend", execute=spend)])
    result = await agent.prompt("go")
    summary = result.summary
    assert summary.usage.input == 33
    assert round(summary.cost, 6) == 1.53
    assert {k: (u.input, u.cost.total) for k, u in summary.tool_usage.items()} == {
        "main/a": (20, 1.0),
        "main/b": (10, 0.5),
    }
    assert agent.state.usage.input == 33


async def test_tool_usage_counts_towards_the_budget() -> None:
    async def spend(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        return ToolResult(content="ok", usage={"main/x#1": _usage(10, 2.0)})

    model = ScriptedModel([reply(tool_call("spend", {})), "never asked"])
    result = await Agent(model, tools=[Tool("spend", execute=spend)], max_budget_usd=1.0).prompt("go")
    assert result.end_reason == "max_budget"
    assert model.remaining == 1


async def test_tool_usage_survives_an_after_tool_call_override() -> None:
    from ketch.loop import AfterToolCallResult

    async def spend(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        return ToolResult(content="secret", usage={"main/x#1": _usage(10, 0.5)})

    def redact(info: Any, result: ToolResult) -> AfterToolCallResult:
        return AfterToolCallResult(content=[])

    model = ScriptedModel([reply(tool_call("spend", {})), "done"])
    result = await Agent(model, tools=[Tool("spend", execute=spend)], after_tool_call=redact).prompt("go")
    assert list(result.summary.tool_usage) == ["main/x#1"]
    assert round(result.cost, 6) == 0.5
