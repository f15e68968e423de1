"""The observable phase on the stateless loop (LoopConfig.phase, PhaseRef)."""

from __future__ import annotations

from typing import Any

import pytest

from ketch import Phase
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import PhaseRef
from ketch.loop import Tool
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


async def test_the_loop_writes_each_phase_and_leaves_the_terminal_kind_to_the_owner() -> None:
    ref = PhaseRef()
    seen_in_tool: list[Phase] = []

    async def run(args: dict[str, Any], ctx: Any) -> str:
        seen_in_tool.append(ref.observe())
        return "ok"

    model = ScriptedModel([reply(tool_call("t", id="a")), "done"])
    stream = run_loop("go", Conversation(tools=[Tool("t", "", None, run)]), LoopConfig(model=model, phase=ref))
    seen: list[tuple[str, Phase]] = []
    async for event in stream:
        if event.type != "message_update":
            seen.append((event.type, ref.observe()))
    by_event = [(t, p.kind, p.turn) for t, p in seen]
    assert by_event == [
        ("agent_start", "starting", 0),
        ("turn_start", "llm_in_flight", 1),
        ("message_start", "llm_in_flight", 1),
        ("message_end", "llm_in_flight", 1),
        ("message_start", "llm_in_flight", 1),
        ("message_end", "llm_in_flight", 1),
        ("tool_execution_start", "tool_executing", 1),
        ("tool_execution_end", "tool_executing", 1),
        ("message_start", "tool_executing", 1),
        ("message_end", "tool_executing", 1),
        ("turn_end", "tool_executing", 1),
        ("turn_start", "llm_in_flight", 2),
        ("message_start", "llm_in_flight", 2),
        ("message_end", "llm_in_flight", 2),
        ("turn_end", "turn_finished", 2),
        ("agent_end", "idle", 2),
    ]
    assert seen_in_tool == [Phase("tool_executing", 1)]
    assert not ref.observe().is_terminal
    assert ref.set_terminal("done") is True
    assert ref.set_terminal("error") is False  # the first terminal kind wins
    assert ref.observe() == Phase("done", 2)


async def test_a_terminal_phase_is_sticky_until_reset() -> None:
    ref = PhaseRef()
    ref.set_terminal("aborted")
    await run_loop("go", Conversation(), LoopConfig(model=ScriptedModel(["x"]), phase=ref)).result()
    assert ref.observe() == Phase("aborted", 0)
    ref.reset()
    assert ref.observe() == Phase("starting", 0)
    await run_loop("go", Conversation(), LoopConfig(model=ScriptedModel(["x"]), phase=ref)).result()
    assert ref.observe() == Phase("idle", 1)
    assert repr(ref) == "PhaseRef(idle, turn=1)"


def test_set_terminal_takes_only_terminal_kinds() -> None:
    with pytest.raises(ValueError, match="set_terminal\\(\\) takes one of aborted, approval_required, done, error, got 'idle'"):
        PhaseRef().set_terminal("idle")  # type: ignore[arg-type]
