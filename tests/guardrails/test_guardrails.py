"""Guardrails: input (before or alongside the first call), output, tool call and tool result."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from ketch import Agent
from ketch import GuardrailResult
from ketch import input_guardrail
from ketch import output_guardrail
from ketch import tool_guardrail
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import Guardrail
from ketch.loop import GuardrailTrip
from ketch.loop import InputCheck
from ketch.loop import LoopConfig
from ketch.loop import OutputCheck
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolResultCheck
from ketch.loop import run_loop
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect
from support import describe

SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}}


def echo_tool(ran: list[str]) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        ran.append(ctx.call_id)
        return f"echo {args.get('x', '')}"

    return Tool("echo", "", SCHEMA, run)


def labels(events: list[Any]) -> list[str]:
    return [describe(e) for e in events if e.type != "message_update"]


def user_texts(messages: list[Any]) -> list[str]:
    return [m.content if isinstance(m.content, str) else "".join(b.text for b in m.content)
            for m in messages if isinstance(m, UserMessage)]


# -- input ----------------------------------------------------------------------------------


async def test_an_input_trip_sends_nothing_keeps_the_prompt_and_records_the_guardrail() -> None:
    @input_guardrail
    def no_secrets(check: InputCheck) -> GuardrailResult | None:
        if "password" in check.text:
            return GuardrailResult.trip("the prompt contains a password", info={"field": "password"})
        return None

    model = ScriptedModel(["never"])
    stream = run_loop("my password is x", Conversation(), LoopConfig(model=model, guardrails=[no_secrets]))
    events = await collect(stream)
    result = await stream.result()
    assert labels(events) == ["agent_start", "message_start:user", "message_end:user", "agent_end"]
    assert model.requests == []
    assert result.end_reason == "guardrail"
    assert result.summary.error == 'Guardrail "no_secrets" tripped: the prompt contains a password'
    assert result.summary.guardrail == GuardrailTrip(
        name="no_secrets", kind="input", message="the prompt contains a password", info={"field": "password"}
    )
    assert user_texts(result.messages) == ["my password is x"]


async def test_an_input_reject_is_told_to_the_model_before_its_first_call() -> None:
    async def polite(check: InputCheck) -> GuardrailResult:
        return GuardrailResult.reject("Note: the user was rude; stay calm.")

    model = ScriptedModel(["calm answer"])
    agent = Agent(model, guardrails=[input_guardrail(polite)])
    result = await agent.prompt("answer now!!")
    assert result.end_reason == "stop" and result.text == "calm answer"
    assert user_texts(model.requests[0].messages) == ["answer now!!", "Note: the user was rude; stay calm."]
    assert result.summary.guardrail is None


async def test_a_parallel_input_trip_discards_the_call_it_ran_alongside() -> None:
    called = asyncio.Event()

    def respond(request: Request, options: StreamOptions) -> Any:
        called.set()
        return reply("half an answer", hang=True)  # streams, then hangs until aborted

    @input_guardrail(parallel=True, name="topic")
    async def check(check: InputCheck) -> GuardrailResult:
        await called.wait()  # the model call is under way
        return GuardrailResult.trip("off topic")

    model = FunctionModel(respond)
    stream = run_loop("talk about cats", Conversation(), LoopConfig(model=model, guardrails=[check]))
    events = await collect(stream)
    result = await stream.result()
    assert labels(events) == ["agent_start", "turn_start", "message_start:user", "message_end:user", "agent_end"]
    assert len(model.requests) == 1 and model.requests[0].options.signal is not None
    assert model.requests[0].options.signal.aborted  # the call was stopped, not left running
    assert (result.end_reason, result.summary.error) == ("guardrail", 'Guardrail "topic" tripped: off topic')
    assert result.summary.turns == 0
    assert [m.role for m in result.messages] == ["user"]


async def test_a_parallel_input_guardrail_that_passes_releases_the_held_events_in_order() -> None:
    gate = asyncio.Event()

    def respond(request: Request, options: StreamOptions) -> Any:
        gate.set()
        return reply("the answer", chunk_size=4)

    @input_guardrail(parallel=True)
    async def slow_pass(check: InputCheck) -> None:
        await gate.wait()
        return None

    model = FunctionModel(respond)
    plain = await collect(run_loop("q", Conversation(), LoopConfig(model=ScriptedModel([reply("the answer", chunk_size=4)]))))
    stream = run_loop("q", Conversation(), LoopConfig(model=model, guardrails=[slow_pass]))
    events = await collect(stream)
    assert [e.type for e in events] == [e.type for e in plain]
    assert [e.event.delta for e in events if e.type == "message_update" and e.event.type == "text_delta"] == [
        "the ", "answ", "er"
    ]
    assert (await stream.result()).text == "the answer"


async def test_a_parallel_input_reject_discards_the_call_and_calls_again_with_the_note() -> None:
    called = asyncio.Event()
    answers = iter([reply("discarded", hang=True), reply("second answer")])

    def respond(request: Request, options: StreamOptions) -> Any:
        called.set()
        return next(answers)

    @input_guardrail(parallel=True)
    async def careful(check: InputCheck) -> GuardrailResult:
        await called.wait()
        return GuardrailResult.reject("Answer in one sentence.")

    model = FunctionModel(respond)
    stream = run_loop("q", Conversation(), LoopConfig(model=model, guardrails=[careful]))
    events = await collect(stream)
    result = await stream.result()
    assert labels(events) == [
        "agent_start", "turn_start", "message_start:user", "message_end:user",
        "message_start:user", "message_end:user", "message_start:assistant", "message_end:assistant",
        "turn_end", "agent_end",
    ]
    assert result.text == "second answer" and result.end_reason == "stop"
    assert user_texts(model.requests[1].messages) == ["q", "Answer in one sentence."]


async def test_input_guardrails_do_not_run_on_continue() -> None:
    seen: list[str] = []

    @input_guardrail
    def record(check: InputCheck) -> None:
        seen.append(check.text)

    agent = Agent(ScriptedModel(["a", "b"]), guardrails=[record])
    await agent.prompt("first")
    agent.messages.append(UserMessage(content="appended"))
    await agent.continue_loop()
    assert seen == ["first"]


# -- output ---------------------------------------------------------------------------------


async def test_an_output_reject_sends_the_model_back_and_a_pass_ends_the_run() -> None:
    @output_guardrail
    def no_shouting(check: OutputCheck) -> GuardrailResult | None:
        return GuardrailResult.reject("Do not shout; answer again.") if check.text.isupper() else None

    model = ScriptedModel(["HELLO", "hello"])
    result = await Agent(model, guardrails=[no_shouting]).prompt("greet")
    assert result.end_reason == "stop" and result.text == "hello"
    assert user_texts(model.requests[1].messages) == ["greet", "Do not shout; answer again."]
    assert result.summary.turns == 2


async def test_an_output_trip_ends_the_run_after_the_message_was_committed() -> None:
    @output_guardrail(name="pii")
    async def pii(check: OutputCheck) -> GuardrailResult | None:
        return GuardrailResult.trip("leaks an address", info=[3, 9]) if "street" in check.text else None

    stream = run_loop("where?", Conversation(), LoopConfig(model=ScriptedModel(["12 Main street"]), guardrails=[pii]))
    events = await collect(stream)
    result = await stream.result()
    assert labels(events)[-3:] == ["message_end:assistant", "turn_end", "agent_end"]
    assert result.end_reason == "guardrail" and result.text == "12 Main street"
    assert result.summary.guardrail == GuardrailTrip(name="pii", kind="output", message="leaks an address", info=[3, 9])


async def test_a_guardrail_rejecting_more_than_max_rejections_trips() -> None:
    @output_guardrail(max_rejections=2)
    def never_happy(check: OutputCheck) -> GuardrailResult:
        return GuardrailResult.reject("again")

    model = ScriptedModel(["a", "b", "c", "d"])
    result = await Agent(model, guardrails=[never_happy]).prompt("go")
    assert len(model.requests) == 3
    assert result.end_reason == "guardrail"
    assert result.summary.error == 'Guardrail "never_happy" tripped: rejected 3 times (max_rejections=2): again'


async def test_a_guardrail_that_raises_trips() -> None:
    @output_guardrail
    def broken(check: OutputCheck) -> None:
        raise RuntimeError("boom")

    result = await Agent(ScriptedModel(["x"]), guardrails=[broken]).prompt("go")
    assert (result.end_reason, result.summary.error) == ("guardrail", 'Guardrail "broken" tripped: RuntimeError: boom')


async def test_output_guardrails_do_not_check_tool_turns() -> None:
    seen: list[str] = []

    @output_guardrail
    def record(check: OutputCheck) -> None:
        seen.append(check.text)

    model = ScriptedModel([reply("calling", tool_call("echo", {"x": "1"})), "done"])
    await Agent(model, tools=[echo_tool([])], guardrails=[record]).prompt("go")
    assert seen == ["done"]


# -- tools ----------------------------------------------------------------------------------


async def test_a_tool_call_reject_is_the_calls_result_and_the_run_goes_on() -> None:
    @tool_guardrail
    def no_rm(call: ToolCallInfo) -> GuardrailResult | None:
        return GuardrailResult.reject("x must not be 'rm'") if call.args.get("x") == "rm" else None

    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("echo", {"x": "rm"}, id="a"), tool_call("echo", {"x": "ls"}, id="b")), "ok"])
    result = await Agent(model, tools=[echo_tool(ran)], guardrails=[no_rm]).prompt("go")
    assert ran == ["b"]
    got = [(m.tool_call_id, m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)]
    assert got == [("a", "x must not be 'rm'", True), ("b", "echo ls", False)]
    assert result.end_reason == "stop" and result.text == "ok"


async def test_a_tool_call_trip_ends_the_run_after_the_batch() -> None:
    @tool_guardrail(name="budget")
    async def expensive(call: ToolCallInfo) -> GuardrailResult | None:
        return GuardrailResult.trip("too expensive", info="a") if call.tool_call.id == "a" else None

    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("echo", {"x": "1"}, id="a"), tool_call("echo", {"x": "2"}, id="b")), "never"])
    stream = run_loop("go", Conversation(tools=[echo_tool(ran)]), LoopConfig(model=model, guardrails=[expensive]))
    events = await collect(stream)
    result = await stream.result()
    assert ran == ["b"]
    got = [(m.tool_call_id, m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)]
    assert got == [("a", 'Guardrail "budget" tripped: too expensive', True), ("b", "echo 2", False)]
    assert labels(events)[-6:] == [
        "message_start:tool_result", "message_end:tool_result", "message_start:tool_result",
        "message_end:tool_result", "turn_end", "agent_end",
    ]
    assert result.end_reason == "guardrail"
    assert result.summary.guardrail == GuardrailTrip(name="budget", kind="tool_call", message="too expensive", info="a")
    assert len(model.requests) == 1


async def test_a_tool_result_reject_replaces_the_result_and_a_trip_ends_the_run() -> None:
    @tool_guardrail(on="result")
    def redact(check: ToolResultCheck) -> GuardrailResult | None:
        if "secret" in check.result.text:
            return GuardrailResult.reject("The result was withheld: it contained a secret.")
        if "fatal" in check.result.text:
            return GuardrailResult.trip("fatal output")
        return None

    model = ScriptedModel([
        reply(tool_call("echo", {"x": "secret"}, id="a")),
        reply(tool_call("echo", {"x": "fatal"}, id="b")),
        "never",
    ])
    result = await Agent(model, tools=[echo_tool([])], guardrails=[redact]).prompt("go")
    got = [(m.tool_call_id, m.text, m.is_error) for m in result.messages if isinstance(m, ToolResultMessage)]
    assert got == [
        ("a", "The result was withheld: it contained a secret.", True),
        ("b", 'Guardrail "redact" tripped: fatal output', True),
    ]
    assert result.end_reason == "guardrail" and result.summary.guardrail is not None
    assert result.summary.guardrail.kind == "tool_result"


def test_guardrail_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="Only input guardrails can run in parallel"):
        Guardrail("output", lambda c: None, parallel=True)
    with pytest.raises(ValueError, match="max_rejections must be an integer >= 0, got -1"):
        output_guardrail(max_rejections=-1)(lambda c: None)
    with pytest.raises(ValueError, match="must be 'call' or 'result', got 'both'"):
        tool_guardrail(on="both")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="guardrails must be Guardrail objects, got function"):
        run_loop("x", Conversation(), LoopConfig(model=ScriptedModel([]), guardrails=[lambda c: None]))  # type: ignore[list-item]


async def test_an_abort_while_a_parallel_guardrail_still_runs_ends_the_run_as_aborted() -> None:
    from ketch.llm import AbortSignal

    called = asyncio.Event()
    never = asyncio.Event()

    def respond(request: Request, options: StreamOptions) -> Any:
        called.set()
        return reply("partial", hang=True)

    @input_guardrail(parallel=True)
    async def stuck(check: InputCheck) -> None:
        await never.wait()  # never answers

    async def abort_when_called(signal: AbortSignal) -> None:
        await called.wait()
        signal.abort()

    signal = AbortSignal()
    model = FunctionModel(respond)
    stream = run_loop("q", Conversation(), LoopConfig(model=model, guardrails=[stuck]), signal)
    aborter = asyncio.create_task(abort_when_called(signal))
    events = await collect(stream)
    await aborter
    result = await stream.result()
    assert result.end_reason == "aborted" and result.summary.guardrail is None
    assert labels(events)[-4:] == ["message_start:assistant", "message_end:assistant", "turn_end", "agent_end"]
    assert result.last_assistant is not None and result.last_assistant.stop_reason == "aborted"


async def test_a_tool_guardrail_that_raises_trips_and_the_call_does_not_run() -> None:
    @tool_guardrail
    async def broken(call: ToolCallInfo) -> None:
        raise ValueError("bad policy file")

    ran: list[str] = []
    model = ScriptedModel([reply(tool_call("echo", {"x": "1"}, id="a")), "never"])
    result = await Agent(model, tools=[echo_tool(ran)], guardrails=[broken]).prompt("go")
    assert ran == []
    assert result.end_reason == "guardrail"
    assert result.summary.error == 'Guardrail "broken" tripped: ValueError: bad policy file'


# -- output guardrails with typed output ----------------------------------------------------


class Weather(msgspec.Struct):
    city: str
    temp: int


@output_guardrail
def plausible(check: OutputCheck) -> GuardrailResult | None:
    if check.output is not None and check.output.temp > 60:
        return GuardrailResult.reject(f"{check.output.temp} degrees is not plausible; check again.")
    return None


async def test_output_guardrails_see_the_typed_output_and_a_reject_discards_it_native() -> None:
    seen: list[Any] = []

    @output_guardrail
    def record(check: OutputCheck) -> None:
        seen.append(check.output)

    model = ScriptedModel(['{"city": "Oslo", "temp": 99}', '{"city": "Oslo", "temp": 9}'])
    agent = Agent(model, guardrails=[record, plausible], output_type=Weather, output_mode="native")
    result = await agent.prompt("weather?")
    assert result.end_reason == "stop" and result.output == Weather("Oslo", 9)
    assert seen == [Weather("Oslo", 99), Weather("Oslo", 9)]
    assert user_texts(model.requests[1].messages) == ["weather?", "99 degrees is not plausible; check again."]


async def test_output_guardrails_run_on_the_final_result_call_in_tool_mode() -> None:
    model = ScriptedModel(
        [
            reply(tool_call("final_result", {"city": "Oslo", "temp": 99}, id="o1")),
            reply(tool_call("final_result", {"city": "Oslo", "temp": 9}, id="o2")),
        ]
    )
    agent = Agent(model, guardrails=[plausible], output_type=Weather, output_mode="tool")
    result = await agent.prompt("weather?")
    assert result.end_reason == "stop" and result.output == Weather("Oslo", 9)
    assert [type(m).__name__ for m in result.messages] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
    ]
    assert user_texts(result.messages) == ["weather?", "99 degrees is not plausible; check again."]


async def test_an_output_trip_in_tool_mode_ends_the_run_without_an_output() -> None:
    @output_guardrail(name="no_oslo")
    def no_oslo(check: OutputCheck) -> GuardrailResult | None:
        return GuardrailResult.trip("Oslo is off limits") if check.output.city == "Oslo" else None

    model = ScriptedModel([reply(tool_call("final_result", {"city": "Oslo", "temp": 9}, id="o1"))])
    result = await Agent(model, guardrails=[no_oslo], output_type=Weather, output_mode="tool").prompt("weather?")
    assert (result.end_reason, result.output) == ("guardrail", None)
    assert result.summary.error == 'Guardrail "no_oslo" tripped: Oslo is off limits'
