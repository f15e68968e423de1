"""White-box test: imports ketch implementation modules (private) directly.

Typed output on the embedded llama.cpp model (SmolLM2-135M): the answer is
grammar-constrained, so whatever the model writes is a schema-valid object. Only that is
asserted (never what the model chose to write).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ketch import Agent
from ketch.llm import StreamOptions
from ketch.llm._providers.local import LocalModel
from ketch.loop import OUTPUT_TOOL_NAME

N_CTX = 2048  # as tests/providers/test_local.py: the same loaded model is shared


class Person(msgspec.Struct):
    name: str
    age: int


@pytest.fixture(scope="module")
def model() -> LocalModel:
    return LocalModel("smollm2", n_ctx=N_CTX)


def options(**kw: Any) -> StreamOptions:
    return StreamOptions(temperature=0.0, extra={"seed": 7}, **kw)


async def test_auto_mode_is_a_grammar_constrained_output_tool_call(model: LocalModel) -> None:
    agent = Agent(model, output_type=Person, options=options(max_tokens=64), output_retries=0)
    result = await agent.prompt("Invent a person.")
    assert result.end_reason == "stop", result.summary.error
    assert type(result.output) is Person
    [call] = result.messages[1].tool_calls  # type: ignore[union-attr]
    assert call.name == OUTPUT_TOOL_NAME


async def test_native_mode_is_grammar_constrained_json(model: LocalModel) -> None:
    agent = Agent(model, output_type=Person, output_mode="native", options=options(max_tokens=48), output_retries=0)
    result = await agent.prompt("Invent a person.")
    assert result.end_reason == "stop", result.summary.error
    assert type(result.output) is Person
    assert result.messages[1].tool_calls == []  # type: ignore[union-attr]


async def test_partials_stream_from_the_embedded_model(model: LocalModel) -> None:
    agent = Agent(model, output_type=Person, output_mode="native", options=options(max_tokens=48), output_retries=0)
    stream = agent.stream_output("Invent a person.")
    partials = [p async for p in stream]
    result = await stream.result()
    assert result.end_reason == "stop", result.summary.error
    assert partials and all(type(p) is Person for p in partials)
    assert partials[-1] == result.output
