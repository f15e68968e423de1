"""Pausing a run for approval and resuming it: events, transcript, decisions, state JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch import RunState
from ketch import approve
from ketch import deny
from ketch import edit
from ketch.llm import ToolResultMessage
from ketch.loop import BeforeToolCallResult
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import resume_loop
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect

GOLDEN = Path(__file__).parent / "golden"
SCHEMA = {"type": "object", "properties": {"k": {"type": "string"}}}


class Log:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def tool(self, name: str, **kw: Any) -> Tool:
        async def run(args: dict[str, Any], ctx: Any) -> str:
            self.ran.append(f"{name}:{args.get('k', '')}")
            return f"{name} {args.get('k', '')} ok"

        return Tool(name, "", SCHEMA, run, **kw)


def results_of(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [(m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)]


def kinds(events: list[Any]) -> list[str]:
    out = []
    for e in events:
        if e.type == "message_update":
            continue
        if e.type in ("message_start", "message_end"):
            out.append(f"{e.type}({e.message.role})")
        elif e.type in ("tool_execution_start", "tool_execution_end", "approval_required"):
            out.append(f"{e.type}({e.tool_call_id})")
        else:
            out.append(e.type)
    return out


def two_call_model(*after: str) -> ScriptedModel:
    return ScriptedModel(
        [reply(tool_call("safe", {"k": "1"}, id="c1"), tool_call("danger", {"k": "2"}, id="c2")), *after]
    )


async def test_a_tool_requiring_approval_pauses_the_run_with_exact_events() -> None:
    log = Log()
    tools = [log.tool("safe"), log.tool("danger", requires_approval=True)]
    conversation = Conversation(tools=tools)
    stream = run_loop("go", conversation, LoopConfig(model=two_call_model("done")))
    events = await collect(stream)
    result = await stream.result()
    assert kinds(events) == [
        "agent_start", "turn_start", "message_start(user)", "message_end(user)",
        "message_start(assistant)", "message_end(assistant)",
        "tool_execution_start(c1)", "tool_execution_start(c2)",
        "tool_execution_end(c1)", "approval_required(c2)",
        "agent_end",
    ]
    assert result.end_reason == "approval_required"
    assert log.ran == ["safe:1"]
    state = result.state
    assert state is not None
    assert [(p.tool_call_id, p.needs_decision) for p in state.pending] == [("c2", True)]
    assert results_of(state.completed) == [("c1", "safe 1 ok", False)]
    # Nothing of the paused turn's results is in the transcript yet.
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
    assert state.run_messages == 2
    assert state.turn == 1 and state.turns == 1


async def test_resume_with_approve_runs_the_call_and_finishes_like_an_unpaused_run() -> None:
    log = Log()
    tools = [log.tool("safe"), log.tool("danger", requires_approval=True)]
    model = two_call_model("done")
    conversation = Conversation(tools=tools)
    cfg = LoopConfig(model=model)
    paused = await run_loop("go", conversation, cfg).result()
    assert paused.state is not None
    stream = resume_loop(paused.state, conversation, cfg, decisions={"c2": approve()})
    events = await collect(stream)
    result = await stream.result()
    assert kinds(events) == [
        "agent_start", "turn_start",
        "tool_execution_start(c2)", "tool_execution_end(c2)",
        "message_start(tool_result)", "message_end(tool_result)",
        "message_start(tool_result)", "message_end(tool_result)",
        "turn_end", "turn_start",
        "message_start(assistant)", "message_end(assistant)", "turn_end", "agent_end",
    ]
    assert events[1].turn == 1
    assert result.end_reason == "stop"
    assert result.text == "done"
    assert log.ran == ["safe:1", "danger:2"]
    assert results_of(conversation.messages) == [("c1", "safe 1 ok", False), ("c2", "danger 2 ok", False)]
    # The result covers the whole run, as if it never paused.
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "tool_result", "assistant"]
    assert result.summary.turns == 2
    assert result.summary.tool_calls == 2
    # The model's second request saw both results in call order.
    second = model.requests[1].messages
    assert results_of(second) == [("c1", "safe 1 ok", False), ("c2", "danger 2 ok", False)]


async def test_deny_gives_the_model_the_reason_and_edit_changes_the_arguments() -> None:
    log = Log()
    tools = [log.tool("a", requires_approval=True), log.tool("b", requires_approval=True)]
    model = ScriptedModel([reply(tool_call("a", {"k": "1"}, id="x"), tool_call("b", {"k": "2"}, id="y")), "ok"])
    conversation = Conversation(tools=tools)
    cfg = LoopConfig(model=model, tool_execution="sequential")
    paused = await run_loop("go", conversation, cfg).result()
    assert paused.state is not None
    # Calls start in order: the second was never started, so it waits without asking yet.
    assert [(p.tool_call_id, p.needs_decision) for p in paused.state.pending] == [("x", True), ("y", False)]
    again = await resume_loop(paused.state, conversation, cfg, decisions={"x": deny("not today")}).result()
    # y asks when it is reached.
    assert again.end_reason == "approval_required"
    assert again.state is not None
    assert [(p.tool_call_id, p.needs_decision) for p in again.state.pending] == [("y", True)]
    assert results_of(again.state.completed) == [("x", "Permission denied by the user. Reason: not today", True)]
    final = await resume_loop(again.state, conversation, cfg, decisions={"y": edit({"k": "edited"})}).result()
    assert final.end_reason == "stop"
    assert log.ran == ["b:edited"]
    assert results_of(conversation.messages) == [
        ("x", "Permission denied by the user. Reason: not today", True),
        ("y", "b edited ok", False),
    ]


async def test_a_before_tool_call_hook_can_require_approval_and_is_not_asked_twice() -> None:
    log = Log()
    asked: list[str] = []

    def gate(call: ToolCallInfo) -> BeforeToolCallResult | None:
        asked.append(call.tool_call.id)
        return BeforeToolCallResult.approval_required("rule ask: danger")

    conversation = Conversation(tools=[log.tool("danger")])
    model = ScriptedModel([reply(tool_call("danger", {"k": "1"}, id="c1")), "done"])
    cfg = LoopConfig(model=model, before_tool_call=gate)
    paused = await run_loop("go", conversation, cfg).result()
    assert paused.state is not None
    assert paused.state.pending[0].reason == "rule ask: danger"
    done = await resume_loop(paused.state, conversation, cfg, decisions={"c1": approve()}).result()
    assert done.end_reason == "stop"
    assert log.ran == ["danger:1"]
    assert asked == ["c1", "c1"]


async def test_bad_decisions_and_another_configuration_are_refused_before_anything_runs() -> None:
    log = Log()
    conversation = Conversation(tools=[log.tool("danger", requires_approval=True)])
    model = ScriptedModel([reply(tool_call("danger", {"k": "1"}, id="c1")), "done"])
    cfg = LoopConfig(model=model)
    paused = await run_loop("go", conversation, cfg).result()
    state = paused.state
    assert state is not None
    with pytest.raises(ValueError) as missing:
        resume_loop(state, conversation, cfg)
    assert str(missing.value) == (
        "No decision for paused call 'c1' (danger); pass decisions={'c1': approve() | deny(reason) | edit(args)}"
    )
    with pytest.raises(ValueError) as unknown:
        resume_loop(state, conversation, cfg, decisions={"c1": approve(), "zz": approve()})
    assert str(unknown.value) == "Unknown call id 'zz' in decisions; the paused calls are ['c1']"
    other = Conversation(tools=[log.tool("danger", requires_approval=True)], system_prompt="changed")
    with pytest.raises(ValueError) as changed:
        resume_loop(state, other, cfg, decisions={"c1": approve()})
    assert str(changed.value).startswith("This RunState was paused with another model, system prompt or tools")
    assert log.ran == []


async def test_state_survives_json_and_resumes_in_a_new_agent() -> None:
    log = Log()

    def make() -> Agent[None]:
        return Agent(
            ScriptedModel([reply(tool_call("danger", {"k": "1"}, id="c1")), "done"]),
            tools=[log.tool("danger", requires_approval=True)],
            system_prompt="sp",
        )

    first = make()
    first.follow_up("later")
    paused = await first.prompt("go")
    assert paused.end_reason == "approval_required"
    assert first.phase.kind == "approval_required"
    assert paused.state is not None
    text = paused.state.to_json()
    assert json.loads(text)["version"] == 1
    second = make()
    second.model = ScriptedModel(["done", "after follow-up"])
    state = RunState.from_json(text)
    result = await second.resume(state, decisions={"c1": approve()})
    assert result.end_reason == "stop"
    assert log.ran == ["danger:1"]
    # The queued follow-up travelled with the state and ran after the resumed run's reply.
    assert [m.role for m in second.messages] == [
        "user", "assistant", "tool_result", "assistant", "user", "assistant",
    ]
    assert second.messages[-1].text == "after follow-up"  # type: ignore[attr-defined]


async def test_resuming_in_the_same_agent_counts_usage_once() -> None:
    log = Log()
    model = ScriptedModel([reply(tool_call("danger", {"k": "1"}, id="c1")), "done"])
    agent = Agent(model, tools=[log.tool("danger", requires_approval=True)])
    paused = await agent.prompt("go")
    assert paused.state is not None
    first_usage = agent.state.usage.total_tokens
    result = await agent.resume(paused.state, decisions={"c1": approve()})
    assert agent.state.usage.total_tokens == result.usage.total_tokens
    assert result.usage.total_tokens > first_usage


async def test_an_abort_while_paused_calls_wait_closes_them_as_aborted() -> None:
    from ketch.llm import AbortSignal

    signal = AbortSignal()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        signal.abort()
        return "slow ok"

    tools = [Tool("slow", "", SCHEMA, slow), Tool("danger", "", SCHEMA, slow, requires_approval=True)]
    model = ScriptedModel([reply(tool_call("slow", {}, id="s"), tool_call("danger", {}, id="d"))])
    conversation = Conversation(tools=tools)
    result = await run_loop("go", conversation, LoopConfig(model=model), signal).result()
    assert result.end_reason == "aborted"
    assert result.state is None
    assert [r[0] for r in results_of(conversation.messages)] == ["s", "d"]
    assert results_of(conversation.messages)[1] == ("d", "Tool execution was aborted.", True)


def test_golden_run_state_version_1_still_loads() -> None:
    state = RunState.from_json((GOLDEN / "run_state_v1.json").read_text())
    assert [p.tool_call_id for p in state.pending] == ["c2"]
    assert state.message.tool_calls[1].name == "danger"
    assert results_of(state.completed) == [("c1", "safe 1 ok", False)]
    assert state.fingerprint == "0123456789abcdef"
    with pytest.raises(ValueError) as bad:
        RunState.from_json('{"version": 99}')
    assert str(bad.value) == "Unknown RunState version 99; this ketch reads version 1"
