"""White-box test: imports ketch implementation modules (private) directly.

A compacted transcript continues on every wire protocol.

The loop runs a tool-using conversation on each real adapter against the loopback
server (recorded-format streams), :class:`ketch.context.Compactor` compacts it
with a summary written by a :class:`ketch.testing.FunctionModel`, and the requests sent
after the compaction are checked: the summary comes first as a user-side message, the
kept messages follow with every call paired with its result, and the body passes the
target API's structural validator. Both cut kinds are covered: at a user message, and
inside a turn (the kept part then starts with an assistant message holding tool calls,
which Anthropic and Gemini only accept after a user turn).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from loopback import LoopbackServer
from loopback import json_reply
from test_handoff_matrix import ANTHROPIC
from test_handoff_matrix import CHAT
from test_handoff_matrix import GEMINI
from test_handoff_matrix import PROTOCOLS
from test_handoff_matrix import RESPONSES
from test_handoff_matrix import SYSTEM
from test_handoff_matrix import VALIDATORS
from test_handoff_matrix import WEATHER
from test_handoff_matrix import WEATHER_SCHEMA
from test_handoff_matrix import WIRES
from test_handoff_matrix import Call
from test_handoff_matrix import call_ids

from ketch.context import Compactor
from ketch.context import ContextSummary
from ketch.context._summary import SUMMARY_SYSTEM_PROMPT
from ketch.llm import Message
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.llm._tokens import estimate_message_tokens
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import run_loop
from ketch.testing import FunctionModel

SUMMARY = "## Goal\nWeather for Paris, Oslo, Rome and Lima.\n\n## Progress\n- [x] Paris: 18°C"
RENDERED = f"<context-summary>\n{SUMMARY}\n</context-summary>"
CITIES = ("Paris", "Oslo", "Rome", "Lima")
REPORT = "wind 12 km/h from the south-west, humidity 64 %, visibility 10 km, pressure 1016 hPa. " * 4


@pytest.fixture
async def server() -> AsyncIterator[LoopbackServer]:
    async with LoopbackServer() as s:
        yield s


async def get_weather(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"{args['city']}: {REPORT}"


def weather_tool() -> Tool:
    return Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)


def summariser() -> FunctionModel:
    def respond(context: Request, options: StreamOptions) -> str:
        assert context.system_prompt == SUMMARY_SYSTEM_PROMPT
        assert options.thinking == "off"
        return f"<analysis>four cities, one call each</analysis>\n<summary>\n{SUMMARY}\n</summary>"

    return FunctionModel(respond)


def call(protocol: str, n: int, city: str) -> Call:
    ids = {CHAT: f"functions.get_weather:{n}", RESPONSES: f"call_cmp{n}", ANTHROPIC: f"toolu_01Cmp{n}", GEMINI: None}
    return Call(ids[protocol], "get_weather", {"city": city})


def rid(protocol: str, n: int) -> str:
    return f"resp_cmp{n}" if protocol == RESPONSES else f"rid-cmp-{n}"


def outline(protocol: str, body: dict[str, Any]) -> list[str]:
    """The request's turns as ``role:kinds`` (Responses: one entry per input item)."""
    if protocol == ANTHROPIC:
        return [f"{m['role']}:{','.join(b['type'] for b in m['content'])}" for m in body["messages"]]
    if protocol == GEMINI:
        return [f"{c['role']}:{','.join(next(k for k in p if k != 'thoughtSignature') for p in c['parts'])}"
                for c in body["contents"]]
    if protocol == CHAT:
        return [f"{m['role']}:{'tool_calls' if m.get('tool_calls') else 'text'}" for m in body["messages"]]
    return [item.get("type", "message") if "role" not in item else f"{item['role']}" for item in body["input"]]


def first_turn(protocol: str, body: dict[str, Any]) -> Any:
    """The first conversation turn of a request (after Chat's system message)."""
    if protocol == ANTHROPIC:
        return body["messages"][0]
    if protocol == GEMINI:
        return body["contents"][0]
    if protocol == CHAT:
        return body["messages"][1]
    return body["input"][0]


def summary_turn(protocol: str, *more: str) -> Any:
    """The summary as each protocol sends it, with the user texts merged into its turn."""
    if protocol == ANTHROPIC:
        return {"role": "user", "content": [{"type": "text", "text": RENDERED}]}
    if protocol == GEMINI:
        return {"role": "user", "parts": [{"text": t} for t in (RENDERED, *more)]}
    if protocol == CHAT:
        return {"role": "user", "content": RENDERED}
    return {"role": "user", "content": [{"type": "input_text", "text": RENDERED}]}


def check(protocol: str, body: dict[str, Any]) -> None:
    VALIDATORS[protocol](body)
    calls, results = call_ids(protocol, body)
    assert sorted(calls) == sorted(results)


SPLIT_OUTLINES = {
    # after the compaction: summary, the kept call and its result
    ANTHROPIC: ["user:text", "assistant:tool_use", "user:tool_result"],
    GEMINI: ["user:text", "model:functionCall", "user:functionResponse"],
    CHAT: ["system:text", "user:text", "assistant:tool_calls", "tool:text"],
    RESPONSES: ["user", "function_call", "function_call_output"],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cut_inside_a_turn_continues(server: LoopbackServer, protocol: str) -> None:
    # One long turn: a call per city. Before the fourth request the transcript is over
    # the threshold; the newest ~110 tokens are the Rome call and its result, so the cut
    # falls inside the turn and the kept part starts with an assistant message.
    wire = WIRES[protocol]
    server.queue(
        wire.reply(rid(protocol, 1), text="Paris first.", calls=[call(protocol, 1, "Paris")], tokens=100),
        wire.reply(rid(protocol, 2), calls=[call(protocol, 2, "Oslo")], tokens=300),
        wire.reply(rid(protocol, 3), calls=[call(protocol, 3, "Rome")], tokens=3500),
        wire.reply(rid(protocol, 4), calls=[call(protocol, 4, "Lima")], tokens=400),
        wire.reply(rid(protocol, 5), text="All four are done.", tokens=500),
    )
    summariser_model = summariser()
    manager = Compactor(window=4000, reserve=1000, keep_recent_tokens=110, summary_model=summariser_model)
    context = Conversation(system_prompt=SYSTEM, tools=[weather_tool()])
    prompt = UserMessage(content="Check the weather in Paris, Oslo, Rome and Lima, one city per call.")
    stream = run_loop(prompt, context, LoopConfig(model=wire.model(server.url), context_manager=manager))
    events = [e.type async for e in stream]
    outcome = await stream.result()
    assert outcome.end_reason == "stop"
    assert events.count("compaction_start") == events.count("compaction_end") == 1
    assert len(server.requests) == 5

    [request] = summariser_model.requests
    [asked] = request.messages
    assert isinstance(asked, UserMessage)
    assert "[Assistant tool calls]: get_weather(city=Paris)" in asked.content[0].text  # type: ignore[union-attr]
    assert '## Turn Context (split turn)' in asked.content[0].text  # type: ignore[union-attr]

    transcript = context.messages
    assert isinstance(transcript[0], ContextSummary)
    assert transcript[0].summary == SUMMARY
    kept: list[Message] = transcript[1:]
    assert [type(m).__name__ for m in kept[:2]] == ["AssistantMessage", "ToolResultMessage"]
    assert [b.args for b in kept[0].content if isinstance(b, ToolCall)] == [{"city": "Rome"}]  # type: ignore[attr-defined]

    for i, rest in ((3, []), (4, ["assistant:tool_use", "user:tool_result"])):
        body = server.requests[i].json
        check(protocol, body)
        assert first_turn(protocol, body) == summary_turn(protocol)
        expected = list(SPLIT_OUTLINES[protocol])
        if rest:
            expected += {
                ANTHROPIC: rest,
                GEMINI: ["model:functionCall", "user:functionResponse"],
                CHAT: ["assistant:tool_calls", "tool:text"],
                RESPONSES: ["function_call", "function_call_output"],
            }[protocol]
        assert outline(protocol, body) == expected
    results = [m for m in kept if isinstance(m, ToolResultMessage)]
    assert [r.text.split(":")[0] for r in results] == ["Rome", "Lima"]


THOUGHT = "Two cities, so two calls."
INTRO = "I'll check both cities."
ANSWER = "Paris is mild and Oslo is cold."
FOLLOW_UP = "Thanks. And Rome?"
PAIRS = [pytest.param(a, b, id=f"{a}->{b}") for a in PROTOCOLS for b in PROTOCOLS]


def after_split(source: str, target: str) -> list[str]:
    """The outline of the target's request after a cut at the source's parallel calls:
    summary, the calls (the source's thinking only for itself), both results, the
    answer, the new prompt."""
    own = source == target
    if target == ANTHROPIC:
        calls = "assistant:thinking,text,tool_use,tool_use" if own else "assistant:text,tool_use,tool_use"
        return ["user:text", calls, "user:tool_result,tool_result", "assistant:text", "user:text"]
    if target == GEMINI:
        calls = "model:text,text,functionCall,functionCall" if own else "model:text,functionCall,functionCall"
        return ["user:text", calls, "user:functionResponse,functionResponse", "model:text", "user:text"]
    if target == CHAT:
        return ["system:text", "user:text", "assistant:tool_calls", "tool:text", "tool:text", "assistant:text",
                "user:text"]
    reasoning = ["reasoning"] if own else []
    return ["user", *reasoning, "assistant", "function_call", "function_call", "function_call_output",
            "function_call_output", "assistant", "user"]


@pytest.mark.parametrize(("source", "target"), PAIRS)
async def test_compacted_transcript_continues_on_every_protocol(server: LoopbackServer, source: str, target: str) -> None:
    # The source answers a question with two parallel calls; its last reply reports a
    # context near the window. The next turn runs on the target, whose context manager
    # compacts first: the cut falls on the source's parallel calls, inside the first
    # turn, so the request starts with the summary and then an assistant message.
    a, b = WIRES[source], WIRES[target]
    server.queue(
        a.reply(rid(source, 1), thinking=THOUGHT, text=INTRO,
                calls=[call(source, 1, "Paris"), call(source, 2, "Oslo")], tokens=200),
        a.reply(rid(source, 2), text=ANSWER, tokens=3500),
        b.reply(rid(target, 3), text="Rome is warm.", tokens=300),
    )
    context = Conversation(system_prompt=SYSTEM, tools=[weather_tool()])
    first = await run_loop("Weather in Paris and Oslo?", context, LoopConfig(model=a.model(server.url))).result()
    assert first.end_reason == "stop"
    assert [m.role for m in context.messages] == ["user", "assistant", "tool_result", "tool_result", "assistant"]

    follow_up = UserMessage(content=FOLLOW_UP)
    keep = sum(estimate_message_tokens(m) for m in [*context.messages[1:], follow_up])
    summariser_model = summariser()
    manager = Compactor(window=4000, reserve=1000, keep_recent_tokens=keep, summary_model=summariser_model)
    config = LoopConfig(model=b.model(server.url), context_manager=manager)
    second = await run_loop(follow_up, context, config).result()
    assert second.end_reason == "stop"
    assert len(summariser_model.requests) == 1
    assert isinstance(context.messages[0], ContextSummary)
    assert [m.role for m in context.messages[1:]] == ["assistant", "tool_result", "tool_result", "assistant", "user",
                                                     "assistant"]

    body = server.requests[-1].json
    check(target, body)
    assert first_turn(target, body) == summary_turn(target)
    assert outline(target, body) == after_split(source, target)
    if source != target:
        assert THOUGHT not in str(body)


AT_USER_OUTLINES = {
    # summary and the new prompt (one Gemini turn), the kept call and its result
    ANTHROPIC: ["user:text", "user:text", "assistant:tool_use", "user:tool_result"],
    GEMINI: ["user:text,text", "model:functionCall", "user:functionResponse"],
    CHAT: ["system:text", "user:text", "user:text", "assistant:tool_calls", "tool:text"],
    RESPONSES: ["user", "user", "function_call", "function_call_output"],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cut_at_a_user_message_continues(server: LoopbackServer, protocol: str) -> None:
    # Two runs; in the second, the call's reply reports a context near the window, so the
    # request after its result compacts, keeping the second prompt, the call and the result.
    wire = WIRES[protocol]
    server.queue(
        wire.reply(rid(protocol, 1), text=ANSWER, tokens=200),
        wire.reply(rid(protocol, 2), calls=[call(protocol, 2, "Rome")], tokens=3500),
        wire.reply(rid(protocol, 3), text="Rome is warm.", tokens=300),
    )
    context = Conversation(system_prompt=SYSTEM, tools=[weather_tool()])
    model = wire.model(server.url)
    await run_loop("Weather in Paris and Oslo, from memory?", context, LoopConfig(model=model)).result()
    prompt = UserMessage(content=FOLLOW_UP)
    rome = f"Rome: {REPORT}"
    keep = estimate_message_tokens(prompt) + estimate_message_tokens(UserMessage(content=rome)) + 5
    manager = Compactor(window=4000, reserve=1000, keep_recent_tokens=keep, summary_model=summariser())
    outcome = await run_loop(prompt, context, LoopConfig(model=model, context_manager=manager)).result()
    assert outcome.end_reason == "stop"
    assert [m.role for m in context.messages] == ["context_summary", "user", "assistant", "tool_result", "assistant"]
    assert context.messages[1] is prompt

    body = server.requests[-1].json
    check(protocol, body)
    assert first_turn(protocol, body) == summary_turn(protocol, FOLLOW_UP)
    assert outline(protocol, body) == AT_USER_OUTLINES[protocol]


OVERFLOW_BODIES = {
    ANTHROPIC: {"type": "error", "error": {"type": "invalid_request_error",
                                          "message": "prompt is too long: 208431 tokens > 200000 maximum"}},
    RESPONSES: {"error": {"message": "Your input exceeds the context window of this model. Please adjust your input "
                                     "and try again.", "type": "invalid_request_error", "param": "input",
                          "code": "context_length_exceeded"}},
    GEMINI: {"error": {"code": 400, "message": "The input token count (1310720) exceeds the maximum number of tokens "
                                               "allowed (1048576).", "status": "INVALID_ARGUMENT"}},
    CHAT: {"error": {"message": "This model's maximum context length is 131072 tokens. However, your messages "
                                "resulted in 140211 tokens.", "type": "invalid_request_error", "param": "messages",
                     "code": "context_length_exceeded"}},
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_compaction_after_a_context_overflow_continues(server: LoopbackServer, protocol: str) -> None:
    # The provider rejects the request as too long although the estimate was under the
    # threshold; the loop compacts (reason "overflow") and sends the request again.
    wire = WIRES[protocol]
    server.queue(
        wire.reply(rid(protocol, 1), calls=[call(protocol, 1, "Paris")], tokens=200),
        wire.reply(rid(protocol, 2), calls=[call(protocol, 2, "Oslo")], tokens=300),
        json_reply(OVERFLOW_BODIES[protocol], status=400),
        wire.reply(rid(protocol, 4), text="Both done.", tokens=100),
    )
    manager = Compactor(window=4000, reserve=1000, keep_recent_tokens=100, summary_model=summariser())
    context = Conversation(system_prompt=SYSTEM, tools=[weather_tool()])
    stream = run_loop("Weather in Paris, then Oslo?", context,
                      LoopConfig(model=wire.model(server.url), context_manager=manager))
    kinds = [e.type async for e in stream]
    outcome = await stream.result()
    assert outcome.end_reason == "stop"
    assert kinds.count("retry") == 1
    assert kinds.count("compaction_end") == 1
    assert [m.role for m in context.messages] == ["context_summary", "assistant", "tool_result", "assistant"]
    assert len(server.requests) == 4

    body = server.requests[-1].json
    check(protocol, body)
    assert first_turn(protocol, body) == summary_turn(protocol)
    assert outline(protocol, body) == SPLIT_OUTLINES[protocol]
