"""Guards: repeated identical tool calls, stop_when predicates that raise, and reporting
a transcript's tool-call problems without repairing them."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import AssistantMessage
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import Tool
from ketch.loop import TurnInfo
from ketch.loop import validate_message_sequence
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def lookup(ran: list[str]) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        ran.append(args["q"])
        return f"found {args['q']}"

    return Tool("lookup", "", SCHEMA, run)


def results(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [(m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)]


async def test_a_call_repeating_the_same_arguments_too_often_is_not_run() -> None:
    ran: list[str] = []
    model = ScriptedModel([
        reply(tool_call("lookup", {"q": "x"}, id="1")),
        reply(tool_call("lookup", {"q": "x"}, id="2")),
        reply(tool_call("lookup", {"q": "y"}, id="3")),
        reply(tool_call("lookup", {"q": "x"}, id="4")),
        "done",
    ])
    agent = Agent(model, tools=[lookup(ran)], max_repeated_tool_calls=2)
    await agent.prompt("go")
    assert ran == ["x", "x", "y"]
    assert results(agent.messages)[-1] == (
        "4",
        'Tool call not run: "lookup" was already called 2 time(s) with these exact arguments in this run. '
        "Use the earlier results, or change the arguments.",
        True,
    )


async def test_without_the_setting_repeats_run() -> None:
    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("lookup", {"q": "x"})) for _ in range(4)] + ["done"])
    await Agent(model, tools=[lookup(ran)]).prompt("go")
    assert ran == ["x"] * 4


async def test_a_stop_when_predicate_that_raises_means_do_not_stop(caplog: pytest.LogCaptureFixture) -> None:
    def broken(info: TurnInfo) -> bool:
        raise RuntimeError("predicate bug")

    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("lookup", {"q": "x"})), "done"])
    with caplog.at_level(logging.ERROR, logger="ketch.loop"):
        result = await Agent(model, tools=[lookup(ran)], stop_when=[broken]).prompt("go")
    assert result.end_reason == "stop"
    assert result.text == "done"
    assert any("stop_when predicate" in r.getMessage() and "not stopping" in r.getMessage() for r in caplog.records)


def test_validate_message_sequence_reports_without_repairing() -> None:
    calls = AssistantMessage(content=[ToolCall(id="a", name="read"), ToolCall(id="b", name="ls")])
    messages = [
        UserMessage(content="go"),
        calls,
        ToolResultMessage(tool_call_id="a", tool_name="read", content=[TextContent(text="ok")]),
        ToolResultMessage(tool_call_id="a", tool_name="read", content=[TextContent(text="again")]),
        ToolResultMessage(tool_call_id="zz", tool_name="x"),
        UserMessage(content="next"),
    ]
    before = list(messages)
    assert validate_message_sequence(messages) == [
        "message 3: a second result for tool call 'a'",
        "message 4: tool result 'zz' answers no call of the assistant message before it",
        "message 1: tool call 'b' (ls) has no result",
    ]
    assert messages == before
    assert validate_message_sequence([*messages[:3], ToolResultMessage(tool_call_id="b", tool_name="ls")]) == []


async def test_build_llm_messages_and_tools_are_what_the_next_request_sends() -> None:
    from ketch import message_to_dict

    transcript: list[Any] = [
        UserMessage(content="go"),
        AssistantMessage(content=[TextContent(text="half"), ToolCall(id="c", name="lookup")], stop_reason="aborted"),
        UserMessage(content="again"),
        AssistantMessage(content=[ToolCall(id="d", name="lookup", args={"q": "z"})], stop_reason="tool_use"),
        UserMessage(content="and?"),
    ]
    model = ScriptedModel(["ok"])
    agent = Agent(model, tools=[lookup([])], messages=transcript)
    built = await agent.build_llm_messages()
    tools = agent.build_llm_tools()
    await agent.continue_loop()
    sent = model.requests[0]
    assert [message_to_dict(m) for m in built] == [message_to_dict(m) for m in sent.messages]
    assert tools == sent.tools
    assert [m.role for m in built] == ["user", "assistant", "user", "user", "assistant", "tool_result", "user"]
