"""Abort while a response streams tool calls, and abort between queued messages.

An aborted response keeps its text and its complete tool calls; a call whose arguments
were still streaming is dropped, and each kept call is closed by an error result
"Tool execution was aborted." in the committed transcript. Queued messages are checked
against the abort signal one by one before they are committed, and no model call starts
once the run is aborted.
"""

from __future__ import annotations

from typing import Any

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Message
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import default_convert_to_llm
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import describe

ABORTED = "Tool execution was aborted."


def read_tool(ran: list[str]) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        ran.append(args.get("path", ""))
        return "contents"

    return Tool("read", "Read a file.", None, run)


def shape(m: Message) -> tuple[Any, ...]:
    """A message as comparable values (no timestamps or usage)."""
    if isinstance(m, AssistantMessage):
        return ("assistant", m.stop_reason, m.content)
    if isinstance(m, ToolResultMessage):
        return ("tool_result", m.tool_call_id, m.tool_name, m.content, m.is_error)
    assert isinstance(m, UserMessage)
    content = m.content
    return ("user", content if isinstance(content, str) else "".join(getattr(b, "text", "") for b in content))


def labels(events: list[Any]) -> list[str]:
    return [describe(e) for e in events if e.type != "message_update"]


async def abort_on(stream: Any, signal: AbortSignal, when: Any) -> list[Any]:
    """All events; ``signal.abort()`` as soon as ``when(event)`` is true."""
    events = []
    async for ev in stream:
        events.append(ev)
        if not signal.aborted and when(ev):
            signal.abort()
    return events


def delta_of_call(index: int) -> Any:
    return lambda ev: ev.type == "message_update" and ev.event.type == "toolcall_delta" and ev.event.index == index


STREAMED_TOOL_TURN = [
    "agent_start", "turn_start", "message_start:user", "message_end:user",
    "message_start:assistant", "message_end:assistant",
]  # fmt: skip


async def test_abort_while_the_only_tool_call_streams_drops_it() -> None:
    ran: list[str] = []
    signal = AbortSignal()
    ctx = Conversation(tools=[read_tool(ran)])
    model = ScriptedModel([reply("Let me look.", tool_call("read", {"path": "notes.txt"}, id="c1"), chunk_size=4)])
    stream = run_loop("go", ctx, LoopConfig(model=model), signal)
    events = await abort_on(stream, signal, delta_of_call(1))
    result = await stream.result()
    assert [shape(m) for m in result.messages] == [
        ("user", "go"),
        ("assistant", "aborted", [TextContent(text="Let me look.")]),
    ]
    assert labels(events) == [*STREAMED_TOOL_TURN, "turn_end", "agent_end"]
    assert events[-1].messages == ctx.messages == result.messages
    assert (result.end_reason, result.summary.tool_calls, ran) == ("aborted", 0, [])


async def test_abort_after_one_complete_call_closes_it_and_drops_the_streaming_one() -> None:
    ran: list[str] = []
    signal = AbortSignal()
    ctx = Conversation(tools=[read_tool(ran)])
    model = ScriptedModel(
        [
            reply(
                tool_call("read", {"path": "a.txt"}, id="c1"),
                tool_call("read", {"path": "b.txt"}, id="c2"),
                chunk_size=4,
            ),
            "next answer",
        ]
    )
    stream = run_loop("go", ctx, LoopConfig(model=model), signal)
    events = await abort_on(stream, signal, delta_of_call(1))
    result = await stream.result()
    closing = ("tool_result", "c1", "read", [TextContent(text=ABORTED)], True)
    assert [shape(m) for m in result.messages] == [
        ("user", "go"),
        ("assistant", "aborted", [ToolCall(id="c1", name="read", args={"path": "a.txt"})]),
        closing,
    ]
    assert labels(events) == [
        *STREAMED_TOOL_TURN, "message_start:tool_result", "message_end:tool_result", "turn_end", "agent_end",
    ]  # fmt: skip
    turn_end = next(e for e in events if e.type == "turn_end")
    assert [shape(r) for r in turn_end.tool_results] == [closing]
    assert events[-1].messages == ctx.messages == result.messages
    assert (result.end_reason, ran) == ("aborted", [])
    assert (result.summary.tool_calls, result.summary.tool_errors) == (1, 1)

    # The next request sees the interrupted response as before: no orphaned results.
    await run_loop("carry on", ctx, LoopConfig(model=model)).result()
    sent = model.requests[1].messages
    assert [shape(m) for m in sent] == [
        ("user", "go"),
        ("user", "[Request interrupted by user]"),
        ("user", "carry on"),
    ]
    assert [shape(m) for m in default_convert_to_llm(ctx.messages[:3])] == [
        ("user", "go"),
        ("user", "[Request interrupted by user]"),
    ]


async def test_abort_during_text_commits_no_results() -> None:
    signal = AbortSignal()
    ctx = Conversation(tools=[read_tool([])])
    model = ScriptedModel([reply("I will read", tool_call("read", {"path": "a"}, id="c1"), chunk_size=4)])
    stream = run_loop("go", ctx, LoopConfig(model=model), signal)
    events = await abort_on(stream, signal, lambda ev: ev.type == "message_update" and ev.event.type == "text_delta")
    result = await stream.result()
    assert [shape(m) for m in result.messages] == [
        ("user", "go"),
        ("assistant", "aborted", [TextContent(text="I wi")]),
    ]
    assert labels(events) == [*STREAMED_TOOL_TURN, "turn_end", "agent_end"]
    assert result.summary.tool_calls == 0


async def test_closing_results_follow_the_call_order_of_the_kept_calls() -> None:
    # Text, two complete calls, a third cut off: the text and both calls stay.
    signal = AbortSignal()
    ctx = Conversation(tools=[read_tool([])])
    model = ScriptedModel(
        [
            reply(
                "Reading.",
                tool_call("read", {"path": "a"}, id="c1"),
                tool_call("read", {"path": "b"}, id="c2"),
                tool_call("read", {"path": "c"}, id="c3"),
                chunk_size=3,
            )
        ]
    )
    stream = run_loop("go", ctx, LoopConfig(model=model), signal)
    await abort_on(stream, signal, delta_of_call(3))
    result = await stream.result()
    assert [shape(m) for m in result.messages] == [
        ("user", "go"),
        (
            "assistant",
            "aborted",
            [
                TextContent(text="Reading."),
                ToolCall(id="c1", name="read", args={"path": "a"}),
                ToolCall(id="c2", name="read", args={"path": "b"}),
            ],
        ),
        ("tool_result", "c1", "read", [TextContent(text=ABORTED)], True),
        ("tool_result", "c2", "read", [TextContent(text=ABORTED)], True),
    ]


class Queue:
    """A getter handing out one prepared batch per poll."""

    def __init__(self, *batches: list[str]) -> None:
        self.batches = [[UserMessage(content=t) for t in b] for b in batches]

    def __call__(self) -> list[Message]:
        return self.batches.pop(0) if self.batches else []


async def test_abort_between_queued_messages_commits_no_more_and_calls_no_model() -> None:
    signal = AbortSignal()
    model = ScriptedModel([reply(tool_call("read", {"path": "a"}, id="c1")), "unused"])
    cfg = LoopConfig(model=model, get_steering_messages=Queue([], ["s1", "s2"]))
    stream = run_loop("go", Conversation(tools=[read_tool([])]), cfg, signal)
    events = await abort_on(
        stream, signal, lambda ev: ev.type == "message_end" and shape(ev.message) == ("user", "s1")
    )
    result = await stream.result()
    assert [shape(m) for m in result.messages][-3:] == [
        ("tool_result", "c1", "read", [TextContent(text="contents")], False),
        ("user", "s1"),
        ("assistant", "aborted", []),
    ]
    assert result.messages[-1].error_message == "Request was aborted"  # type: ignore[attr-defined]
    assert labels(events)[-8:] == [
        "turn_end", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end", "agent_end",
    ]  # fmt: skip
    assert len(model.requests) == 1
    assert result.end_reason == "aborted"


async def test_abort_before_the_first_model_call_leaves_queued_messages_untaken() -> None:
    signal = AbortSignal()
    polls: list[str] = []

    def steering() -> list[Message]:
        polls.append("steering")
        return [UserMessage(content="s1")]

    model = ScriptedModel(["unused"])
    cfg = LoopConfig(model=model, get_steering_messages=steering)
    stream = run_loop("go", Conversation(), cfg, signal)
    events = await abort_on(stream, signal, lambda ev: ev.type == "message_end")
    result = await stream.result()
    assert [shape(m) for m in result.messages] == [("user", "go"), ("assistant", "aborted", [])]
    assert labels(events) == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end", "agent_end",
    ]  # fmt: skip
    assert (polls, len(model.requests), result.end_reason) == ([], 0, "aborted")
