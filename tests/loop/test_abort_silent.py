"""abort_silent(): cancel a run without the interruption note reaching the model."""

from __future__ import annotations

from typing import Any

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.llm import TextContent
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply

NOTE = "[Request interrupted by user]"


def user_texts(messages: list[Any]) -> list[str]:
    return ["".join(b.text for b in m.content) for m in messages if isinstance(m, UserMessage)]


async def run_aborted(agent: Agent, silent: bool) -> None:
    def on_event(event: Any) -> None:
        if event.type == "message_update" and event.event.type == "text_delta":
            agent.abort_silent() if silent else agent.abort()

    unsubscribe = agent.subscribe(on_event)
    result = await agent.prompt("first")
    unsubscribe()
    assert result.end_reason == "aborted"


async def test_abort_silent_leaves_out_the_interruption_note() -> None:
    model = ScriptedModel([reply("a long answer", chunk_size=4), "next"])
    agent = Agent(model)
    await run_aborted(agent, silent=True)
    aborted = agent.messages[-1]
    assert aborted.stop_reason == "aborted" and aborted.error_kind == "silent"  # type: ignore[union-attr]
    assert aborted.content == [TextContent(text="a lo")]  # type: ignore[union-attr]
    assert agent.phase.kind == "aborted"
    await agent.prompt("second")
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"]
    assert user_texts(sent) == ["first", "second"]


async def test_abort_keeps_the_note_for_comparison() -> None:
    model = ScriptedModel([reply("a long answer", chunk_size=4), "next"])
    agent = Agent(model)
    await run_aborted(agent, silent=False)
    await agent.prompt("second")
    assert user_texts(model.requests[1].messages) == ["first", NOTE, "second"]


async def test_a_silent_abort_before_the_call_on_the_stateless_loop() -> None:
    signal = AbortSignal()
    signal.abort("silent")
    model = ScriptedModel(["never"])
    conversation = Conversation()
    result = await run_loop("go", conversation, LoopConfig(model=model), signal).result()
    assert model.requests == []
    assert result.end_reason == "aborted"
    assert result.messages[-1].error_kind == "silent"  # type: ignore[union-attr]
    model.add("ok")
    await run_loop("again", conversation, LoopConfig(model=model)).result()
    assert user_texts(model.requests[0].messages) == ["go", "again"]
