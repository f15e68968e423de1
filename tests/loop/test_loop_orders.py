"""Event orders, continue errors, results and summaries of the stateless loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ketch.llm import AssistantMessage
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolResult
from ketch.loop import continue_loop
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect
from support import describe


def echo_tool(name: str = "echo", **kw: Any) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        return f"{name}:{args.get('text', '')}"

    return Tool(name, "Echo text", {"type": "object", "properties": {"text": {"type": "string"}}}, run, **kw)


async def test_text_only_order() -> None:
    model = ScriptedModel(["Hello there"])
    ctx = Conversation(system_prompt="sys")
    stream = run_loop("hi", ctx, LoopConfig(model=model))
    events = await collect(stream)
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels == [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]
    updates = [e.event.type for e in events if e.type == "message_update"]
    assert updates == ["text_start", "text_delta", "text_delta", "text_end"]
    result = await stream.result()
    assert [m.role for m in result.messages] == ["user", "assistant"]
    assert result.text == "Hello there"
    assert result.end_reason == "stop"
    assert result.summary.turns == 1
    assert ctx.messages == result.messages
    assert model.requests[0].system_prompt == "sys"
    model.assert_complete()


async def test_tool_turn_order_parallel() -> None:
    gate = asyncio.Event()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        await gate.wait()
        return "slow done"

    async def fast(args: dict[str, Any], ctx: Any) -> str:
        gate.set()
        return "fast done"

    tools = [Tool("slow", "", None, slow), Tool("fast", "", None, fast)]
    model = ScriptedModel([reply(tool_call("slow", id="c1"), tool_call("fast", id="c2")), "done"])
    stream = run_loop("go", Conversation(tools=tools), LoopConfig(model=model))
    events = await collect(stream)
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels == [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "message_end:assistant",
        "tool_execution_start:c1",
        "tool_execution_start:c2",
        "tool_execution_end:c2",
        "tool_execution_end:c1",
        "message_start:tool_result",
        "message_end:tool_result",
        "message_start:tool_result",
        "message_end:tool_result",
        "turn_end",
        "turn_start",
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]
    results = [e.message for e in events if e.type == "message_end" and e.message.role == "tool_result"]
    assert [(r.tool_call_id, r.text) for r in results] == [("c1", "slow done"), ("c2", "fast done")]
    turn_end = next(e for e in events if e.type == "turn_end")
    assert [r.tool_call_id for r in turn_end.tool_results] == ["c1", "c2"]
    summary = (await stream.result()).summary
    assert (summary.turns, summary.tool_calls, summary.tool_errors) == (2, 2, 0)
    # the second request saw the assistant message and both results, in order
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool_result", "tool_result"]


async def test_continue_has_no_user_events() -> None:
    ctx = Conversation(messages=[UserMessage(content="hi")])
    events = await collect(continue_loop(ctx, LoopConfig(model=ScriptedModel(["ok"]))))
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels == [
        "agent_start",
        "turn_start",
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]


async def test_continue_errors_are_immediate() -> None:
    cfg = LoopConfig(model=ScriptedModel())
    with pytest.raises(ValueError, match="^Cannot continue: no messages in context$"):
        continue_loop(Conversation(), cfg)
    ctx = Conversation(messages=[UserMessage(content="hi"), AssistantMessage(content=[TextContent(text="x")])])
    with pytest.raises(ValueError, match="^Cannot continue from message role: assistant$"):
        continue_loop(ctx, cfg)


async def test_model_error_ends_run_with_error() -> None:
    model = ScriptedModel([error_reply("upstream exploded", "partial", kind="server")])
    stream = run_loop("hi", Conversation(), LoopConfig(model=model))
    events = await collect(stream)
    assert [describe(e) for e in events if e.type != "message_update"][-3:] == [
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]
    result = await stream.result()
    assert result.end_reason == "error"
    assert result.summary.error == "upstream exploded"
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.error_kind, last.text) == ("error", "server", "partial")


async def test_exhausted_script_is_an_error_message() -> None:
    result = await run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel())).result()
    assert result.end_reason == "error"
    assert result.summary.error == "no more scripted responses"


async def test_usage_and_cost_totals() -> None:
    from ketch.llm import Cost
    from ketch.llm import Usage

    u = Usage(input=10, output=5, total_tokens=15, cost=Cost(input=0.01, output=0.02, total=0.03))
    model = ScriptedModel([reply(tool_call("echo"), usage=u), reply("done", usage=u)])
    result = await run_loop("hi", Conversation(tools=[echo_tool()]), LoopConfig(model=model)).result()
    assert (result.usage.input, result.usage.output, result.usage.total_tokens) == (20, 10, 30)
    assert result.cost == pytest.approx(0.06)


async def test_tool_result_content_and_details() -> None:
    async def run(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult(content="visible", details={"hidden": 1})

    model = ScriptedModel([reply(tool_call("t", id="c1")), "ok"])
    result = await run_loop("hi", Conversation(tools=[Tool("t", "", None, run)]), LoopConfig(model=model)).result()
    tr = result.messages[2]
    assert isinstance(tr, ToolResultMessage)
    assert (tr.text, tr.details, tr.is_error) == ("visible", {"hidden": 1}, False)


async def test_json_return_value_is_encoded() -> None:
    async def run(args: dict[str, Any], ctx: Any) -> Any:
        return {"sum": 3, "items": [1, 2]}

    model = ScriptedModel([reply(tool_call("t")), "ok"])
    result = await run_loop("hi", Conversation(tools=[Tool("t", "", None, run)]), LoopConfig(model=model)).result()
    tr = result.messages[2]
    assert isinstance(tr, ToolResultMessage)
    assert tr.text == '{"sum":3,"items":[1,2]}'


async def test_tool_progress_updates() -> None:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        await ctx.report("25%")
        await ctx.report("75%")
        return "done"

    model = ScriptedModel([reply(tool_call("t", id="c1")), "ok"])
    events = await collect(run_loop("hi", Conversation(tools=[Tool("t", "", None, run)]), LoopConfig(model=model)))
    tool_events = [(e.type, getattr(e, "partial", None)) for e in events if e.type.startswith("tool_execution")]
    assert tool_events == [
        ("tool_execution_start", None),
        ("tool_execution_update", "25%"),
        ("tool_execution_update", "75%"),
        ("tool_execution_end", None),
    ]


async def test_tool_exception_becomes_error_result() -> None:
    async def boom(args: dict[str, Any], ctx: Any) -> str:
        raise RuntimeError("disk on fire")

    model = ScriptedModel([reply(tool_call("boom")), "recovered"])
    result = await run_loop("hi", Conversation(tools=[Tool("boom", "", None, boom)]), LoopConfig(model=model)).result()
    tr = result.messages[2]
    assert isinstance(tr, ToolResultMessage)
    assert (tr.text, tr.is_error) == ("RuntimeError: disk on fire", True)
    assert result.text == "recovered"
    assert result.summary.tool_errors == 1


async def test_unknown_tool() -> None:
    model = ScriptedModel([reply(tool_call("nope")), "ok"])
    result = await run_loop("hi", Conversation(), LoopConfig(model=model)).result()
    tr = result.messages[2]
    assert isinstance(tr, ToolResultMessage)
    assert (tr.text, tr.is_error) == ('Tool "nope" not found', True)


async def test_hook_exception_in_transform_context_is_error_message() -> None:
    def transform(messages: Any, signal: Any) -> Any:
        raise ValueError("bad transform")

    stream = run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel(["x"]), transform_context=transform))
    events = await collect(stream)
    result = await stream.result()
    assert result.end_reason == "error"
    assert result.summary.error == "ValueError: bad transform"
    assert [describe(e) for e in events][-4:] == [
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]


async def test_hook_exception_in_steering_poll_ends_run() -> None:
    def steering() -> Any:
        raise RuntimeError("queue broke")

    stream = run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel(["x"]), get_steering_messages=steering))
    events = await collect(stream)
    result = await stream.result()
    assert result.end_reason == "error"
    assert result.summary.error == "RuntimeError: queue broke"
    assert events[-1].type == "agent_end"
    assert sum(1 for e in events if e.type == "agent_end") == 1


async def test_get_api_key_called_before_every_call() -> None:
    calls: list[str] = []

    async def key(provider: str) -> str:
        calls.append(provider)
        return f"key-{len(calls)}"

    model = ScriptedModel([reply(tool_call("echo")), "done"])
    await run_loop("hi", Conversation(tools=[echo_tool()]), LoopConfig(model=model, get_api_key=key)).result()
    assert calls == ["scripted", "scripted"]
    assert [r.options.api_key for r in model.requests] == ["key-1", "key-2"]


async def test_convert_to_llm_drops_custom_messages() -> None:
    from ketch.llm import CustomMessage

    class Note(CustomMessage, tag="test_note"):
        text: str

    ctx = Conversation(messages=[Note(text="ui only")])
    model = ScriptedModel(["ok"])
    await run_loop("hi", ctx, LoopConfig(model=model)).result()
    assert [m.role for m in model.requests[0].messages] == ["user"]
    assert ctx.messages[0].role == "test_note"


async def test_continue_from_an_assistant_message_takes_the_queued_messages_as_prompts() -> None:
    # The free continue_loop does what Agent.continue_loop does: steering first, else follow-ups.
    steering: list[Any] = [UserMessage(content="steer")]
    follow_ups: list[Any] = [UserMessage(content="follow")]

    def take(queue: list[Any]) -> Any:
        return lambda: [queue.pop(0)] if queue else []

    model = ScriptedModel(["a", "b"])
    cfg = LoopConfig(model=model, get_steering_messages=take(steering), get_follow_up_messages=take(follow_ups))
    ctx = Conversation(messages=[UserMessage(content="hi"), AssistantMessage(content=[TextContent(text="x")])])
    result = await continue_loop(ctx, cfg).result()
    texts = [m.content[0].text for m in result.messages]  # type: ignore[union-attr]
    assert (texts, result.uncommitted) == (["steer", "a", "follow", "b"], [])

    empty = LoopConfig(model=ScriptedModel(), get_follow_up_messages=lambda: [])
    result = await continue_loop(ctx, empty).result()
    assert (result.end_reason, result.error) == (
        "error", "ValueError: Cannot continue from message role: assistant: no steering or follow-up message is queued"
    )
