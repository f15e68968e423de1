"""Typed output with scripted models: every mode, every kind of type, retries, validators.

Black-box: only public names (``ketch``, ``ketch.loop``, ``ketch.testing``).
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Literal
from typing import TypedDict

import msgspec
import pydantic
import pytest

from ketch import Agent
from ketch import RejectOutput
from ketch import RunError
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import OUTPUT_TOOL_NAME
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolResult
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

RETRY = "\n\nFix the errors and try again."


def text(message: Any) -> str:
    """The text of a user or tool-result message."""
    return "".join(b.text for b in message.content)


class PWeather(pydantic.BaseModel):
    city: str
    temp: int


@dataclasses.dataclass
class DWeather:
    city: str
    temp: int


class TWeather(TypedDict):
    city: str
    temp: int


class SWeather(msgspec.Struct):
    city: str
    temp: int


class Cat(msgspec.Struct, tag="cat"):
    name: str


class Dog(msgspec.Struct, tag="dog"):
    name: str
    good: bool = True


class PCat(pydantic.BaseModel):
    kind: Literal["cat"]
    name: str


class PDog(pydantic.BaseModel):
    kind: Literal["dog"]
    name: str


OBJECT_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}


def wrapped(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"response": schema},
        "required": ["response"],
        "additionalProperties": False,
    }


# (type, JSON answer, expected output)
KINDS: list[tuple[Any, str, Any]] = [
    (PWeather, '{"city": "Paris", "temp": 18}', PWeather(city="Paris", temp=18)),
    (DWeather, '{"city": "Paris", "temp": 18}', DWeather(city="Paris", temp=18)),
    (TWeather, '{"city": "Paris", "temp": 18}', {"city": "Paris", "temp": 18}),
    (SWeather, '{"city": "Paris", "temp": 18}', SWeather(city="Paris", temp=18)),
    (int, '{"response": 42}', 42),
    (bool, '{"response": true}', True),
    (float, '{"response": 2.5}', 2.5),
    (list[str], '{"response": ["a", "b"]}', ["a", "b"]),
    (Literal["yes", "no"], '{"response": "no"}', "no"),
    (int | str, '{"response": "seven"}', "seven"),
    (Cat | Dog, '{"response": {"type": "dog", "name": "Rex", "good": true}}', Dog(name="Rex")),
    (PCat | PDog, '{"response": {"kind": "cat", "name": "Tom"}}', PCat(kind="cat", name="Tom")),
    (DWeather | None, '{"response": null}', None),
]
KIND_IDS = ["pydantic", "dataclass", "typeddict", "struct", "int", "bool", "float", "list", "literal", "union",
            "tagged-union", "pydantic-union", "optional"]


def config(model: ScriptedModel, output_type: Any, **kw: Any) -> LoopConfig[None]:
    return LoopConfig(model=model, output_type=output_type, **kw)


async def run(model: ScriptedModel, output_type: Any, prompt: str = "Weather in Paris?", **kw: Any) -> Any:
    return await run_loop(prompt, Conversation(), config(model, output_type, **kw)).result()


# -- every kind of type, in every mode ---------------------------------------------------


@pytest.mark.parametrize(("output_type", "answer", "expected"), KINDS, ids=KIND_IDS)
async def test_native_mode_every_kind(output_type: Any, answer: str, expected: Any) -> None:
    model = ScriptedModel([answer])
    result = await run(model, output_type, output_mode="native")
    assert result.end_reason == "stop"
    assert result.output == expected
    assert type(result.output) is type(expected)
    fmt = model.requests[0].options.response_format
    assert fmt is not None and fmt["strict"] is True
    assert fmt["schema"]["type"] == "object"
    model.assert_complete()


@pytest.mark.parametrize(("output_type", "answer", "expected"), KINDS, ids=KIND_IDS)
async def test_tool_mode_every_kind(output_type: Any, answer: str, expected: Any) -> None:
    model = ScriptedModel([reply(tool_call(OUTPUT_TOOL_NAME, msgspec.json.decode(answer), id="out1"))])
    result = await run(model, output_type, output_mode="tool")
    assert result.end_reason == "stop"
    assert result.output == expected
    assert type(result.output) is type(expected)
    request = model.requests[0]
    assert request.tool_names == [OUTPUT_TOOL_NAME]
    assert request.options.tool_choice == "required"
    assert request.options.response_format is None


@pytest.mark.parametrize(("output_type", "answer", "expected"), KINDS, ids=KIND_IDS)
async def test_prompted_mode_every_kind(output_type: Any, answer: str, expected: Any) -> None:
    model = ScriptedModel([f"```json\n{answer}\n```"])
    result = await run(model, output_type, output_mode="prompted", )
    assert result.end_reason == "stop"
    assert result.output == expected
    assert type(result.output) is type(expected)
    request = model.requests[0]
    assert request.options.response_format is None
    assert request.tools == []
    assert request.system_prompt.startswith("Answer with one JSON object that follows this JSON schema")


async def test_native_request_carries_the_strict_schema() -> None:
    model = ScriptedModel(['{"city": "Paris", "temp": 18}'])
    await run(model, DWeather, output_mode="native")
    assert model.requests[0].options.response_format == {"name": "DWeather", "schema": OBJECT_SCHEMA, "strict": True}


async def test_primitive_schema_is_wrapped_in_a_response_object() -> None:
    model = ScriptedModel(['{"response": 3}'])
    await run(model, int, output_mode="native")
    assert model.requests[0].options.response_format == {
        "name": "int",
        "schema": wrapped({"type": "integer"}),
        "strict": True,
    }


async def test_a_bare_value_is_accepted_for_a_wrapped_type() -> None:
    result = await run(ScriptedModel(["42"]), int, output_mode="native")
    assert result.output == 42


async def test_tool_mode_request_offers_the_output_tool_after_the_tools() -> None:
    def lookup(args: dict[str, Any], ctx: Any) -> str:
        return "18"

    tool = Tool("lookup", "Look it up", {"type": "object", "properties": {}}, lookup)
    model = ScriptedModel([
        reply(tool_call("lookup", {}, id="c1")),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}, id="c2")),
    ])
    conversation = Conversation(system_prompt="Be brief.", tools=[tool])
    result = await run_loop("Weather?", conversation, config(model, DWeather, output_mode="tool")).result()
    assert result.output == DWeather(city="Paris", temp=18)
    spec = model.requests[0].tools[1]
    assert (spec.name, spec.parameters) == (OUTPUT_TOOL_NAME, OBJECT_SCHEMA)
    assert spec.description == "Give the final answer: call this tool with the answer as its arguments. It ends the run."
    assert model.requests[0].system_prompt == "Be brief."
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant", "tool_result"]
    final = result.messages[-1]
    assert (final.tool_call_id, final.is_error, final.content) == ("c2", False, [TextContent(text="Final result accepted.")])
    assert result.summary.tool_calls == 1  # the output call is not a tool call


async def test_tool_mode_keeps_an_explicit_tool_choice() -> None:
    model = ScriptedModel([reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}))])
    await run(model, DWeather, output_mode="tool", options=StreamOptions(tool_choice=OUTPUT_TOOL_NAME))
    assert model.requests[0].options.tool_choice == OUTPUT_TOOL_NAME


async def test_prompted_mode_appends_the_schema_to_the_system_prompt() -> None:
    model = ScriptedModel(['{"city": "Paris", "temp": 18}'])
    conversation = Conversation(system_prompt="You report weather.")
    await run_loop("Paris?", conversation, config(model, DWeather, output_mode="prompted")).result()
    assert model.requests[0].system_prompt == (
        "You report weather.\n\nAnswer with one JSON object that follows this JSON schema, and nothing else "
        "(no Markdown fence, no text before or after it):\n"
        + msgspec.json.encode(OBJECT_SCHEMA).decode()
    )
    assert conversation.system_prompt == "You report weather."


async def test_str_in_auto_mode_is_the_final_text() -> None:
    model = ScriptedModel(["Sunny, 18°C."])
    result = await run(model, str)
    assert result.output == "Sunny, 18°C."
    request = model.requests[0]
    assert (request.options.response_format, request.tools, request.system_prompt) == (None, [], "")


async def test_str_with_a_forced_mode_is_wrapped() -> None:
    model = ScriptedModel(['{"response": "Sunny"}'])
    result = await run(model, str, output_mode="native")
    assert result.output == "Sunny"
    assert model.requests[0].options.response_format["schema"] == wrapped({"type": "string"})  # type: ignore[index]


# -- auto mode: the model's capability ---------------------------------------------------


class NativeScripted(ScriptedModel):
    native_output = True


async def test_auto_mode_is_native_for_a_model_with_native_output() -> None:
    model = NativeScripted(['{"city": "Paris", "temp": 18}'])
    result = await run(model, DWeather)
    assert result.output == DWeather(city="Paris", temp=18)
    assert model.requests[0].options.response_format is not None
    assert model.requests[0].tools == []


async def test_auto_mode_is_the_output_tool_otherwise() -> None:
    model = ScriptedModel([reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}))])
    result = await run(model, DWeather)
    assert result.output == DWeather(city="Paris", temp=18)
    assert model.requests[0].tool_names == [OUTPUT_TOOL_NAME]
    assert model.requests[0].options.response_format is None


# -- invalid output: a retry prompt, then valid -------------------------------------------

TYPE_PROBLEM = "Structured output does not match DWeather: Expected `int`, got `str` - at `$.temp`"


async def test_invalid_text_gets_a_retry_prompt_then_valid() -> None:
    model = ScriptedModel(['{"city": "Paris", "temp": "warm"}', '{"city": "Paris", "temp": 18}'])
    result = await run(model, DWeather, output_mode="native")
    assert result.end_reason == "stop"
    assert result.output == DWeather(city="Paris", temp=18)
    retry = result.messages[2]
    assert type(retry) is UserMessage
    assert text(retry) == TYPE_PROBLEM + RETRY
    assert text(model.requests[1].messages[-1]) == TYPE_PROBLEM + RETRY
    assert result.summary.turns == 2


async def test_text_that_is_not_json_gets_a_retry_prompt() -> None:
    model = ScriptedModel(["It is sunny.", '{"city": "Paris", "temp": 18}'])
    result = await run(model, DWeather, output_mode="prompted")
    assert result.output == DWeather(city="Paris", temp=18)
    retry = result.messages[2]
    assert type(retry) is UserMessage
    assert text(retry) == (
        "Structured output for DWeather is not valid JSON: JSON is malformed: invalid character (byte 0)" + RETRY
    )


async def test_invalid_tool_arguments_get_an_error_result_then_valid() -> None:
    model = ScriptedModel([
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": "warm"}, id="a")),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}, id="b")),
    ])
    result = await run(model, DWeather, output_mode="tool")
    assert result.output == DWeather(city="Paris", temp=18)
    first = result.messages[2]
    assert type(first) is ToolResultMessage
    assert (first.tool_call_id, first.tool_name, first.is_error) == ("a", OUTPUT_TOOL_NAME, True)
    assert first.content == [TextContent(text=TYPE_PROBLEM + RETRY)]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "assistant", "tool_result"]


async def test_malformed_tool_arguments_get_an_error_result() -> None:
    model = ScriptedModel([
        reply(tool_call(OUTPUT_TOOL_NAME, id="a", raw='{"city": "Par')),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}, id="b")),
    ])
    result = await run(model, DWeather, output_mode="tool")
    assert result.output == DWeather(city="Paris", temp=18)
    first = result.messages[2]
    assert type(first) is ToolResultMessage and first.is_error
    text = first.content[0].text  # type: ignore[union-attr]
    assert text.startswith("Structured output for DWeather is not valid JSON: invalid JSON: ")
    assert text.endswith(RETRY)


async def test_text_in_tool_mode_gets_a_retry_prompt() -> None:
    model = ScriptedModel(["Sunny.", reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}))])
    result = await run(model, DWeather, output_mode="tool")
    assert result.output == DWeather(city="Paris", temp=18)
    assert type(result.messages[2]) is UserMessage
    assert text(result.messages[2]) == (
        "Plain text is not accepted as the answer: call the final_result tool with the answer as its arguments." + RETRY
    )


async def test_other_calls_beside_the_output_call_are_not_run() -> None:
    ran: list[str] = []

    def lookup(args: dict[str, Any], ctx: Any) -> str:
        ran.append("lookup")
        return "18"

    tool = Tool("lookup", "Look it up", {"type": "object", "properties": {}}, lookup)
    model = ScriptedModel([
        reply(tool_call("lookup", {}, id="c1"), tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}, id="c2")),
    ])
    result = await run_loop("Weather?", Conversation(tools=[tool]), config(model, DWeather, output_mode="tool")).result()
    assert ran == []
    assert result.output == DWeather(city="Paris", temp=18)
    skipped, final = result.messages[2], result.messages[3]
    assert type(skipped) is ToolResultMessage and type(final) is ToolResultMessage
    assert (skipped.tool_call_id, skipped.is_error) == ("c1", True)
    assert skipped.content == [TextContent(text="Tool not executed: the same response called the final_result tool.")]
    assert (final.tool_call_id, final.is_error) == ("c2", False)


# -- retries exhausted ---------------------------------------------------------------------


async def test_retries_exhausted_end_the_run_with_output_invalid() -> None:
    bad = '{"city": "Paris", "temp": "warm"}'
    model = ScriptedModel([bad, bad])
    result = await run(model, DWeather, output_mode="native")
    assert result.end_reason == "output_invalid"
    assert result.summary.error == f"Invalid output after 1 retry: {TYPE_PROBLEM}"
    assert result.output is None
    assert result.summary.turns == 2
    model.assert_complete()
    with pytest.raises(RunError, match="^Run ended with output_invalid: Invalid output after 1 retry: "):
        result.raise_for_error()


async def test_output_retries_is_configurable() -> None:
    bad = reply(tool_call(OUTPUT_TOOL_NAME, {"city": 1, "temp": 18}))
    model = ScriptedModel([bad, bad, bad, bad])
    result = await run(model, DWeather, output_mode="tool", output_retries=3)
    assert result.end_reason == "output_invalid"
    assert result.summary.error == (
        "Invalid output after 3 retries: Structured output does not match DWeather: Expected `str`, got `int` - at "
        "`$.city`"
    )
    assert result.summary.turns == 4
    assert result.summary.tool_calls == 0


async def test_no_retries() -> None:
    model = ScriptedModel(["nope"])
    result = await run(model, int, output_mode="native", output_retries=0)
    assert result.end_reason == "output_invalid"
    assert result.summary.error is not None
    assert result.summary.error.startswith("Invalid output after 0 retries: Structured output for int is not valid JSON")


# -- output validators -------------------------------------------------------------------


async def test_sync_validator_rejects_by_raising() -> None:
    seen: list[Any] = []

    def positive(w: DWeather) -> None:
        seen.append(w)
        if w.temp < 0:
            raise RejectOutput("temp must be positive")

    model = ScriptedModel(['{"city": "Oslo", "temp": -3}', '{"city": "Oslo", "temp": 3}'])
    result = await run(model, DWeather, output_mode="native", output_validators=[positive])
    assert result.output == DWeather(city="Oslo", temp=3)
    assert seen == [DWeather(city="Oslo", temp=-3), DWeather(city="Oslo", temp=3)]
    assert text(result.messages[2]) == "temp must be positive" + RETRY


async def test_async_validator_rejects_by_returning() -> None:
    async def known_city(w: DWeather) -> RejectOutput | None:
        return RejectOutput(f"unknown city {w.city!r}") if w.city != "Paris" else None

    model = ScriptedModel([
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Atlantis", "temp": 18}, id="a")),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18}, id="b")),
    ])
    result = await run(model, DWeather, output_mode="tool", output_validators=[known_city])
    assert result.output == DWeather(city="Paris", temp=18)
    assert result.messages[2].content == [TextContent(text="unknown city 'Atlantis'" + RETRY)]  # type: ignore[union-attr]


async def test_validators_run_in_order_and_the_first_rejection_counts() -> None:
    calls: list[str] = []

    def first(w: DWeather) -> None:
        calls.append("first")
        raise RejectOutput("first says no")

    def second(w: DWeather) -> None:
        calls.append("second")

    model = ScriptedModel(['{"city": "Oslo", "temp": 3}'] * 2)
    result = await run(model, DWeather, output_mode="native", output_validators=[first, second])
    assert calls == ["first", "first"]
    assert result.end_reason == "output_invalid"
    assert result.summary.error == "Invalid output after 1 retry: first says no"


async def test_a_validator_that_fails_ends_the_run_with_an_error() -> None:
    def broken(w: DWeather) -> None:
        raise KeyError("boom")

    model = ScriptedModel(['{"city": "Oslo", "temp": 3}'])
    result = await run(model, DWeather, output_mode="native", output_validators=[broken])
    assert result.end_reason == "error"
    assert result.summary.error == "Output validator broken failed: KeyError: 'boom'"
    assert result.output is None


async def test_validators_see_text_output() -> None:
    def short(text: str) -> None:
        if len(text) > 5:
            raise RejectOutput("At most 5 characters.")

    model = ScriptedModel(["Sunny and warm", "Sunny"])
    result = await run(model, str, output_validators=[short])
    assert result.output == "Sunny"
    assert text(result.messages[2]) == "At most 5 characters." + RETRY


# -- the Agent ---------------------------------------------------------------------------


async def test_agent_output_type_and_decorated_validator() -> None:
    model = ScriptedModel([
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 99})),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temp": 18})),
    ])
    agent = Agent(model, output_type=PWeather)

    @agent.output_validator
    async def plausible(w: PWeather) -> None:
        if w.temp > 60:
            raise RejectOutput("Too hot to be true.")

    result = await agent.prompt("Paris?")
    assert result.output == PWeather(city="Paris", temp=18)
    assert agent.phase.kind == "done"
    assert [t.name for t in agent.build_llm_tools()] == [OUTPUT_TOOL_NAME]


async def test_agent_phase_is_error_after_invalid_output() -> None:
    agent = Agent(ScriptedModel(["x", "y"]), output_type=int, output_mode="prompted")
    result = await agent.prompt("Number?")
    assert result.end_reason == "output_invalid"
    assert agent.phase.kind == "error"
    assert agent.state.error == result.summary.error


async def test_agent_keeps_typed_output_across_prompts() -> None:
    agent = Agent(ScriptedModel(['{"response": 1}', '{"response": 2}']), output_type=int, output_mode="native")
    assert (await agent.prompt("One?")).output == 1
    assert (await agent.prompt("Two?")).output == 2


# -- no output_type: unchanged --------------------------------------------------------------


async def test_without_output_type_nothing_changes() -> None:
    model = ScriptedModel(['{"city": "Paris", "temp": "warm"}'])
    conversation = Conversation(system_prompt="s")
    result = await run_loop("hi", conversation, LoopConfig(model=model)).result()
    assert result.output is None
    assert result.end_reason == "stop"
    request = model.requests[0]
    assert (request.options.response_format, request.options.tool_choice, request.tools, request.system_prompt) == (
        None, None, [], "s"
    )


async def test_a_run_stopped_by_a_tool_has_no_output() -> None:
    def done(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult(content="done", terminate=True)

    tool = Tool("done", "Finish", {"type": "object", "properties": {}}, done)
    model = ScriptedModel([reply(tool_call("done", {}))])
    result = await run_loop("go", Conversation(tools=[tool]), config(model, DWeather, output_mode="tool")).result()
    assert result.end_reason == "stop"
    assert result.output is None


# -- bad settings --------------------------------------------------------------------------


def test_bad_output_mode_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^output_mode must be one of auto, native, tool, prompted; got 'json'$"):
        Agent(ScriptedModel(), output_type=int, output_mode="json")  # type: ignore[arg-type]


def test_bad_output_retries_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^output_retries must be a non-negative integer, got -1$"):
        Agent(ScriptedModel(), output_type=int, output_retries=-1)


def test_a_type_without_a_schema_is_refused() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"^output_type must be a pydantic model, dataclass, TypedDict"):
        Agent(ScriptedModel(), output_type=Opaque)


def test_the_loop_refuses_bad_settings_when_the_run_starts() -> None:
    with pytest.raises(ValueError, match="^output_mode must be one of"):
        run_loop("hi", Conversation(), LoopConfig(model=ScriptedModel(), output_type=int, output_mode="xml"))  # type: ignore[arg-type]


def test_a_tool_named_like_the_output_tool_is_refused() -> None:
    tool = Tool(OUTPUT_TOOL_NAME, "mine", {"type": "object", "properties": {}}, lambda a, c: "x")
    with pytest.raises(ValueError, match="^A tool is named 'final_result', the name of the output tool"):
        run_loop("hi", Conversation(tools=[tool]), LoopConfig(model=ScriptedModel(), output_type=int, output_mode="tool"))


# -- event orders ------------------------------------------------------------------------


def outline(events: list[Any]) -> list[str]:
    out = []
    for e in events:
        if e.type == "message_update":
            continue
        out.append(f"{e.type}({e.message.role})" if e.type in ("message_start", "message_end") else e.type)
    return out


async def test_event_order_of_an_accepted_output_call() -> None:
    model = ScriptedModel([reply(tool_call(OUTPUT_TOOL_NAME, {"response": 5}))])
    events = [e async for e in run_loop("hi", Conversation(), config(model, int, output_mode="tool"))]
    assert outline(events) == [
        "agent_start", "turn_start", "message_start(user)", "message_end(user)",
        "message_start(assistant)", "message_end(assistant)",
        "message_start(tool_result)", "message_end(tool_result)", "turn_end", "agent_end",
    ]


async def test_event_order_of_a_text_retry() -> None:
    model = ScriptedModel(["x", '{"response": 5}'])
    events = [e async for e in run_loop("hi", Conversation(), config(model, int, output_mode="native"))]
    assert outline(events) == [
        "agent_start", "turn_start", "message_start(user)", "message_end(user)",
        "message_start(assistant)", "message_end(assistant)", "turn_end",
        "turn_start", "message_start(user)", "message_end(user)",
        "message_start(assistant)", "message_end(assistant)", "turn_end", "agent_end",
    ]
    assert events[-1].summary.end_reason == "stop"
