"""Usage limits: requests, tool calls, input, output and total tokens, per run and per request."""

from __future__ import annotations

from typing import Any

import pytest

from ketch import Agent
from ketch import UsageLimits
from ketch.llm import ToolResultMessage
from ketch.llm import Usage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect

SCHEMA = {"type": "object", "properties": {}}


def noop_tool(ran: list[str]) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        ran.append(ctx.call_id)
        return "ok"

    return Tool("noop", "", SCHEMA, run)


def used(output: int, input: int = 10) -> Usage:
    return Usage(input=input, output=output, total_tokens=input + output)


async def test_the_number_of_model_calls_is_max_turns_alone() -> None:
    with pytest.raises(TypeError, match="'requests'"):
        UsageLimits(requests=2)  # type: ignore[call-arg]  # removed: max_turns counts the same calls
    model = ScriptedModel([reply(tool_call("noop", id=f"c{i}"), usage=used(5)) for i in range(5)])
    ran: list[str] = []
    result = await Agent(model, tools=[noop_tool(ran)], max_turns=2).prompt("go")
    assert result.end_reason == "max_turns"
    assert len(model.requests) == 2
    assert ran == ["c0", "c1"]


async def test_a_batch_that_would_pass_the_tool_call_limit_is_not_run() -> None:
    model = ScriptedModel([
        reply(tool_call("noop", id="a"), usage=used(5)),
        reply(tool_call("noop", id="b"), tool_call("noop", id="c"), usage=used(5)),
        "never",
    ])
    ran: list[str] = []
    conversation = Conversation(tools=[noop_tool(ran)])
    stream = run_loop("go", conversation, LoopConfig(model=model, usage_limits=UsageLimits(tool_calls=2)))
    events = await collect(stream)
    result = await stream.result()
    text = "Usage limit: 2 tool call(s) not run; 1 of the run's 2 allowed tool calls (tool_calls) were used already"
    assert ran == ["a"]
    assert result.end_reason == "usage_limit" and result.summary.error == text
    assert [(m.tool_call_id, m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)] == [
        ("a", "ok", False), ("b", text, True), ("c", text, True),
    ]
    tail = [e.type for e in events if e.type != "message_update"][-10:]
    assert tail == [
        "tool_execution_start", "tool_execution_end", "tool_execution_start", "tool_execution_end",
        "message_start", "message_end", "message_start", "message_end", "turn_end", "agent_end",
    ]
    assert len(model.requests) == 2


async def test_output_limits_cap_max_tokens_and_end_the_run_when_used_up() -> None:
    model = ScriptedModel([reply(tool_call("noop", id=f"c{i}"), usage=used(30)) for i in range(5)])
    limits = UsageLimits(output_tokens=70, request_output_tokens=50)
    result = await Agent(model, tools=[noop_tool([])], usage_limits=limits).prompt("go")
    assert [r.options.max_tokens for r in model.requests] == [50, 40, 10]
    assert result.end_reason == "usage_limit"
    assert result.summary.error == "Usage limit reached: 90 output tokens, the limit (output_tokens) is 70"


async def test_a_request_predicted_too_large_is_not_sent_and_the_prompt_is_kept() -> None:
    model = ScriptedModel(["never"])
    agent = Agent(model, usage_limits=UsageLimits(request_input_tokens=100))
    stream_events: list[str] = []
    agent.subscribe(lambda e: stream_events.append(e.type))
    result = await agent.prompt("word " * 1000)
    assert model.requests == []
    assert result.end_reason == "usage_limit"
    assert result.summary.error is not None and result.summary.error.startswith(
        "Usage limit: the next request would send about "
    )
    assert result.summary.error.endswith("input tokens, the limit (request_input_tokens) is 100")
    assert [m.role for m in agent.messages] == ["user"]
    assert stream_events == ["agent_start", "message_start", "message_end", "agent_end"]


async def test_run_token_limits_count_what_was_used_plus_the_next_request() -> None:
    model = ScriptedModel([reply(tool_call("noop", id=f"c{i}"), usage=used(10, input=400)) for i in range(5)])
    result = await Agent(model, tools=[noop_tool([])], usage_limits=UsageLimits(input_tokens=1000)).prompt("go")
    assert len(model.requests) == 2
    assert result.end_reason == "usage_limit"
    assert result.summary.error is not None and result.summary.error.startswith(
        "Usage limit: 800 input tokens used and about "
    )
    model2 = ScriptedModel([reply(tool_call("noop", id=f"d{i}"), usage=used(100, input=100)) for i in range(5)])
    result2 = await Agent(model2, tools=[noop_tool([])], usage_limits=UsageLimits(total_tokens=500)).prompt("go")
    assert len(model2.requests) == 2
    assert result2.end_reason == "usage_limit"
    assert result2.summary.error is not None and "the limit (total_tokens) is 500" in result2.summary.error


def test_limits_must_be_positive_integers() -> None:
    with pytest.raises(ValueError) as bad:
        UsageLimits(tool_calls=0)
    assert str(bad.value) == "UsageLimits.tool_calls must be a positive integer or None, got 0"
    with pytest.raises(ValueError):
        UsageLimits(total_tokens=True)  # type: ignore[arg-type]
