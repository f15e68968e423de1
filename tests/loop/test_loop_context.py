"""White-box test: imports ketch implementation modules (private) directly.

The loop's context-manager hook: projection, committed rewrites, overflow recovery, usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ketch import Agent
from ketch.llm import AssistantMessage
from ketch.llm import Message
from ketch.llm import TextContent
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.llm._tokens import context_usage
from ketch.llm._tokens import estimate_text_tokens
from ketch.loop import CompactionEnd
from ketch.loop import CompactionStart
from ketch.loop import ContextRequest
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Projection
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from support import collect
from support import describe


class FakeManager:
    """Drops everything but the last message; commits on overflow and manual requests."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    async def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
        self.requests.append(request.reason)
        if request.reason == "request":
            yield Projection(messages=messages[-1:])
            return
        yield CompactionStart(reason=request.reason, tokens_before=100)
        summary = UserMessage(content=f"summary ({request.instructions or 'auto'})")
        kept = [summary, *messages[-1:]]
        yield CompactionEnd(reason=request.reason, tokens_before=100, tokens_after=10,
                            messages_summarized=len(messages) - 1, cost=0.0)
        yield Projection(messages=kept, commit=kept)


async def test_projection_is_transient() -> None:
    model = ScriptedModel(["ok"])
    history: list[Message] = [UserMessage(content="old"), AssistantMessage(content=[TextContent(text="old answer")])]
    ctx = Conversation(messages=history)
    await run_loop("new", ctx, LoopConfig(model=model, context_manager=FakeManager())).result()
    assert [m.content[0].text for m in model.requests[0].messages] == ["new"]  # type: ignore[attr-defined]
    assert len(ctx.messages) == 4


async def test_overflow_compacts_once_and_retries_same_request() -> None:
    manager = FakeManager()
    model = ScriptedModel([error_reply("prompt is too long", kind="context_overflow"), "fits now"])
    history: list[Message] = [UserMessage(content="a"), AssistantMessage(content=[TextContent(text="b")])]
    ctx = Conversation(messages=history)
    stream = run_loop("c", ctx, LoopConfig(model=model, context_manager=manager))
    events = await collect(stream)
    result = await stream.result()
    assert result.text == "fits now"
    assert manager.requests == ["request", "overflow"]
    labels = [describe(e) for e in events if e.type != "message_update"]
    assert labels == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "retry", "compaction_start", "compaction_end",
        "message_start:assistant", "message_end:assistant", "turn_end", "agent_end",
    ]
    assert [m.content[0].text for m in ctx.messages] == ["summary (auto)", "c", "fits now"]  # type: ignore[attr-defined]


async def test_second_overflow_ends_run() -> None:
    model = ScriptedModel([error_reply("too long", kind="context_overflow"), error_reply("still too long", kind="context_overflow")])
    result = await run_loop("c", Conversation(), LoopConfig(model=model, context_manager=FakeManager())).result()
    assert result.end_reason == "error"
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.error_kind, last.error_message) == ("context_overflow", "still too long")


async def test_overflow_without_manager_is_plain_error() -> None:
    model = ScriptedModel([error_reply("too long", kind="context_overflow")])
    result = await run_loop("c", Conversation(), LoopConfig(model=model)).result()
    assert (result.end_reason, len(model.requests)) == ("error", 1)


async def test_manual_compact_on_agent() -> None:
    agent = Agent(ScriptedModel(["one"]), context_manager=FakeManager())
    await agent.prompt("hi")
    seen: list[str] = []
    agent.subscribe(lambda ev: seen.append(ev.type))
    assert await agent.compact("keep names") is True
    assert seen == ["compaction_start", "compaction_end"]
    assert [m.content[0].text for m in agent.messages] == ["summary (keep names)", "one"]  # type: ignore[attr-defined]


def test_context_usage_anchors_on_reported_usage() -> None:
    a = AssistantMessage(content=[TextContent(text="x")], usage=Usage(input=1000, cache_read=500, output=20))
    msgs: list[Message] = [UserMessage(content="q"), a, UserMessage(content="abcd" * 10)]
    u = context_usage(msgs, 10_000)
    assert (u.tokens, u.window) == (1000 + 500 + 20 + 10, 10_000)
    assert round(u.percent, 2) == 15.3
    # without usage: pure estimate
    assert context_usage([UserMessage(content="abcd" * 10)], 100).tokens == 10


def test_estimates_latin_and_cjk() -> None:
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("hello world!") == 3
    assert estimate_text_tokens("你好世界") == 6


async def test_turn_end_reports_context_usage() -> None:
    model = ScriptedModel([reply("ok", usage=Usage(input=50, output=5))])
    events = await collect(run_loop("hi", Conversation(), LoopConfig(model=model)))
    (turn_end,) = [e for e in events if e.type == "turn_end"]
    assert turn_end.context is not None
    assert (turn_end.context.tokens, turn_end.context.window) == (55, 128_000)


def test_context_meter_is_incremental_and_follows_rewrites() -> None:
    from ketch.context import ContextSummary
    from ketch.llm._tokens import ContextMeter

    meter = ContextMeter()
    old = AssistantMessage(content=[TextContent(text="x")], usage=Usage(input=5000, output=10), timestamp=1.0)
    msgs: list[Message] = [UserMessage(content="q", timestamp=0.5), old]
    assert meter.measure(msgs, 10_000).tokens == 5010
    msgs.append(UserMessage(content="abcd" * 10, timestamp=2.0))
    assert meter.measure(msgs, 10_000).tokens == 5020
    # after compaction the kept assistant message's usage describes the old, larger context
    summary = ContextSummary(summary="abcd" * 5, timestamp=3.0)
    msgs[:] = [summary, old, msgs[2]]
    assert meter.measure(msgs, 10_000).tokens == context_usage(msgs, 10_000).tokens
    assert meter.measure(msgs, 10_000).tokens < 100


async def test_summary_cost_counts_towards_the_run() -> None:
    class CostlyManager(FakeManager):
        async def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
            yield CompactionStart(reason="threshold", tokens_before=100)
            yield CompactionEnd(reason="threshold", tokens_before=100, tokens_after=10, messages_summarized=1, cost=0.25)
            yield Projection(messages=messages)

    model = ScriptedModel(["ok"])
    result = await run_loop("hi", Conversation(), LoopConfig(model=model, context_manager=CostlyManager())).result()
    assert result.cost == 0.25


async def test_summary_tokens_and_cost_count_towards_the_run() -> None:
    summary_usage = Usage(input=900, output=100, total_tokens=1000)
    summary_usage.cost.total = 0.5

    class SummarizingManager(FakeManager):
        async def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
            yield CompactionStart(reason="threshold", tokens_before=100)
            yield CompactionEnd(
                reason="threshold",
                tokens_before=100,
                tokens_after=10,
                messages_summarized=1,
                cost=0.5,
                usage=summary_usage,
            )
            yield Projection(messages=messages)

    model = ScriptedModel([reply("ok", usage=Usage(input=50, output=5, total_tokens=55))])
    config = LoopConfig(model=model, context_manager=SummarizingManager())
    result = await run_loop("hi", Conversation(), config).result()
    usage = result.summary.usage
    assert (usage.input, usage.output, usage.total_tokens, result.cost) == (950, 105, 1055, 0.5)
