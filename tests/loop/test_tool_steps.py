"""Tool steps: validate (semantic checks), preview (before the gate), structured
progress, and what a retried request does to tool calls that had streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec

from ketch import Agent
from ketch.llm import MessageBuilder
from ketch.llm import Request
from ketch.llm import Retry
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import ToolResultMessage
from ketch.loop import BeforeToolCallResult
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolContext
from ketch.loop import ToolPreview
from ketch.loop import ToolProgress
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import tool
from support import collect
from support import describe

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def results(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [(m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)]


def edit_tool(ran: list[str]) -> Tool:
    def was_read(args: dict[str, Any], ctx: ToolContext[Any]) -> str | None:
        read = {m.tool_call_id for m in ctx.messages if isinstance(m, ToolResultMessage) and m.tool_name == "read"}
        if not read:
            return f"Read {args['path']} before editing it."
        return None

    async def preview(args: dict[str, Any], ctx: ToolContext[Any]) -> str:
        return f"--- {args['path']}\n+++ {args['path']}\n+new line"

    async def run(args: dict[str, Any], ctx: ToolContext[Any]) -> str:
        ran.append(ctx.call_id)
        return "edited"

    return Tool("edit", "", SCHEMA, run, validate=was_read, preview=preview)


def read_tool() -> Tool:
    async def run(args: dict[str, Any], ctx: ToolContext[Any]) -> str:
        return "contents"

    return Tool("read", "", SCHEMA, run)


async def test_validate_refuses_an_edit_before_a_read_without_running_it() -> None:
    ran: list[str] = []
    model = ScriptedModel([
        reply(tool_call("edit", {"path": "a.py"}, id="e1")),
        reply(tool_call("read", {"path": "a.py"}, id="r1")),
        reply(tool_call("edit", {"path": "a.py"}, id="e2")),
        "done",
    ])
    result = await Agent(model, tools=[edit_tool(ran), read_tool()]).prompt("go")
    assert ran == ["e2"]
    assert results(result.messages) == [
        ("e1", "Read a.py before editing it.", True), ("r1", "contents", False), ("e2", "edited", False),
    ]


async def test_the_preview_is_emitted_before_the_gate_and_the_execution() -> None:
    order: list[str] = []
    ran: list[str] = []

    def gate(call: ToolCallInfo) -> BeforeToolCallResult | None:
        order.append("gate")
        return None

    model = ScriptedModel([reply(tool_call("read", {"path": "a.py"}, id="r1")),
                           reply(tool_call("edit", {"path": "a.py"}, id="e1")), "done"])
    conversation = Conversation(tools=[edit_tool(ran), read_tool()])
    events = []
    async for event in run_loop("go", conversation, LoopConfig(model=model, before_tool_call=gate)):
        events.append(event)
        if event.type == "tool_execution_update":
            order.append("preview")
        elif event.type == "tool_execution_end":
            order.append("end")
    updates = [e for e in events if e.type == "tool_execution_update"]
    assert [(u.tool_call_id, u.partial) for u in updates] == [
        ("e1", ToolPreview(preview="--- a.py\n+++ a.py\n+new line")),
    ]
    assert order == ["gate", "end", "preview", "gate", "end"]
    labels = [describe(e) for e in events if e.type.startswith("tool_execution")]
    assert labels[-3:] == ["tool_execution_start:e1", "tool_execution_update:e1", "tool_execution_end:e1"]
    assert msgspec.json.decode(msgspec.json.encode(updates[0]))["partial"] == {
        "type": "tool_preview", "preview": "--- a.py\n+++ a.py\n+new line",
    }


async def test_a_preview_that_raises_is_skipped() -> None:
    def bad_preview(args: dict[str, Any], ctx: Any) -> str:
        raise RuntimeError("no diff")

    async def run(args: dict[str, Any], ctx: Any) -> str:
        return "ran"

    model = ScriptedModel([reply(tool_call("t", {"path": "x"}, id="a")), "done"])
    stream = run_loop("go", Conversation(tools=[Tool("t", "", SCHEMA, run, preview=bad_preview)]), LoopConfig(model=model))
    events = await collect(stream)
    assert [e for e in events if e.type == "tool_execution_update"] == []
    assert results((await stream.result()).messages) == [("a", "ran", False)]


async def test_structured_progress_reaches_the_update_events() -> None:
    @tool
    async def download(path: str, ctx: ToolContext) -> str:
        """Download."""
        await ctx.progress("starting", progress=0, total=2)
        await ctx.progress(progress=2, total=2, data={"bytes": 10})
        return "ok"

    model = ScriptedModel([reply(tool_call("download", {"path": "x"}, id="d")), "done"])
    events = await collect(run_loop("go", Conversation(tools=[download]), LoopConfig(model=model)))
    assert [e.partial for e in events if e.type == "tool_execution_update"] == [
        ToolProgress(message="starting", progress=0, total=2),
        ToolProgress(progress=2, total=2, data={"bytes": 10}),
    ]


async def test_validate_and_preview_through_the_tool_decorator() -> None:
    @tool(validate=lambda args, ctx: "no" if args["path"] == "/" else None, preview=lambda args, ctx: args["path"])
    def remove(path: str) -> str:
        """Remove."""
        return f"removed {path}"

    model = ScriptedModel([reply(tool_call("remove", {"path": "/"}, id="a"), tool_call("remove", {"path": "x"}, id="b")), "ok"])
    stream = run_loop("go", Conversation(tools=[remove]), LoopConfig(model=model))
    events = await collect(stream)
    assert [(e.tool_call_id, e.partial) for e in events if e.type == "tool_execution_update"] == [
        ("b", ToolPreview(preview="x")),
    ]
    assert results((await stream.result()).messages) == [("a", "no", True), ("b", "removed x", False)]


class RetryingModel:
    """Streams a tool call, fails mid-arguments and retries (as the HTTP adapters do:
    a ``retry`` event with ``discard_partial``), then streams the whole call."""

    provider = "test"
    api = "test"
    id = "retrying"
    context_window = 100_000

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        return self._events(len([m for m in request.messages if isinstance(m, ToolResultMessage)]))

    async def _events(self, answered: int) -> AsyncIterator[StreamEvent]:
        b = MessageBuilder(provider="test", api="test", model="retrying")
        if answered:
            yield b.start()
            t = b.text_start()
            yield t
            yield b.text_delta("done", t.index)
            yield b.text_end(t.index)
            yield b.done()
            return
        yield b.start()
        call = b.tool_call_start("c1", "write")
        yield call
        yield b.tool_call_delta('{"path": "a', call.index)
        yield Retry(attempt=1, max_attempts=3, delay=0.0, error_kind="network", error_message="cut", discard_partial=True)
        b.reset()
        yield b.start()
        call = b.tool_call_start("c2", "write")
        yield call
        yield b.tool_call_delta('{"path": "a.txt"}', call.index)
        yield b.tool_call_end(call.index)
        yield b.done()


async def test_a_request_retried_after_tool_call_deltas_runs_only_the_complete_call_once() -> None:
    ran: list[str] = []

    async def write(args: dict[str, Any], ctx: Any) -> str:
        ran.append(f"{ctx.call_id}:{args['path']}")
        return "written"

    stream = run_loop("go", Conversation(tools=[Tool("write", "", SCHEMA, write)]), LoopConfig(model=RetryingModel()))
    events = await collect(stream)
    result = await stream.result()
    assert ran == ["c2:a.txt"]
    assert [e.type for e in events if e.type == "retry"] == ["retry"]
    assert results(result.messages) == [("c2", "written", False)]
    assert result.end_reason == "stop" and result.text == "done"
