"""Replay of a recorded run on another (scripted) model: tools answered from the recording
while the decisions match, and the turn where they first differ."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ketch import Agent
from ketch import tool
from ketch.evals import Call
from ketch.evals import Case
from ketch.evals import Dataset
from ketch.evals import Divergence
from ketch.evals import ExactMatch
from ketch.evals import load_session
from ketch.evals import replay
from ketch.evals import run_evals
from ketch.llm import ToolResultMessage
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

ran: list[str] = []
weather = {"Oslo": "rain"}


@tool
def forecast(city: str) -> str:
    """Today's weather in a city."""
    ran.append(f"forecast {city}")
    return weather[city]


@tool
def umbrella(need: bool) -> str:
    """Pack an umbrella or not."""
    ran.append(f"umbrella {need}")
    return "packed" if need else "left home"


@tool
def sunglasses() -> str:
    """Pack sunglasses."""
    ran.append("sunglasses")
    return "packed sunglasses"


TOOLS = [forecast, umbrella, sunglasses]

ORIGINAL = [
    reply(tool_call("forecast", {"city": "Oslo"})),
    reply(tool_call("umbrella", {"need": True})),
    "Umbrella packed.",
]


def record() -> list:  # the recording: a run on the original model
    ran.clear()
    weather["Oslo"] = "rain"
    agent = Agent(ScriptedModel(ORIGINAL), tools=TOOLS)
    asyncio.run(agent.prompt("Pack for Oslo"))
    assert ran == ["forecast Oslo", "umbrella True"]
    ran.clear()
    weather["Oslo"] = "sun"  # the world changed since: replay must not ask the tool
    return list(agent.messages)


def results_seen(agent: Agent[None]) -> list[str]:
    return [m.text for m in agent.messages if isinstance(m, ToolResultMessage)]


def test_same_decisions_replay_from_the_recording_without_running_tools() -> None:
    recording = record()
    agent = Agent(ScriptedModel(ORIGINAL), tools=TOOLS)
    report = asyncio.run(replay(recording, agent))
    assert report.divergence is None
    assert (report.replayed, report.live) == (2, 0)
    assert ran == []
    assert results_seen(agent) == ["rain", "packed"]
    assert report.text == "Umbrella packed."


def test_divergence_at_the_turn_where_the_replacement_chooses_another_tool() -> None:
    recording = record()
    replacement = ScriptedModel(
        [reply(tool_call("forecast", {"city": "Oslo"})), reply(tool_call("sunglasses")), "never sent"]
    )
    agent = Agent(replacement, tools=TOOLS)
    report = asyncio.run(replay(recording, agent))
    assert report.divergence == Divergence(
        turn=1, expected=[Call("umbrella", {"need": True})], actual=[Call("sunglasses", {})]
    )
    assert str(report.divergence) == "turn 1: expected umbrella(need=True), got sunglasses()"
    assert (report.replayed, report.live) == (1, 0)
    assert ran == []  # the diverging call did not run either
    assert results_seen(agent) == [
        "rain",
        "replay: this call is not in the recording (turn 1: expected umbrella(need=True), "
        "got sunglasses()); the replay stops here",
    ]
    summary = report.results[0].summary
    assert (summary.end_reason, summary.error, summary.turns) == (
        "stop_guard",
        "replay diverged at turn 1: expected umbrella(need=True), got sunglasses()",
        2,
    )


def test_live_after_divergence_runs_the_real_tools() -> None:
    recording = record()
    replacement = ScriptedModel(
        [
            reply(tool_call("forecast", {"city": "Oslo"})),
            reply(tool_call("forecast", {"city": "Oslo"})),  # the recording packed the umbrella here
            reply(tool_call("sunglasses")),
            "Sunglasses packed.",
        ]
    )
    agent = Agent(replacement, tools=TOOLS)
    report = asyncio.run(replay(recording, agent, on_divergence="live"))
    assert report.divergence == Divergence(
        turn=1, expected=[Call("umbrella", {"need": True})], actual=[Call("forecast", {"city": "Oslo"})]
    )
    assert (report.replayed, report.live) == (1, 2)
    assert ran == ["forecast Oslo", "sunglasses"]
    assert results_seen(agent) == ["rain", "sun", "packed sunglasses"]
    assert report.results[0].summary.end_reason == "stop"
    assert report.text == "Sunglasses packed."


def test_other_arguments_and_an_early_answer_are_divergences() -> None:
    recording = record()
    agent = Agent(ScriptedModel([reply(tool_call("forecast", {"city": "Bergen"}))]), tools=TOOLS)
    report = asyncio.run(replay(recording, agent))
    assert report.divergence == Divergence(
        turn=0, expected=[Call("forecast", {"city": "Oslo"})], actual=[Call("forecast", {"city": "Bergen"})]
    )
    agent = Agent(
        ScriptedModel([reply(tool_call("forecast", {"city": "Oslo"})), "No umbrella needed."]), tools=TOOLS
    )
    report = asyncio.run(replay(recording, agent))
    assert report.divergence == Divergence(turn=1, expected=[Call("umbrella", {"need": True})], actual=[])
    assert report.text == "No umbrella needed."
    assert ran == []


def test_replay_of_a_saved_session_and_of_a_case_recording(tmp_path: Path) -> None:
    async def save() -> str:
        session = await Session.create(JsonlStore(tmp_path), cwd=tmp_path)
        agent = Agent(ScriptedModel(ORIGINAL), tools=TOOLS, session=session)
        await agent.prompt("Pack for Oslo")
        await session.close()
        return session.id

    session_id = asyncio.run(save())
    recording = asyncio.run(load_session(JsonlStore(tmp_path), session_id))
    ran.clear()
    report = asyncio.run(replay(recording, Agent(ScriptedModel(ORIGINAL), tools=TOOLS)))
    assert (report.divergence, report.replayed, ran) == (None, 2, [])

    ds = Dataset(name="trip", cases=[Case(name="oslo", input="Pack for Oslo", expected="Umbrella packed.")])
    evals = asyncio.run(
        run_evals(ds, lambda case: Agent(ScriptedModel(ORIGINAL), tools=TOOLS), [ExactMatch()])
    )
    ran.clear()
    swapped = ScriptedModel([reply(tool_call("sunglasses"))])
    report = asyncio.run(replay(evals.results[0].messages, Agent(swapped, tools=TOOLS)))
    assert str(report.divergence) == "turn 0: expected forecast(city='Oslo'), got sunglasses()"


def test_bad_replay_input() -> None:
    agent = Agent(ScriptedModel([]), tools=TOOLS)
    with pytest.raises(ValueError, match="on_divergence must be 'stop' or 'live', got 'skip'"):
        asyncio.run(replay(record(), agent, on_divergence="skip"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the recording has no user message to send"):
        asyncio.run(replay([], agent))
