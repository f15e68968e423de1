"""Partial typed output while the answer streams: ``RunStream.stream_output()`` and
``Agent.stream_output()``, with scripted streams (exact chunk boundaries).

Black-box: only public names.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import field

import pydantic
import pytest

from ketch import Agent
from ketch.loop import OUTPUT_TOOL_NAME
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@dataclasses.dataclass
class Forecast:
    city: str
    summary: str = ""
    days: list[int] = field(default_factory=list)


class Person(pydantic.BaseModel):
    name: str
    age: int


ANSWER = '{"city": "Paris", "summary": "Sunny and warm", "days": [18, 21]}'
ANSWER_PARTIALS = [
    Forecast(city="Paris"),
    Forecast(city="Paris", summary="Su"),
    Forecast(city="Paris", summary="Sunny and"),
    Forecast(city="Paris", summary="Sunny and warm"),
    Forecast(city="Paris", summary="Sunny and warm", days=[18, 21]),
]


async def test_native_partials_exact_sequence() -> None:
    model = ScriptedModel([reply(ANSWER, chunk_size=8)])
    run = run_loop("Paris?", Conversation(), LoopConfig(model=model, output_type=Forecast, output_mode="native"))
    partials = [p async for p in run.stream_output()]
    assert partials == ANSWER_PARTIALS
    result = await run.result()
    assert result.output == partials[-1]


async def test_every_partial_differs_from_the_one_before() -> None:
    model = ScriptedModel([reply(ANSWER, chunk_size=1)])
    run = run_loop("Paris?", Conversation(), LoopConfig(model=model, output_type=Forecast, output_mode="native"))
    partials = [p async for p in run.stream_output()]
    assert partials[:3] == [Forecast(city=""), Forecast(city="P"), Forecast(city="Pa")]
    assert partials[-3:] == [
        Forecast(city="Paris", summary="Sunny and warm"),
        Forecast(city="Paris", summary="Sunny and warm", days=[18]),  # never [1] or [18, 2]: numbers still growing
        Forecast(city="Paris", summary="Sunny and warm", days=[18, 21]),
    ]
    assert len(partials) == 20
    assert all(a != b for a, b in itertools.pairwise(partials))
    assert (await run.result()).output == partials[-1]


async def test_tool_mode_partials_come_from_the_output_call_arguments() -> None:
    call = tool_call(OUTPUT_TOOL_NAME, {"city": "Oslo", "summary": "Rain", "days": [7]})
    model = ScriptedModel([reply(call, chunk_size=10)])
    run = run_loop("Oslo?", Conversation(), LoopConfig(model=model, output_type=Forecast, output_mode="tool"))
    partials = [p async for p in run.stream_output()]
    assert partials == [
        Forecast(city="O"),
        Forecast(city="Oslo"),
        Forecast(city="Oslo", summary="Rain"),
        Forecast(city="Oslo", summary="Rain", days=[7]),
    ]
    assert (await run.result()).output == partials[-1]


async def test_prompted_partials_inside_a_markdown_fence() -> None:
    model = ScriptedModel([reply('```json\n{"city": "Rome", "days": [30, 31, 29]}\n```', chunk_size=6)])
    run = run_loop("Rome?", Conversation(), LoopConfig(model=model, output_type=Forecast, output_mode="prompted"))
    partials = [p async for p in run.stream_output()]
    assert partials == [
        Forecast(city=""),
        Forecast(city="Rome"),
        Forecast(city="Rome", days=[30, 31]),
        Forecast(city="Rome", days=[30, 31, 29]),
    ]


async def test_required_fields_make_the_first_partial_wait() -> None:
    model = ScriptedModel([reply('{"name": "Ada Lovelace", "age": 36}', chunk_size=4)])
    run = run_loop("Who?", Conversation(), LoopConfig(model=model, output_type=Person, output_mode="native"))
    partials = [p async for p in run.stream_output()]
    assert partials == [Person(name="Ada Lovelace", age=36)]


async def test_text_output_streams_the_text() -> None:
    model = ScriptedModel([reply("Sunny and warm", chunk_size=5)])
    run = run_loop("Weather?", Conversation(), LoopConfig(model=model, output_type=str))
    assert [p async for p in run.stream_output()] == ["Sunny", "Sunny and ", "Sunny and warm"]


async def test_a_retried_answer_ends_with_the_accepted_output() -> None:
    model = ScriptedModel([
        reply('{"city": "Lima", "days": "x"}', chunk_size=9),
        reply('{"city": "Lima", "days": [20]}', chunk_size=9),
    ])
    run = run_loop("Lima?", Conversation(), LoopConfig(model=model, output_type=Forecast, output_mode="native"))
    partials = [p async for p in run.stream_output()]
    assert partials == [Forecast(city="Lima"), Forecast(city="Lima", days=[20])]
    result = await run.result()
    assert result.summary.turns == 2
    assert result.output == partials[-1]


async def test_an_invalid_run_yields_no_accepted_output() -> None:
    bad = reply('{"city": 5}', chunk_size=50)
    model = ScriptedModel([bad, bad])
    run = run_loop("?", Conversation(), LoopConfig(model=model, output_type=Forecast, output_mode="native"))
    assert [p async for p in run.stream_output()] == []
    assert (await run.result()).end_reason == "output_invalid"


def test_stream_output_needs_an_output_type() -> None:
    run = run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel(["x"])))
    with pytest.raises(ValueError, match=r"^stream_output\(\) needs a run with an output_type$"):
        run.stream_output()
    with pytest.raises(ValueError, match=r"^stream_output\(\) needs an agent with an output_type$"):
        Agent(ScriptedModel()).stream_output("hi")


# -- Agent.stream_output ----------------------------------------------------------------


async def test_agent_stream_output_sequence_and_result() -> None:
    agent = Agent(ScriptedModel([reply(ANSWER, chunk_size=8)]), output_type=Forecast, output_mode="native")
    events: list[str] = []
    agent.subscribe(lambda e: events.append(e.type))
    stream = agent.stream_output("Paris?")
    partials = [p async for p in stream]
    assert partials == ANSWER_PARTIALS
    result = await stream.result()
    assert result.output == partials[-1]
    assert events[0] == "agent_start" and events[-1] == "agent_end"
    assert not agent.is_running


async def test_agent_stream_output_result_without_iterating() -> None:
    agent = Agent(ScriptedModel(['{"response": 7}']), output_type=int, output_mode="native")
    result = await agent.stream_output("Seven?").result()
    assert result.output == 7


async def test_leaving_the_agent_stream_early_aborts_the_run() -> None:
    model = ScriptedModel([reply('{"city": "Paris", "summary": "Sunny and warm"', chunk_size=8, hang=True)])
    agent = Agent(model, output_type=Forecast, output_mode="native")
    stream = agent.stream_output("Paris?")
    async for partial in stream:
        assert partial == Forecast(city="Paris")
        break
    await stream.aclose()
    result = await stream.result()
    assert result.end_reason == "aborted"
    assert result.output is None
    assert not agent.is_running


async def test_leaving_async_with_aborts_the_run() -> None:
    model = ScriptedModel([reply('{"response": 1, "x": "y', chunk_size=4, hang=True)])
    agent = Agent(model, output_type=int, output_mode="native")
    async with agent.stream_output("One?") as stream:
        async for _ in stream:
            break
    assert (await stream.result()).end_reason == "aborted"
    assert not agent.is_running


# -- long answers: partial values at a bounded rate -------------------------------------------


@dataclasses.dataclass
class Document:
    title: str
    body: str = ""


LONG_BODY = "".join(f'paragraph {i}: "text" with \\ and more\n' for i in range(5_000))  # about 200 KB


async def test_a_long_output_tool_call_yields_a_bounded_number_of_growing_partials() -> None:
    final = Document(title="Long", body=LONG_BODY)
    call = tool_call(OUTPUT_TOOL_NAME, dataclasses.asdict(final))
    model = ScriptedModel([reply(call, chunk_size=8)])  # about 25,000 fragments
    run = run_loop("Write", Conversation(), LoopConfig(model=model, output_type=Document, output_mode="tool"))
    partials = [p async for p in run.stream_output()]
    # every fragment of the first 1024 characters at most, then each quarter of growth
    assert 20 < len(partials) < 160
    assert partials[0] == Document(title="Long")
    assert all(p.title == "Long" and LONG_BODY.startswith(p.body) for p in partials)
    assert all(len(a.body) <= len(b.body) for a, b in itertools.pairwise(partials))
    assert partials[-1] == final
    assert (await run.result()).output == final


async def test_a_long_text_output_yields_a_bounded_number_of_partials() -> None:
    model = ScriptedModel([reply(LONG_BODY, chunk_size=8)])
    run = run_loop("Write", Conversation(), LoopConfig(model=model, output_type=str))
    partials = [p async for p in run.stream_output()]
    assert partials[:3] == [LONG_BODY[:8], LONG_BODY[:16], LONG_BODY[:24]]
    assert 128 < len(partials) < 160
    assert all(LONG_BODY.startswith(p) for p in partials)
    assert partials[-1] == LONG_BODY
