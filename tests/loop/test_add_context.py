"""Context added for the next request (Conversation.add_context, Agent.add_context)."""

from __future__ import annotations

from typing import Any

from ketch import Agent
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import StopDecision
from ketch.loop import StopInfo
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolResult
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect
from support import describe

SCHEMA = {"type": "object", "properties": {}}


def user_texts(messages: list[Any]) -> list[str]:
    return ["".join(b.text for b in m.content) for m in messages if isinstance(m, UserMessage)]


def roles(messages: list[Any]) -> list[str]:
    return [m.role for m in messages]


async def test_a_hook_adds_context_that_is_committed_before_the_next_call() -> None:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        return "ok"

    def after(call: ToolCallInfo, result: ToolResult) -> None:
        call.conversation.add_context("Reminder: the tests live in tests/.")

    model = ScriptedModel([reply(tool_call("t", id="a")), "done"])
    conversation = Conversation(tools=[Tool("t", "", SCHEMA, run)])
    stream = run_loop("go", conversation, LoopConfig(model=model, after_tool_call=after))
    events = [describe(e) for e in await collect(stream) if e.type != "message_update"]
    assert events == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant",
        "tool_execution_start:a", "tool_execution_end:a", "message_start:tool_result", "message_end:tool_result",
        "turn_end", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end", "agent_end",
    ]
    sent = model.requests[1].messages
    assert roles(sent) == ["user", "assistant", "tool_result", "user"]
    assert user_texts(sent) == ["go", "Reminder: the tests live in tests/."]
    assert conversation.pending_context == []
    assert model.requests[0].system_prompt == model.requests[1].system_prompt  # the cache prefix is untouched


async def test_context_added_after_the_last_call_goes_with_the_next_run() -> None:
    def on_stop(info: StopInfo) -> StopDecision | None:
        info.conversation.add_context("From the stop hook.")
        return None

    model = ScriptedModel(["first", "second"])
    agent = Agent(model, on_stop=on_stop)
    await agent.prompt("one")
    assert len(model.requests) == 1
    agent.config.on_stop = None
    await agent.prompt("two")
    assert user_texts(model.requests[1].messages) == ["one", "two", "From the stop hook."]


async def test_agent_add_context_before_a_prompt() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model)
    agent.add_context("The user prefers short answers.")
    result = await agent.prompt("hi")
    assert user_texts(result.messages) == ["hi", "The user prefers short answers."]


async def test_build_llm_messages_includes_context_not_sent_yet() -> None:
    agent = Agent(ScriptedModel(["ok"]))
    await agent.prompt("hi")
    agent.add_context("Pending note.")
    built = await agent.build_llm_messages()
    assert user_texts(built) == ["hi", "Pending note."]
    assert [m.role for m in built] == ["user", "assistant", "user"]
