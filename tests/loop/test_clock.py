"""``ketch.llm.use_clock``: message timestamps and the loop's durations read an injected clock."""

from __future__ import annotations

import asyncio

from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.llm import use_clock
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolExecutionEnd
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


async def test_a_run_under_an_injected_clock_is_stamped_and_timed_by_it() -> None:
    ticks = iter(float(n) for n in range(1000, 2000))
    model = ScriptedModel([reply(tool_call("noop", {}, id="c1")), reply("done")])
    tool = Tool("noop", execute=lambda args, ctx: "ok")
    with use_clock(lambda: next(ticks)):
        stream = run_loop("hi", Conversation(tools=[tool]), LoopConfig(model=model))
        events = [e async for e in stream]
        result = await stream.result()
        prompt = result.messages[0]
    assert isinstance(prompt, UserMessage)
    stamps = [m.timestamp for m in result.messages]
    assert all(1000.0 <= s < 2000.0 for s in stamps)
    assert stamps == sorted(stamps)
    assert isinstance(result.messages[2], ToolResultMessage)
    (end,) = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert end.duration == 1.0  # two consecutive readings of the clock
    assert result.summary.duration == float(int(result.summary.duration)) > 0


async def test_the_clock_applies_only_inside_its_context_and_its_tasks() -> None:
    with use_clock(lambda: 5.0):
        inside = UserMessage(content="a").timestamp
        child = await asyncio.create_task(_stamp())
    outside = UserMessage(content="b").timestamp
    assert (inside, child) == (5.0, 5.0)
    assert outside > 1_000_000_000


async def _stamp() -> float:
    return UserMessage(content="c").timestamp
