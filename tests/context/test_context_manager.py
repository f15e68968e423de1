"""White-box test: imports ketch implementation modules (private) directly.

The default Compactor: strategies, cut points, summaries, triggers, breaker, no-repeat."""

from __future__ import annotations

from typing import Any

from ketch import Agent
from ketch.context import CLEARED_TOOL_RESULT
from ketch.context import Compactor
from ketch.context import ContextSummary
from ketch.context import clear_old_tool_results
from ketch.context import find_cut
from ketch.context import trim_long_text
from ketch.context._summary import SUMMARY_SYSTEM_PROMPT
from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import ImageContent
from ketch.llm import Message
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.llm import messages_from_json
from ketch.llm import messages_to_json
from ketch.loop import ContextRequest
from ketch.loop import Projection
from ketch.loop import Tool
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import tool_call


def call_turn(i: int, name: str = "read", out: str = "x" * 40, args: dict[str, Any] | None = None) -> list[Message]:
    call = ToolCall(id=f"c{i}", name=name, args=args if args is not None else {"path": f"f{i}.py"})
    return [
        AssistantMessage(content=[call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id=f"c{i}", tool_name=name, content=[TextContent(text=out)]),
    ]


def transcript(turns: int, out: str = "x" * 400) -> list[Message]:
    msgs: list[Message] = [UserMessage(content="start the task")]
    for i in range(turns):
        msgs.extend(call_turn(i, out=out))
    return msgs


async def run_manage(manager: Compactor, messages: list[Message], model: Any, reason: str = "request",
                     instructions: str | None = None) -> tuple[list[Any], Projection]:
    items = [i async for i in manager.manage(messages, ContextRequest(reason, model, AbortSignal(), "", instructions))]  # type: ignore[arg-type]
    assert type(items[-1]) is Projection
    return items[:-1], items[-1]


def summarizer(text: str = "<analysis>thinking</analysis><summary>## Goal\nfinish</summary>") -> FunctionModel:
    def respond(context: Any, options: Any) -> str:
        assert context.system_prompt == SUMMARY_SYSTEM_PROMPT
        assert options.thinking == "off"
        return text

    return FunctionModel(respond)


def test_clear_old_tool_results_keeps_newest_distinct() -> None:
    msgs = transcript(4)
    # a repeat of call 3's arguments: older identical calls are cleared even when recent
    msgs.extend(call_turn(9, out="x" * 400, args={"path": "f3.py"}))
    view, saved = clear_old_tool_results(msgs, keep_recent=2)
    texts = [m.text for m in view if isinstance(m, ToolResultMessage)]
    assert texts == [CLEARED_TOOL_RESULT, CLEARED_TOOL_RESULT, "x" * 400, CLEARED_TOOL_RESULT, "x" * 400]
    assert saved > 0
    assert [m.text for m in msgs if isinstance(m, ToolResultMessage)] == ["x" * 400] * 5  # input unchanged
    assert view[1] is msgs[1]  # unchanged messages are shared


def test_trim_long_text() -> None:
    long = "a" * 3000 + "b" * 3000
    msgs: list[Message] = [UserMessage(content=long)] + [UserMessage(content="short")] * 4
    view, saved = trim_long_text(msgs)
    assert view[0].content[0].text == "a" * 1200 + "\n[4000 characters trimmed]\n" + "b" * 800  # type: ignore[attr-defined]
    assert saved > 0 and view[1] is msgs[1]


def test_cut_never_separates_call_and_result() -> None:
    msgs = transcript(10)
    for keep in range(1, 1500, 37):
        cut = find_cut(msgs, keep)
        if cut is None:
            continue
        assert type(msgs[cut.index]) is not ToolResultMessage
        if cut.turn_start is not None:
            assert type(msgs[cut.turn_start]) is UserMessage


def test_cut_at_user_message_is_not_split() -> None:
    msgs: list[Message] = [UserMessage(content="a" * 400), AssistantMessage(content=[TextContent(text="b" * 400)]),
                           UserMessage(content="c" * 400), AssistantMessage(content=[TextContent(text="d" * 400)])]
    cut = find_cut(msgs, 150)
    assert cut is not None and (cut.index, cut.turn_start) == (2, None)
    assert find_cut(msgs, 10_000) is None


async def test_under_threshold_is_untouched() -> None:
    manager = Compactor(window=100_000)
    msgs = transcript(3)
    events, projection = await run_manage(manager, msgs, summarizer())
    assert events == [] and projection.messages is msgs and projection.commit is None
    assert manager.summary_calls == 0


async def test_cheap_strategy_projection_is_transient() -> None:
    msgs = transcript(20)  # ~20 * 100 tokens of tool output
    manager = Compactor(window=2000, reserve=500, keep_tool_results=3)
    events, projection = await run_manage(manager, msgs, summarizer())
    assert events == [] and projection.commit is None
    cleared = [m for m in projection.messages if isinstance(m, ToolResultMessage) and m.text == CLEARED_TOOL_RESULT]
    assert len(cleared) == 17
    assert all(m.text == "x" * 400 for m in msgs if isinstance(m, ToolResultMessage))
    assert manager.summary_calls == 0


async def test_summary_compaction_commits_summary_and_recent() -> None:
    msgs = transcript(30, out="y" * 2000)
    msgs.append(UserMessage(content=[TextContent(text="look"), ImageContent(data="aGk=")]))
    manager = Compactor(window=4000, reserve=1000, keep_recent_tokens=1200)
    model = summarizer()
    events, projection = await run_manage(manager, msgs, model)
    assert [e.type for e in events] == ["compaction_start", "compaction_end"]
    end = events[1]
    assert end.reason == "threshold" and end.error is None and end.tokens_after < end.tokens_before
    assert projection.commit is not None and projection.messages is projection.commit
    summary = projection.commit[0]
    assert isinstance(summary, ContextSummary)
    assert summary.summary == "## Goal\nfinish"
    assert end.messages_summarized == summary.messages_summarized == len(msgs) - len(projection.commit) + 1
    assert summary.read_files[:2] == ["f0.py", "f1.py"]
    kept = projection.commit[1:]
    assert kept == msgs[len(msgs) - len(kept):]
    assert type(kept[0]) is not ToolResultMessage
    prompt = model.requests[0].messages[0].content[0].text  # type: ignore[attr-defined]
    assert "## Goal" in prompt and "## Critical Context" in prompt and "[Tool result] read:" in prompt
    rendered = summary.to_llm().content[0].text  # type: ignore[union-attr]
    assert rendered.startswith("<context-summary>\n## Goal\nfinish\n</context-summary>\n\n<read-files>\nf0.py\n")


async def test_split_turn_gets_turn_context_and_update_uses_previous_summary() -> None:
    msgs = transcript(30, out="y" * 2000)
    manager = Compactor(window=4000, reserve=1000, keep_recent_tokens=1200, keep_tool_results=100)
    model = summarizer()
    _, projection = await run_manage(manager, msgs, model)
    first_prompt = model.requests[0].messages[0].content[0].text  # type: ignore[attr-defined]
    assert "## Turn Context (split turn)" in first_prompt  # the one user message starts a turn that is cut
    assert projection.commit is not None
    grown = list(projection.commit) + transcript(30, out="z" * 2000)[1:]
    _, projection2 = await run_manage(manager, grown, model)
    second_prompt = model.requests[1].messages[0].content[0].text  # type: ignore[attr-defined]
    assert "<previous-summary>\n## Goal\nfinish\n</previous-summary>" in second_prompt
    assert "[Previous summary]" not in second_prompt
    assert projection2.commit is not None and isinstance(projection2.commit[0], ContextSummary)
    assert sum(isinstance(m, ContextSummary) for m in projection2.commit) == 1


async def test_manual_compact_with_instructions_and_pre_compact() -> None:
    msgs = transcript(10)
    seen: list[Any] = []

    def pre(info: Any) -> str:
        seen.append((info.reason, info.instructions))
        return "mention f9.py"

    manager = Compactor(window=100_000, keep_recent_tokens=300, pre_compact=pre)
    model = summarizer()
    _, projection = await run_manage(manager, msgs, model, reason="manual", instructions="focus on tests")
    assert seen == [("manual", "focus on tests")]
    prompt = model.requests[0].messages[0].content[0].text  # type: ignore[attr-defined]
    assert prompt.endswith("Additional instructions: focus on tests\nmention f9.py")
    assert projection.commit is not None


async def test_pre_compact_veto() -> None:
    manager = Compactor(window=100_000, keep_recent_tokens=300, pre_compact=lambda info: False)
    msgs = transcript(10)
    events, projection = await run_manage(manager, msgs, summarizer(), reason="manual")
    assert events == [] and projection.commit is None and manager.summary_calls == 0


async def test_circuit_breaker_falls_back_to_cheap_strategies() -> None:
    failing = ScriptedModel([])  # every summary call fails: "no more scripted responses"
    manager = Compactor(window=3000, reserve=500, keep_recent_tokens=600, max_failures=3)
    msgs = transcript(40, out="y" * 2000)
    for attempt in range(5):
        events, projection = await run_manage(manager, msgs, failing)
        assert projection.commit is None
        if attempt < 3:
            assert [e.type for e in events] == ["compaction_start", "compaction_end"]
            assert events[1].error == "no more scripted responses"
        else:
            assert events == []
    assert manager.summary_calls == 3


async def test_summary_round_trips_through_json() -> None:
    s = ContextSummary(summary="x", tokens_before=10, read_files=["a"], modified_files=["b"])
    assert messages_from_json(messages_to_json([s])) == [s]


async def test_no_repeat_summaries_over_long_conversation() -> None:
    """A 300-turn agent with 2k-char tool outputs on an 8k window: summaries stay rare."""
    turns = 300
    agent_calls = {"n": 0}

    def respond(context: Any, options: Any) -> Any:
        if context.system_prompt == SUMMARY_SYSTEM_PROMPT:
            return "<summary>## Goal\nkeep going</summary>"
        agent_calls["n"] += 1
        tokens = sum(len(getattr(b, "text", "")) for m in context.messages for b in getattr(m, "content", [])) // 4
        assert tokens < 8000, "a request exceeded the window"
        if agent_calls["n"] > turns:
            return Reply(blocks=[TextContent(text="done")], usage=Usage(input=tokens, output=5))
        return Reply(blocks=[tool_call("read", {"path": f"f{agent_calls['n']}.py"})], usage=Usage(input=tokens, output=20))

    async def read(args: dict[str, Any], ctx: Any) -> str:
        return "z" * 2000

    model = FunctionModel(respond)
    manager = Compactor(window=8000)
    agent = Agent(model, tools=[Tool("read", "", None, read)], context_manager=manager)
    compactions: list[Any] = []
    agent.subscribe(lambda ev: compactions.append(ev) if ev.type == "compaction_end" else None)
    result = await agent.prompt("go")
    assert result.end_reason == "stop"
    assert manager.summary_calls == len(compactions)
    # cheap strategies carry most turns; a committed summary is reused until the window refills
    assert 0 < manager.summary_calls <= turns // 30
    assert all(c.error is None for c in compactions)


async def test_reactive_overflow_with_real_manager() -> None:
    from ketch.testing import error_reply

    calls = {"n": 0}

    def respond(context: Any, options: Any) -> Any:
        if context.system_prompt == SUMMARY_SYSTEM_PROMPT:
            return "<summary>short</summary>"
        calls["n"] += 1
        return error_reply("prompt is too long", kind="context_overflow") if calls["n"] == 1 else "ok"

    history = transcript(12)
    agent = Agent(FunctionModel(respond), messages=history, context_manager=Compactor(window=1_000_000))
    result = await agent.prompt("continue")
    assert result.text == "ok"
    assert isinstance(agent.messages[0], ContextSummary)

