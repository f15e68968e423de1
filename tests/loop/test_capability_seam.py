"""The capability seam: what a capability contributes reaches the run, and nothing else changes."""

from __future__ import annotations

from typing import Any

import pytest

from ketch import Agent
from ketch import Capability
from ketch import tool
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import BeforeToolCallResult
from ketch.loop import Continue
from ketch.loop import Contribution
from ketch.loop import End
from ketch.loop import StopInfo
from ketch.loop import ToolCallInfo
from ketch.loop import TurnInfo
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def clock() -> str:
    """What time it is."""
    return "noon"


@tool
def echo(text: str) -> str:
    """Say it back.

    Args:
        text: What to say.
    """
    return text


class Clock(Capability):
    name = "clock"

    def __init__(self) -> None:
        self.runs = 0

    def contribute(self) -> Contribution:
        self.runs += 1
        return Contribution(tools=[clock], instructions="You can tell the time.", options={"temperature": 0.5})


async def test_a_capabilitys_tools_instructions_and_options_reach_the_request() -> None:
    model = ScriptedModel([reply(tool_call("clock", id="c1")), "It is noon."])
    capability = Clock()
    agent = Agent(model, system_prompt="Be brief.", tools=[echo], capabilities=[capability])
    result = await agent.prompt("time?")
    assert result.end_reason == "stop"
    assert [r.tool_names for r in model.requests] == [["echo", "clock"], ["echo", "clock"]]
    assert [r.system_prompt for r in model.requests] == ["Be brief.\n\nYou can tell the time."] * 2
    assert [r.options.temperature for r in model.requests] == [0.5, 0.5]
    assert [m.text for m in result.messages[2:3]] == ["noon"]  # the tool result
    # the agent's own definition is unchanged; the capability is asked once per run
    assert (agent.system_prompt, [t.name for t in agent.tools], capability.runs) == ("Be brief.", ["echo"], 1)
    model.add("ok")
    await agent.prompt("again?")
    assert capability.runs == 2


async def test_a_tool_name_taken_twice_names_both_owners() -> None:
    agent = Agent(ScriptedModel(["x"]), tools=[clock], capabilities=[Clock()])
    message = "capability 'clock' adds a tool named 'clock', which the agent already has"
    with pytest.raises(ValueError, match=f"^{message}$"):
        await agent.prompt("hi")
    assert (agent.is_running, agent.messages) == (False, [])  # nothing started, nothing committed


async def test_the_agents_own_tool_hook_answers_first_then_the_capabilities() -> None:
    asked: list[str] = []

    def own(info: ToolCallInfo) -> BeforeToolCallResult | None:
        asked.append(f"own {info.tool_call.name}")
        return BeforeToolCallResult.blocked("no echo") if info.tool_call.name == "echo" else None

    def guard(info: ToolCallInfo) -> BeforeToolCallResult | None:
        asked.append(f"guard {info.tool_call.name}")
        return BeforeToolCallResult.blocked("no clock")

    model = ScriptedModel([reply(tool_call("echo", {"text": "a"}, id="e"), tool_call("clock", id="c")), "done"])
    agent = Agent(
        model,
        tools=[echo, clock],
        tool_execution="sequential",
        before_tool_call=own,
        capabilities=[Capability.of("guard", before_tool_call=guard)],
    )
    result = await agent.prompt("go")
    assert asked == ["own echo", "own clock", "guard clock"]
    assert [(m.text, m.is_error) for m in result.messages[2:4]] == [("no echo", True), ("no clock", True)]


async def test_after_turn_and_at_stop_checks_decide_what_comes_next() -> None:
    seen: list[str] = []

    def after_turn(info: TurnInfo) -> End | None:
        seen.append(f"turn {info.turn}")
        return End("stop_guard", "enough tools") if info.turn == 2 else None

    model = ScriptedModel([reply(tool_call("clock", id="c1")), reply(tool_call("clock", id="c2")), "never"])
    agent = Agent(model, tools=[clock], capabilities=[Capability.of("budget", after_turn=[after_turn])])
    result = await agent.prompt("go")
    assert (result.end_reason, result.error, seen) == ("stop_guard", "enough tools", ["turn 1", "turn 2"])
    assert model.remaining == 1

    nudged: list[int] = []

    def at_stop(info: StopInfo) -> Continue | None:
        nudged.append(info.turn)
        return Continue([UserMessage(content="check your work")]) if len(nudged) == 1 else None

    model = ScriptedModel(["first", "second"])
    result = await Agent(model, capabilities=[Capability.of("nudge", at_stop=[at_stop])]).prompt("go")
    assert (result.end_reason, nudged, result.text) == ("stop", [1, 2], "second")
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "user"]
    injected = result.messages[2]
    assert isinstance(injected, UserMessage) and injected.content[0].text == "check your work"  # type: ignore[union-attr]


async def test_a_check_answering_something_else_ends_the_run_with_an_error() -> None:
    result = await Agent(ScriptedModel(["x"]), capabilities=[Capability.of("bad", at_stop=[lambda info: "stop"])]).prompt("go")
    assert result.end_reason == "error"
    assert result.error is not None and result.error.endswith("must return Continue, End or None, got str")


def test_a_contribution_names_an_unknown_model_setting() -> None:
    with pytest.raises(ValueError, match=r"^Contribution.options: unknown model setting 'temprature'; allowed: "):
        Contribution(options={"temprature": 0})


async def test_contribute_must_return_a_contribution() -> None:
    class Broken(Capability):
        def contribute(self) -> Any:
            return {"tools": []}

    with pytest.raises(TypeError, match=r"^capability 'Broken': contribute\(\) must return a Contribution, got dict$"):
        await Agent(ScriptedModel(["x"]), capabilities=[Broken()]).prompt("go")


async def test_without_capabilities_nothing_is_composed() -> None:
    model = ScriptedModel(["x"])
    await Agent(model, system_prompt="S").prompt("go")
    assert model.requests[0].system_prompt == "S"


async def test_tools_views_choose_each_calls_tools_in_order_and_follow_the_transcript() -> None:
    seen: list[tuple[list[str], int]] = []

    def unlock(tools: Any, messages: Any) -> Any:  # echo is hidden until clock has answered once
        seen.append(([t.name for t in tools], len(messages)))
        answered = any(getattr(m, "tool_name", None) == "clock" for m in messages)
        return [t for t in tools if t.name != "echo" or answered]

    def reverse(tools: Any, messages: Any) -> Any:
        return list(reversed(tools))

    model = ScriptedModel([
        reply(tool_call("echo", {"text": "early"}, id="e1")),
        reply(tool_call("clock", id="c1")),
        reply(tool_call("echo", {"text": "late"}, id="e2")),
        "done",
    ])
    agent = Agent(model, tools=[echo, clock], capabilities=[
        Capability.of("unlock", tools_view=unlock), Capability.of("reverse", tools_view=reverse),
    ])
    await agent.prompt("go")

    assert [r.tool_names for r in model.requests] == [["clock"], ["clock"], ["clock", "echo"], ["clock", "echo"]]
    results = [(m.tool_name, m.is_error, m.text) for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert results == [("echo", True, 'Tool "echo" not found'), ("clock", False, "noon"), ("echo", False, "late")]
    # at the start, once the prompt is committed, then after each turn, the last one too
    assert [n for _, n in seen] == [0, 1, 3, 5, 7, 8] and all(names == ["echo", "clock"] for names, _ in seen)
    assert [t.name for t in agent.tools] == ["echo", "clock"]  # the agent's own are not changed


async def test_a_wrapped_context_manager_is_used_by_runs_and_by_compact() -> None:
    from ketch.loop import Projection

    used: list[str] = []

    class Manager:
        async def manage(self, messages: Any, request: Any) -> Any:
            used.append(request.reason)
            yield Projection(messages=messages)

    class Wrapped:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def manage(self, messages: Any, request: Any) -> Any:
            used.append("wrapper")
            async for item in self.inner.manage(messages, request):
                yield item

    agent = Agent(ScriptedModel(["ok"]), context_manager=Manager(),
                  capabilities=[Capability.of("wrap", wrap_context_manager=Wrapped)])
    await agent.prompt("go")
    assert await agent.compact() is False
    assert used == ["wrapper", "request", "wrapper", "manual"]
