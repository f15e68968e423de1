"""White-box test: imports ketch implementation modules (private) directly.

Stop controls, steering in both modes, follow-ups, abort, cancellation, retries, repair."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Cost
from ketch.llm import MessageBuilder
from ketch.llm import Retry as StreamRetry
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import NextTurn
from ketch.loop import Retry
from ketch.loop import StopDecision
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import repair_messages
from ketch.loop import run_loop
from ketch.loop import stop_after_tool
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import tool
from support import collect
from support import describe


def noop_tool(name: str = "noop", **kw: Any) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        return "ok"

    return Tool(name, "", None, run, **kw)


def looping_model(n: int = 10) -> ScriptedModel:
    return ScriptedModel([reply(tool_call("noop")) for _ in range(n)])


async def test_max_turns() -> None:
    model = looping_model()
    result = await run_loop("go", Conversation(tools=[noop_tool()]), LoopConfig(model=model, max_turns=3)).result()
    assert result.end_reason == "max_turns"
    assert result.summary.turns == 3
    assert len(model.requests) == 3
    # the transcript stays valid: the last tool call has its result
    assert isinstance(result.messages[-1], ToolResultMessage)


async def test_max_budget() -> None:
    usage = Usage(input=1, output=1, total_tokens=2, cost=Cost(total=0.4))
    model = ScriptedModel([reply(tool_call("noop"), usage=usage) for _ in range(5)])
    cfg = LoopConfig(model=model, max_budget_usd=1.0)
    result = await run_loop("go", Conversation(tools=[noop_tool()]), cfg).result()
    assert result.end_reason == "max_budget"
    assert result.summary.turns == 3
    assert result.cost == pytest.approx(1.2)


async def test_stop_when_after_tools() -> None:
    model = ScriptedModel([reply(tool_call("noop")), reply(tool_call("final")), "never"])
    cfg = LoopConfig(model=model, stop_when=[stop_after_tool("final")])
    result = await run_loop("go", Conversation(tools=[noop_tool(), noop_tool("final")]), cfg).result()
    assert result.end_reason == "stop"
    assert result.summary.turns == 2
    assert isinstance(result.messages[-1], ToolResultMessage)
    assert result.messages[-1].tool_name == "final"
    assert model.remaining == 1


async def test_stop_when_predicates_or_composed_async() -> None:
    async def after_two(turn: Any) -> bool:
        return bool(turn.turn >= 2)

    model = looping_model()
    cfg = LoopConfig(model=model, stop_when=[lambda t: False, after_two])
    result = await run_loop("go", Conversation(tools=[noop_tool()]), cfg).result()
    assert result.summary.turns == 2


async def test_on_stop_continue_then_allow() -> None:
    decisions = [StopDecision.continue_with("check your work"), StopDecision.allow()]
    infos: list[int] = []

    def on_stop(info: Any) -> StopDecision:
        infos.append(info.turn)
        return decisions.pop(0)

    model = ScriptedModel(["first", "second"])
    result = await run_loop("go", Conversation(), LoopConfig(model=model, on_stop=on_stop)).result()
    assert infos == [1, 2]
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    assert result.messages[2].content[0].text == "check your work"  # type: ignore[attr-defined]
    assert result.end_reason == "stop"


async def test_on_stop_block_without_message_counts_as_allow() -> None:
    model = ScriptedModel(["only"])
    cfg = LoopConfig(model=model, on_stop=lambda info: StopDecision(action="continue"))
    result = await run_loop("go", Conversation(), cfg).result()
    assert (result.end_reason, result.summary.turns) == ("stop", 1)


async def test_on_stop_escalate() -> None:
    cfg = LoopConfig(model=ScriptedModel(["lazy answer"]), on_stop=lambda i: StopDecision.escalate("tests not run"))
    result = await run_loop("go", Conversation(), cfg).result()
    assert (result.end_reason, result.summary.error) == ("stop_guard", "tests not run")
    with pytest.raises(Exception, match="Run ended with stop_guard: tests not run"):
        result.raise_for_error()


async def test_on_stop_escalate_without_a_reason() -> None:
    assert StopDecision.escalate() == StopDecision(action="escalate")
    cfg = LoopConfig(model=ScriptedModel(["lazy answer"]), on_stop=lambda i: StopDecision.escalate())
    result = await run_loop("go", Conversation(), cfg).result()
    assert (result.end_reason, result.summary.error) == ("stop_guard", "on_stop escalated")


async def test_prepare_next_turn_switches_model_and_thinking() -> None:
    second = ScriptedModel(["from second"], id="second")
    first = ScriptedModel([reply(tool_call("noop"))], id="first")

    def prepare(turn: Any) -> NextTurn:
        return NextTurn(model=second, thinking="high")

    cfg = LoopConfig(model=first, prepare_next_turn=prepare)
    result = await run_loop("go", Conversation(tools=[noop_tool()]), cfg).result()
    assert result.text == "from second"
    assert second.requests[0].options.thinking == "high"


class Queue:
    def __init__(self, *batches: list[str]) -> None:
        self.batches = [list(b) for b in batches]
        self.polls = 0

    def __call__(self) -> list[Any]:
        self.polls += 1
        if not self.batches:
            return []
        return [UserMessage(content=t) for t in self.batches.pop(0)]


async def test_initial_steering_reaches_first_call() -> None:
    model = ScriptedModel(["ok"])
    cfg = LoopConfig(model=model, get_steering_messages=Queue(["also this"]))
    events = await collect(run_loop("hi", Conversation(), cfg))
    assert [m.role for m in model.requests[0].messages] == ["user", "user"]
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels[:7] == [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
    ]


async def test_steering_between_turns_wait_mode_finishes_batch() -> None:
    gate = asyncio.Event()
    steer_q = Queue()
    ran: list[str] = []

    async def first(args: dict[str, Any], ctx: Any) -> str:
        ran.append("first")
        steer_q.batches.append(["change of plan"])
        return "1"

    async def second(args: dict[str, Any], ctx: Any) -> str:
        ran.append("second")
        gate.set()
        return "2"

    tools = [Tool("first", "", None, first, sequential=True), Tool("second", "", None, second)]
    model = ScriptedModel([reply(tool_call("first"), tool_call("second")), "ack"])
    cfg = LoopConfig(model=model, get_steering_messages=steer_q)
    result = await run_loop("go", Conversation(tools=tools), cfg).result()
    assert ran == ["first", "second"]
    assert [m.role for m in result.messages] == [
        "user", "assistant", "tool_result", "tool_result", "user", "assistant",
    ]
    assert result.messages[4].content[0].text == "change of plan"  # type: ignore[attr-defined]


async def test_steering_interrupt_mode_skips_and_cancels() -> None:
    steer_q = Queue()
    cancelled: list[str] = []
    started = asyncio.Event()

    async def long_running(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("long")
            raise
        return "never"

    async def quick(args: dict[str, Any], ctx: Any) -> str:
        await started.wait()
        steer_q.batches.append(["stop that"])
        return "quick"

    async def later(args: dict[str, Any], ctx: Any) -> str:
        return "later"

    tools = [
        Tool("long", "", None, long_running, interrupt="cancel"),
        Tool("quick", "", None, quick),
        Tool("later", "", None, later, sequential=True),
    ]
    model = ScriptedModel(
        [reply(tool_call("long", id="l"), tool_call("quick", id="q"), tool_call("later", id="z")), "ok"]
    )
    cfg = LoopConfig(model=model, get_steering_messages=steer_q, steering_during_tools="interrupt")
    result = await run_loop("go", Conversation(tools=tools), cfg).result()
    assert cancelled == ["long"]
    results = [(m.tool_call_id, m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)]
    assert results == [
        ("l", "Cancelled due to queued user message.", True),
        ("q", "quick", False),
        ("z", "Skipped due to queued user message.", True),
    ]
    assert result.messages[5].content[0].text == "stop that"  # type: ignore[attr-defined]


async def test_follow_ups_when_model_would_stop() -> None:
    model = ScriptedModel(["one", "two", "three"])
    follow = Queue(["next"], ["and another"])
    cfg = LoopConfig(model=model, get_follow_up_messages=follow)
    events = await collect(run_loop("hi", Conversation(), cfg))
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end",
        "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end",
        "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end",
        "agent_end",
    ]


async def test_result_reports_queued_messages_taken_but_not_committed() -> None:
    # max_turns ends the run after the follow-ups were taken at the would-be end
    follow = Queue(["f1", "f2"])
    cfg = LoopConfig(model=ScriptedModel(["one"]), max_turns=1, get_follow_up_messages=follow)
    stream = run_loop("hi", Conversation(), cfg)
    result = await stream.result()
    assert result.end_reason == "max_turns"
    assert [m.content[0].text for m in result.uncommitted] == ["f1", "f2"]  # type: ignore[attr-defined]
    assert stream.uncommitted is not result.uncommitted and stream.uncommitted == result.uncommitted
    assert [m.role for m in result.messages] == ["user", "assistant"]

    # committed queued messages are not reported; the order is the order taken
    steer = Queue(["s1"], [], ["s2"])
    follow = Queue(["f1"])
    model = ScriptedModel([reply(tool_call("noop")), "two", "three"])
    cfg = LoopConfig(model=model, max_turns=2, get_steering_messages=steer, get_follow_up_messages=follow)
    result = await run_loop("hi", Conversation(tools=[noop_tool()]), cfg).result()
    texts = [m.content[0].text for m in result.messages if m.role == "user"]  # type: ignore[attr-defined]
    assert texts == ["hi", "s1"]
    assert [m.content[0].text for m in result.uncommitted] == ["s2"]  # type: ignore[attr-defined]

    # a normal end leaves nothing uncommitted
    result = await run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel(["ok"]), get_steering_messages=Queue(["s"]))).result()
    assert result.uncommitted == [] and [m.role for m in result.messages] == ["user", "user", "assistant"]


async def test_steering_taken_during_an_aborted_batch_is_reported_uncommitted(no_leaked_tasks: None) -> None:
    signal = AbortSignal()

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        await asyncio.Event().wait()
        return "never"

    async def quick(args: dict[str, Any], ctx: Any) -> str:
        return "ok"

    polls: list[int] = []

    def steer_then_abort() -> list[Any]:
        polls.append(1)
        if len(polls) == 1:
            return []  # the run's first poll: nothing yet
        signal.abort()  # the user steers, then aborts before the batch ends
        return [UserMessage(content="now")]

    tools = [Tool("slow", "", None, slow), Tool("quick", "", None, quick)]
    model = ScriptedModel([reply(tool_call("quick"), tool_call("slow")), "unused"])
    cfg = LoopConfig(
        model=model,
        get_steering_messages=steer_then_abort,
        steering_during_tools="interrupt",
    )
    result = await run_loop("go", Conversation(tools=tools), cfg, signal).result()
    assert result.end_reason == "aborted"
    assert [m.content[0].text for m in result.uncommitted] == ["now"]  # type: ignore[attr-defined]
    assert [m.content[0].text for m in result.messages if m.role == "user"] == ["go"]  # type: ignore[attr-defined]


async def test_abort_mid_stream_keeps_partial(no_leaked_tasks: None) -> None:
    signal = AbortSignal()
    model = ScriptedModel([reply("partial answer", hang=True)])
    stream = run_loop("hi", Conversation(), LoopConfig(model=model), signal)
    events = []
    async for ev in stream:
        events.append(ev)
        if ev.type == "message_update" and ev.event.type == "text_end":
            signal.abort()
    result = await stream.result()
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.text) == ("aborted", "partial answer")
    assert result.end_reason == "aborted"
    assert [describe(e) for e in events][-3:] == ["message_end:assistant", "turn_end", "agent_end"]


async def test_abort_from_another_task_while_waiting(no_leaked_tasks: None) -> None:
    signal = AbortSignal()
    model = ScriptedModel([reply("abc", hang=True)])
    stream = run_loop("hi", Conversation(), LoopConfig(model=model), signal)
    streamed = asyncio.Event()

    async def consume() -> Any:
        async for ev in stream:
            if ev.type == "message_update" and ev.event.type == "text_end":
                streamed.set()
        return await stream.result()

    task = asyncio.ensure_future(consume())
    await streamed.wait()
    signal.abort()
    result = await task
    assert result.end_reason == "aborted"
    assert result.messages[-1].text == "abc"  # type: ignore[attr-defined]


async def test_abort_mid_tool_closes_calls(no_leaked_tasks: None) -> None:
    signal = AbortSignal()
    cancelled: list[str] = []
    started = asyncio.Event()

    async def hang(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("hang")
            raise
        return "never"

    async def trigger(args: dict[str, Any], ctx: Any) -> str:
        await started.wait()
        signal.abort()
        return "done anyway"

    tools = [Tool("hang", "", None, hang), Tool("trigger", "", None, trigger), Tool("after", "", None, hang, sequential=True)]
    model = ScriptedModel([reply(tool_call("hang", id="h"), tool_call("trigger", id="t"), tool_call("after", id="a"))])
    stream = run_loop("go", Conversation(tools=tools), LoopConfig(model=model), signal)
    events = await collect(stream)
    result = await stream.result()
    assert result.end_reason == "aborted"
    assert cancelled == ["hang"]
    results = {m.tool_call_id: (m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)}
    assert results == {
        "h": ("Tool execution was aborted.", True),
        "t": ("done anyway", False),
        "a": ("Tool execution was aborted.", True),
    }
    starts = [e.tool_call_id for e in events if e.type == "tool_execution_start"]
    ends = [e.tool_call_id for e in events if e.type == "tool_execution_end"]
    assert sorted(starts) == sorted(ends) == ["a", "h", "t"]
    assert [r.tool_call_id for r in result.messages if isinstance(r, ToolResultMessage)] == ["h", "t", "a"]
    assert events[-1].type == "agent_end"


async def test_abort_of_a_lone_call_that_cannot_report_progress(no_leaked_tasks: None) -> None:
    # Such a call runs in the loop's own task; an abort must end it like a started task.
    signal = AbortSignal()
    started = asyncio.Event()
    cancelled: list[str] = []

    @tool
    async def hang() -> str:
        """Wait forever."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("hang")
            raise
        return "never"

    assert hang.reports_progress is False
    model = ScriptedModel([reply(tool_call("hang", id="h")), "unused"])
    stream = run_loop("go", Conversation(tools=[hang]), LoopConfig(model=model), signal)

    async def abort_when_started() -> None:
        await started.wait()
        signal.abort()

    aborter = asyncio.create_task(abort_when_started())
    events = await collect(stream)
    await aborter
    result = await stream.result()
    assert cancelled == ["hang"]
    assert [describe(e) for e in events] == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_update", "message_update", "message_end:assistant",
        "tool_execution_start:h", "tool_execution_end:h", "message_start:tool_result", "message_end:tool_result",
        "turn_end", "agent_end",
    ]  # fmt: skip
    assert (result.end_reason, result.messages[-1].text) == ("aborted", "Tool execution was aborted.")  # type: ignore[attr-defined]
    assert len(model.requests) == 1


async def test_a_lone_call_that_swallows_the_abort_leaves_no_cancellation_behind() -> None:
    signal = AbortSignal()
    started = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Ignore cancellation."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "kept going"
        return "never"

    async def abort_when_started() -> None:
        await started.wait()
        signal.abort()

    aborter = asyncio.create_task(abort_when_started())
    model = ScriptedModel([reply(tool_call("stubborn", id="s")), "unused"])
    result = await run_loop("go", Conversation(tools=[stubborn]), LoopConfig(model=model), signal).result()
    await aborter
    assert (result.end_reason, result.messages[-1].text) == ("aborted", "kept going")  # type: ignore[attr-defined]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation is left pending for this task


async def test_a_lone_call_that_cannot_report_progress_runs_in_the_loops_task() -> None:
    seen: list[asyncio.Task[Any] | None] = []

    @tool
    async def where() -> str:
        """Say which task runs the call."""
        seen.append(asyncio.current_task())
        return "here"

    @tool
    async def where_with_progress(ctx: ToolContext) -> str:
        """The same, but able to report progress."""
        seen.append(asyncio.current_task())
        await ctx.report("half way")
        return "there"

    model = ScriptedModel([reply(tool_call("where")), reply(tool_call("where_with_progress")), "done"])
    runner: list[asyncio.Task[Any] | None] = []

    async def consume() -> list[Any]:
        runner.append(asyncio.current_task())
        return await collect(run_loop("go", Conversation(tools=[where, where_with_progress]), LoopConfig(model=model)))

    events = await consume()
    assert seen[0] is runner[0]
    assert seen[1] is not runner[0]  # a call that may report progress gets its own task
    assert [e.partial for e in events if e.type == "tool_execution_update"] == ["half way"]
    assert events[-1].summary.end_reason == "stop"


async def test_pre_aborted_signal() -> None:
    signal = AbortSignal()
    signal.abort()
    result = await run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel(["x"])), signal).result()
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.content) == ("aborted", [])


async def test_external_cancellation_emits_agent_end_and_propagates(no_leaked_tasks: None) -> None:
    events: list[str] = []
    model = ScriptedModel([reply("abc", hang=True)])
    stream = run_loop("hi", Conversation(), LoopConfig(model=model))
    streamed = asyncio.Event()

    async def consume() -> None:
        async for ev in stream:
            events.append(ev.type)
            if ev.type == "message_update" and ev.event.type == "text_end":
                streamed.set()

    task = asyncio.ensure_future(consume())
    await streamed.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events[-1] == "agent_end"
    assert events.count("agent_end") == 1


async def test_retry_events_are_forwarded() -> None:
    sent_retry = StreamRetry(
        attempt=1, max_attempts=2, delay=0.0, error_kind="overloaded", error_message="busy", discard_partial=True
    )

    class FlakyModel:
        provider = api = "flaky"
        id = "flaky"
        context_window = 128_000

        async def stream(self, context: Any, options: Any = None) -> Any:
            b = MessageBuilder(provider="flaky", api="flaky", model="flaky")
            yield b.start()
            ev = b.text_start()
            yield ev
            yield b.text_delta("lost", ev.index)
            yield sent_retry
            b.reset()
            yield b.start()
            ev = b.text_start()
            yield ev
            yield b.text_delta("kept", ev.index)
            yield b.text_end(ev.index)
            yield b.done()

    events = await collect(run_loop("hi", Conversation(), LoopConfig(model=FlakyModel())))  # type: ignore[arg-type]
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "retry", "message_start:assistant", "message_end:assistant",
        "turn_end", "agent_end",
    ]
    retry = next(e for e in events if e.type == "retry")
    assert retry is sent_retry  # the stream's own event, not a copy
    assert Retry is StreamRetry
    assert (retry.error_kind, retry.discard_partial) == ("overloaded", True)
    assert events[-1].messages[-1].text == "kept"


async def test_broken_model_stream_raising_becomes_error() -> None:
    class Broken:
        provider = api = id = "broken"
        context_window = 128_000

        async def stream(self, context: Any, options: Any = None) -> Any:
            raise RuntimeError("adapter bug")
            yield  # pragma: no cover

    result = await run_loop("hi", Conversation(), LoopConfig(model=Broken())).result()  # type: ignore[arg-type]
    assert (result.end_reason, result.summary.error) == ("error", "RuntimeError: adapter bug")


async def test_model_stream_raising_mid_message_keeps_the_partial_message() -> None:
    class Breaks:
        provider = api = id = "breaks"
        context_window = 128_000

        async def stream(self, context: Any, options: Any = None) -> Any:
            b = MessageBuilder(provider="breaks", api="breaks", model="breaks")
            yield b.start()
            ev = b.text_start()
            yield ev
            yield b.text_delta("half", ev.index)
            raise RuntimeError("adapter bug")

    events = await collect(run_loop("hi", Conversation(), LoopConfig(model=Breaks())))  # type: ignore[arg-type]
    assert [describe(e) for e in events] == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_update", "message_update",
        "message_end:assistant", "turn_end", "agent_end",
    ]  # fmt: skip
    end = events[-1]
    assert [m.role for m in end.messages] == ["user", "assistant"]
    last = end.messages[-1]
    assert (last.text, last.stop_reason, last.error_message, last.error_kind) == (
        "half",
        "error",
        "RuntimeError: adapter bug",
        "unknown",
    )
    assert (end.summary.end_reason, end.summary.error) == ("error", "RuntimeError: adapter bug")


async def test_stream_without_terminal_event_is_error() -> None:
    class Truncated:
        provider = api = id = "t"
        context_window = 128_000

        async def stream(self, context: Any, options: Any = None) -> Any:
            b = MessageBuilder()
            yield b.start()

    result = await run_loop("hi", Conversation(), LoopConfig(model=Truncated())).result()  # type: ignore[arg-type]
    assert (result.end_reason, result.summary.error) == ("error", "stream ended without a terminal event")


async def test_interrupted_response_is_told_to_model() -> None:
    signal = AbortSignal()
    ctx = Conversation()
    model = ScriptedModel([reply("half an ans", hang=True), "sorry, continuing"])
    stream = run_loop("hi", ctx, LoopConfig(model=model), signal)
    async for ev in stream:
        if ev.type == "message_update" and ev.event.type == "text_end":
            signal.abort()
    await run_loop("go on", ctx, LoopConfig(model=model)).result()
    sent = model.requests[1].messages
    assert [(m.role, m.content[0].text) for m in sent] == [  # type: ignore[attr-defined]
        ("user", "hi"),
        ("assistant", "half an ans"),
        ("user", "[Request interrupted by user]"),
        ("user", "go on"),
    ]


def test_repair_fills_missing_and_drops_orphans() -> None:
    from ketch.llm import ToolCall

    a = AssistantMessage(content=[ToolCall(id="1", name="x"), ToolCall(id="2", name="y")], stop_reason="tool_use")
    r2 = ToolResultMessage(tool_call_id="2", tool_name="y", content=[TextContent(text="two")])
    orphan = ToolResultMessage(tool_call_id="zz", tool_name="q", content=[TextContent(text="?")])
    u = UserMessage(content="next")
    repaired = repair_messages([orphan, a, r2, r2, u])
    assert [(m.role, getattr(m, "tool_call_id", None)) for m in repaired] == [
        ("assistant", None), ("tool_result", "1"), ("tool_result", "2"), ("user", None),
    ]
    assert repaired[1].is_error  # type: ignore[attr-defined]
    assert repaired[1].text == "No result provided"  # type: ignore[attr-defined]  # llm.handoff.MISSING_TOOL_RESULT
    valid = [u, a, ToolResultMessage(tool_call_id="1", tool_name="x"), r2]
    assert repair_messages(valid) is valid


async def test_function_model_sees_repaired_transcript() -> None:
    from ketch.llm import ToolCall

    seen: list[list[str]] = []

    def respond(context: Any, options: Any) -> str:
        seen.append([m.role for m in context.messages])
        return "fine"

    broken = [
        UserMessage(content="a"),
        AssistantMessage(content=[ToolCall(id="1", name="x")], stop_reason="tool_use"),
    ]
    await run_loop("b", Conversation(messages=broken), LoopConfig(model=FunctionModel(respond))).result()
    assert seen == [["user", "assistant", "tool_result", "user"]]


async def test_the_loop_and_the_adapters_repair_a_missing_result_with_one_text() -> None:
    from ketch.llm import ToolCall
    from ketch.llm._handoff import MISSING_TOOL_RESULT
    from ketch.llm._handoff import prepare_messages

    sent: list[Any] = []

    def respond(context: Any, options: Any) -> str:
        sent.extend(context.messages)
        return "fine"

    broken = [
        UserMessage(content="a"),
        AssistantMessage(content=[ToolCall(id="1", name="x")], stop_reason="tool_use"),
    ]
    direct = prepare_messages([*broken, UserMessage(content="b")], provider="p", api="a", model="m")
    await run_loop("b", Conversation(messages=list(broken)), LoopConfig(model=FunctionModel(respond))).result()
    through_loop = sent[2]
    assert (through_loop.role, through_loop.text, through_loop.is_error) == ("tool_result", MISSING_TOOL_RESULT, True)
    assert (direct[2].text, direct[2].is_error) == (MISSING_TOOL_RESULT, True)  # type: ignore[attr-defined]


async def test_a_model_call_that_cannot_start_ends_the_run_with_its_error() -> None:
    # Both ways of starting a call: at once, and after an API key callback.
    class NoKey:
        provider = api = id = "nokey"
        context_window = 128_000
        calls = 0

        def stream(self, context: Any, options: Any = None) -> Any:
            NoKey.calls += 1
            raise RuntimeError("No API key for provider: nokey")

    for extra in ({}, {"get_api_key": lambda provider: None}):
        NoKey.calls = 0
        stream = run_loop("hi", Conversation(), LoopConfig(model=NoKey(), **extra))  # type: ignore[arg-type]
        events = await collect(stream)
        result = await stream.result()
        assert [describe(e) for e in events] == [
            "agent_start", "turn_start", "message_start:user", "message_end:user",
            "message_start:assistant", "message_end:assistant", "turn_end", "agent_end",
        ]  # fmt: skip
        last = result.messages[-1]
        assert isinstance(last, AssistantMessage)
        assert (last.stop_reason, last.error_message) == ("error", "RuntimeError: No API key for provider: nokey")
        assert (result.end_reason, NoKey.calls) == ("error", 1)
