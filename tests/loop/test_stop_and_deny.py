"""The stop_sequence end reason, and decisions that deny a call and stop the run (denied)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ketch import Agent
from ketch import approve
from ketch import deny
from ketch.llm import ToolResultMessage
from ketch.loop import BeforeToolCallResult
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import run_loop
from ketch.permissions import PermissionDeny
from ketch.permissions import PermissionEngine
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect

SCHEMA = {"type": "object", "properties": {}}


def recorder(ran: list[str], name: str = "t", **kw: Any) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        ran.append(ctx.call_id)
        return "ran"

    return Tool(name, "", SCHEMA, run, **kw)


def results(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [(m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)]


async def test_a_response_ended_by_a_stop_sequence_ends_the_run_with_stop_sequence() -> None:
    model = ScriptedModel([reply("partial answer", stop_reason="stop_sequence")])
    agent = Agent(model)
    result = await agent.prompt("go")
    assert result.last_assistant is not None and result.last_assistant.stop_reason == "stop_sequence"
    assert result.end_reason == "stop_sequence" and result.summary.error is None
    assert result.raise_for_error() is result  # a requested ending, not an error
    assert agent.phase.kind == "done"


async def test_stop_sequences_reach_the_request_options() -> None:
    from ketch.llm import StreamOptions

    model = ScriptedModel(["x"])
    await Agent(model, options=StreamOptions(stop_sequences=["END"])).prompt("go")
    assert model.requests[0].options.stop_sequences == ["END"]


async def test_a_block_with_stop_ends_the_run_with_denied_and_takes_no_queued_message() -> None:
    ran: list[str] = []

    def gate(call: ToolCallInfo) -> BeforeToolCallResult | None:
        return BeforeToolCallResult.blocked("not allowed here", stop=True) if call.tool_call.id == "a" else None

    model = ScriptedModel([reply(tool_call("t", id="a"), tool_call("t", id="b")), "never"])
    agent = Agent(model, tools=[recorder(ran)], before_tool_call=gate)
    agent.follow_up("later")
    result = await agent.prompt("go")
    assert ran == ["b"]
    assert results(result.messages) == [("a", "not allowed here", True), ("b", "ran", False)]
    assert (result.end_reason, result.summary.error) == ("denied", "not allowed here")
    assert len(model.requests) == 1
    assert [m.content[0].text for m in agent.follow_ups.peek()] == ["later"]  # type: ignore[union-attr,index]


async def test_a_permission_callback_deny_with_stop_ends_the_run_with_denied(tmp_path: Path) -> None:
    async def can_use_tool(call: ToolCallInfo) -> PermissionDeny:
        return PermissionDeny("stop everything", stop=True)

    engine = PermissionEngine("default", can_use_tool=can_use_tool, root=tmp_path)
    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("t", id="a")), "never"])
    result = await Agent(model, tools=[recorder(ran)], before_tool_call=engine.before_tool_call).prompt("go")
    assert ran == []
    assert (result.end_reason, result.summary.error) == ("denied", "stop everything")


async def test_a_paused_call_denied_with_stop_ends_the_resumed_run_with_denied() -> None:
    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("t", id="a"), tool_call("safe", id="b")), "never"])
    agent = Agent(model, tools=[recorder(ran, requires_approval=True), recorder(ran, "safe")])
    paused = await agent.prompt("go")
    assert paused.end_reason == "approval_required" and paused.state is not None
    result = await agent.resume(paused.state, decisions={"a": deny("no, and stop", stop=True)})
    assert (result.end_reason, result.summary.error) == ("denied", "Permission denied by the user. Reason: no, and stop")
    assert ran == ["b"]
    assert len(model.requests) == 1


async def test_a_plain_deny_lets_the_run_go_on() -> None:
    model = ScriptedModel([reply(tool_call("t", id="a")), "fine"])
    agent = Agent(model, tools=[recorder([], requires_approval=True)])
    paused = await agent.prompt("go")
    assert paused.state is not None
    result = await agent.resume(paused.state, decisions={"a": deny("no")})
    assert (result.end_reason, result.text) == ("stop", "fine")
    assert approve() is not None


async def test_denied_in_the_loop_event_order() -> None:
    def gate(call: ToolCallInfo) -> BeforeToolCallResult:
        return BeforeToolCallResult.blocked("no", stop=True)

    model = ScriptedModel([reply(tool_call("t", id="a")), "never"])
    stream = run_loop("go", Conversation(tools=[recorder([])]), LoopConfig(model=model, before_tool_call=gate))
    events = [e.type for e in await collect(stream) if e.type != "message_update"]
    assert events[-6:] == [
        "tool_execution_start", "tool_execution_end", "message_start", "message_end", "turn_end", "agent_end",
    ]
