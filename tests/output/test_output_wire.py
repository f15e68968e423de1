"""White-box test: imports ketch implementation modules (private) directly.

Typed output on every HTTP adapter, against the recorded-format streams of the loopback
server (the wires of ``tests/providers/test_handoff_matrix.py``): each request carries the
schema where its API expects it (and passes that API's structural validator), and each
reply parses into the output type, in ``native`` and ``tool`` mode, a retry included.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from loopback import LoopbackServer
from test_handoff_matrix import ANTHROPIC
from test_handoff_matrix import CHAT
from test_handoff_matrix import GEMINI
from test_handoff_matrix import PROTOCOLS
from test_handoff_matrix import RESPONSES
from test_handoff_matrix import VALIDATORS
from test_handoff_matrix import WIRES
from test_handoff_matrix import Call

from ketch import Agent
from ketch.llm._providers.gemini import gemini_schema
from ketch.loop import OUTPUT_TOOL_NAME


class Weather(msgspec.Struct):
    city: str
    temp: int


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}
RETRY = "\n\nFix the errors and try again."
PROBLEM = "Structured output does not match Weather: Expected `int`, got `str` - at `$.temp`"


def sent(text: str) -> str:
    """``text`` as it appears inside a JSON request body."""
    return msgspec.json.encode(text).decode()[1:-1]


@pytest.fixture
async def server() -> AsyncIterator[LoopbackServer]:
    async with LoopbackServer() as s:
        yield s


def rid(protocol: str, n: int) -> str:
    return f"resp_out{n}" if protocol == RESPONSES else f"rid-out-{n}"


def call_id(protocol: str, n: int) -> str | None:
    return {CHAT: f"functions.final_result:{n}", RESPONSES: f"call_out{n}", ANTHROPIC: f"toolu_01Out{n}", GEMINI: None}[
        protocol
    ]


def native_format(protocol: str, body: dict[str, Any]) -> Any:
    """Where each API carries the response schema."""
    if protocol == CHAT:
        return body["response_format"]
    if protocol == RESPONSES:
        return body["text"]["format"]
    if protocol == ANTHROPIC:
        return body["output_config"]["format"]
    return {k: body["generationConfig"][k] for k in ("responseMimeType", "responseSchema")}


EXPECTED_FORMAT = {
    CHAT: {"type": "json_schema", "json_schema": {"name": "Weather", "schema": SCHEMA, "strict": True}},
    RESPONSES: {"type": "json_schema", "name": "Weather", "schema": SCHEMA, "strict": True},
    ANTHROPIC: {"type": "json_schema", "schema": SCHEMA},
    GEMINI: {"responseMimeType": "application/json", "responseSchema": gemini_schema(SCHEMA)},
}


def output_tool(protocol: str, body: dict[str, Any]) -> tuple[str, Any]:
    """The output tool's name and schema as each API declares tools."""
    if protocol == CHAT:
        fn = body["tools"][-1]["function"]
        return fn["name"], fn["parameters"]
    if protocol == RESPONSES:
        tool = body["tools"][-1]
        return tool["name"], tool["parameters"]
    if protocol == ANTHROPIC:
        tool = body["tools"][-1]
        return tool["name"], tool["input_schema"]
    decl = body["tools"][0]["functionDeclarations"][-1]
    return decl["name"], decl.get("parameters", decl.get("parametersJsonSchema"))


def tool_choice(protocol: str, body: dict[str, Any]) -> Any:
    if protocol in (CHAT, RESPONSES):
        return body["tool_choice"]
    if protocol == ANTHROPIC:
        return body["tool_choice"]
    return body["toolConfig"]


EXPECTED_CHOICE = {
    CHAT: "required",
    RESPONSES: "required",
    ANTHROPIC: {"type": "any"},
    GEMINI: {"functionCallingConfig": {"mode": "ANY"}},
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_native_output_on_every_adapter(server: LoopbackServer, protocol: str) -> None:
    wire = WIRES[protocol]
    server.queue(
        wire.reply(rid(protocol, 1), text='{"city": "Paris", "temp": "warm"}'),
        wire.reply(rid(protocol, 2), text='{"city": "Paris", "temp": 18}'),
    )
    agent = Agent(wire.model(server.url), output_type=Weather, output_mode="native")
    result = await agent.prompt("Weather in Paris?")
    assert result.end_reason == "stop"
    assert result.output == Weather(city="Paris", temp=18)
    first, second = (r.json for r in server.requests)
    for body in (first, second):
        VALIDATORS[protocol](body)
        assert native_format(protocol, body) == EXPECTED_FORMAT[protocol]
        assert "tools" not in body
    assert agent.messages[2].content[0].text == PROBLEM + RETRY  # type: ignore[union-attr]
    assert sent(PROBLEM + RETRY) in msgspec.json.encode(second).decode()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_tool_output_on_every_adapter(server: LoopbackServer, protocol: str) -> None:
    wire = WIRES[protocol]
    server.queue(
        wire.reply(rid(protocol, 1), calls=[Call(call_id(protocol, 1), OUTPUT_TOOL_NAME, {"city": "Paris", "temp": "x"})]),
        wire.reply(rid(protocol, 2), calls=[Call(call_id(protocol, 2), OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18})]),
    )
    agent = Agent(wire.model(server.url), output_type=Weather, output_mode="tool")
    result = await agent.prompt("Weather in Paris?")
    assert result.end_reason == "stop"
    assert result.output == Weather(city="Paris", temp=18)
    first, second = (r.json for r in server.requests)
    for body in (first, second):
        VALIDATORS[protocol](body)
        name, schema = output_tool(protocol, body)
        assert name == OUTPUT_TOOL_NAME
        assert schema == (gemini_schema(SCHEMA) if protocol == GEMINI else SCHEMA)
        assert tool_choice(protocol, body) == EXPECTED_CHOICE[protocol]
    # The rejected call's error result goes back paired with its call.
    assert sent(PROBLEM + RETRY) in msgspec.json.encode(second).decode()
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result", "assistant", "tool_result"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_prompted_output_on_every_adapter(server: LoopbackServer, protocol: str) -> None:
    wire = WIRES[protocol]
    server.queue(wire.reply(rid(protocol, 1), text='```json\n{"city": "Oslo", "temp": 3}\n```'))
    agent = Agent(wire.model(server.url), system_prompt="Be brief.", output_type=Weather, output_mode="prompted")
    result = await agent.prompt("Weather in Oslo?")
    assert result.output == Weather(city="Oslo", temp=3)
    body = server.requests[0].json
    VALIDATORS[protocol](body)
    assert sent(msgspec.json.encode(SCHEMA).decode()) in msgspec.json.encode(body).decode()


async def test_a_chat_endpoint_without_native_output_gets_the_output_tool(server: LoopbackServer) -> None:
    from ketch.llm._providers.openai_chat import OpenAIChatModel

    server.queue(WIRES[CHAT].reply("rid-ds", calls=[Call("call_1", OUTPUT_TOOL_NAME, {"city": "Rome", "temp": 30})]))
    model = OpenAIChatModel("deepseek-chat", provider="deepseek", base_url=server.url + "/v1", api_key="k")
    assert model.native_output is False
    result = await Agent(model, output_type=Weather).prompt("Rome?")
    assert result.output == Weather(city="Rome", temp=30)
    body = server.requests[0].json
    assert "response_format" not in body
    assert body["tool_choice"] == "required"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auto_mode_per_adapter(server: LoopbackServer, protocol: str) -> None:
    """Native where the API takes a response schema alongside tools; Gemini (before
    Gemini 3 it does not) gets the output tool."""
    model = WIRES[protocol].model(server.url)
    assert model.native_output is (protocol != GEMINI)  # type: ignore[attr-defined]
