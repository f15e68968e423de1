"""The permission engine pauses a run for approval when nobody can approve it now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch import RunState
from ketch import Tool
from ketch import approve
from ketch import deny
from ketch.llm import ToolResultMessage
from ketch.permissions import PermissionEngine
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


def agent_with(engine: PermissionEngine, ran: list[str], *replies: Any) -> Agent[None]:
    async def write(args: dict[str, Any], ctx: Any) -> str:
        ran.append(args["path"])
        return "written"

    return Agent(
        ScriptedModel(list(replies)),
        tools=[Tool("write", "", SCHEMA, write)],
        before_tool_call=engine.before_tool_call,
    )


async def test_ask_without_an_approver_pauses_and_approve_runs_the_call(tmp_path: Path) -> None:
    engine = PermissionEngine("default", root=tmp_path, no_approver="pause")
    ran: list[str] = []
    agent = agent_with(engine, ran, reply(tool_call("write", {"path": "a.txt"}, id="w1")), "done")
    paused = await agent.prompt("go")
    assert paused.end_reason == "approval_required"
    assert paused.state is not None
    [pending] = paused.state.pending
    assert (pending.tool_call_id, pending.needs_decision) == ("w1", True)
    assert pending.reason == "write needs approval (mode default)"
    assert ran == []
    assert [d.outcome for d in engine.decisions] == ["approval_required"]
    # Another process: a fresh agent and engine, the state from JSON.
    engine2 = PermissionEngine("default", root=tmp_path, no_approver="pause")
    again = agent_with(engine2, ran, "done")
    result = await again.resume(RunState.from_json(paused.state.to_json()), decisions={"w1": approve()})
    assert result.end_reason == "stop"
    assert ran == ["a.txt"]


async def test_deny_rules_still_win_on_resume_and_a_denial_reaches_the_model(tmp_path: Path) -> None:
    engine = PermissionEngine("default", root=tmp_path, no_approver="pause")
    ran: list[str] = []
    agent = agent_with(engine, ran, reply(tool_call("write", {"path": "a.txt"}, id="w1")), "done")
    paused = await agent.prompt("go")
    assert paused.state is not None
    result = await agent.resume(paused.state, decisions={"w1": deny("use the scratch dir")})
    results = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert [(r.text, r.is_error) for r in results] == [
        ("Permission denied by the user. Reason: use the scratch dir", True)
    ]
    assert result.end_reason == "stop" and ran == []
    engine.deny.extend(PermissionEngine(deny=["write"]).deny)
    agent2 = agent_with(engine, ran, reply(tool_call("write", {"path": "b.txt"}, id="w2")), "done")
    result2 = await agent2.prompt("go")
    assert result2.end_reason == "stop" and ran == []


def test_no_approver_names_the_bad_value() -> None:
    with pytest.raises(ValueError) as bad:
        PermissionEngine("default", no_approver="ask")  # type: ignore[arg-type]
    assert str(bad.value) == "no_approver must be 'deny' or 'pause', got 'ask'"
