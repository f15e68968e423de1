"""White-box test: imports ketch implementation modules (private) directly.

Message JSON round trips, partial JSON parsing, the message builder and guard_stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Cost
from ketch.llm import CustomMessage
from ketch.llm import ImageContent
from ketch.llm import MessageBuilder
from ketch.llm import TextContent
from ketch.llm import ThinkingContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.llm import guard_stream
from ketch.llm import message_from_dict
from ketch.llm import message_to_dict
from ketch.llm import messages_from_json
from ketch.llm import messages_to_json
from ketch.llm import parse_partial_json
from ketch.llm._errors import RateLimitError
from ketch.llm._stream import parse_tool_arguments


class Note(CustomMessage, tag="note"):
    text: str
    level: int = 0


SAMPLES = [
    UserMessage(content="hello"),
    UserMessage(content=[TextContent(text="see"), ImageContent(data="aGk=", mime_type="image/jpeg")]),
    UserMessage(content=[ImageContent(url="https://example.com/a.png")]),
    AssistantMessage(
        content=[
            ThinkingContent(thinking="hmm", signature="sig=="),
            ThinkingContent(thinking="", signature="opaque", redacted=True),
            TextContent(text="answer", signature="ts"),
            ToolCall(id="c1", name="add", args={"a": 1, "b": [1, 2]}, signature="th"),
            ToolCall(id="c2", name="bad", raw_arguments='{"a":', parse_error="invalid JSON"),
        ],
        provider="anthropic",
        api="anthropic-messages",
        model="claude",
        usage=Usage(input=1, output=2, cache_read=3, cache_write=4, total_tokens=10,
                    cost=Cost(input=0.1, output=0.2, cache_read=0.3, cache_write=0.4, total=1.0)),
        stop_reason="tool_use",
        response_id="msg_1",
    ),
    AssistantMessage(stop_reason="error", error_message="boom", error_kind="server"),
    ToolResultMessage(tool_call_id="c1", tool_name="add", content=[TextContent(text="3")],
                      details={"x": [1, {"y": None}]}, is_error=True),
    Note(text="ui only", level=2),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: m.role)
def test_round_trip_each_type(message: Any) -> None:
    assert message_from_dict(message_to_dict(message)) == message
    assert messages_from_json(messages_to_json(message)) == message
    assert type(messages_from_json(messages_to_json(message))) is type(message)


def test_round_trip_list_and_roles() -> None:
    assert messages_from_json(messages_to_json(SAMPLES)) == SAMPLES
    assert [message_to_dict(m)["role"] for m in SAMPLES] == [
        "user", "user", "user", "assistant", "assistant", "tool_result", "note",
    ]


def test_unknown_role_is_clear_error() -> None:
    with pytest.raises(ValueError, match="Unknown message role 'mystery'"):
        message_from_dict({"role": "mystery"})


def test_image_needs_data_or_url() -> None:
    with pytest.raises(ValueError, match="exactly one of data"):
        ImageContent(mime_type="image/png")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("  ", {}),
        ('{"city":"Paris"}', {"city": "Paris"}),
        ('{"city":"Par', {"city": "Par"}),
        ('{"city":', {}),
        ("not json", {}),
        ("[1,2,3]", {}),
        ('{"a":{"b":[1,2', {"a": {"b": [1, 2]}}),
    ],
)
def test_parse_partial_json(text: str, expected: dict[str, Any]) -> None:
    assert parse_partial_json(text) == expected


def test_parse_tool_arguments() -> None:
    assert parse_tool_arguments('{"a": 1}') == ({"a": 1}, None)
    assert parse_tool_arguments("") == ({}, None)
    assert parse_tool_arguments('{"s": "line1\nline2"}') == ({"s": "line1\nline2"}, None)
    args, err = parse_tool_arguments("[1]")
    assert (args, err) == ({}, "arguments must be a JSON object, got list")
    args, err = parse_tool_arguments('{"a":')
    assert args == {} and err is not None and err.startswith("invalid JSON")


def test_builder_tool_call_partials_never_missing() -> None:
    b = MessageBuilder(provider="p", api="a", model="m")
    b.start()
    start = b.tool_call_start("c1", "weather")
    seen = []
    for piece in ['{"ci', 'ty":', '"Par', 'is"}']:
        ev = b.tool_call_delta(piece, start.index)
        call = ev.partial.content[start.index]
        assert isinstance(call, ToolCall)
        seen.append(dict(call.args))
    assert seen == [{}, {}, {"city": "Par"}, {"city": "Paris"}]
    end = b.tool_call_end(start.index)
    assert end.tool_call.args == {"city": "Paris"}
    done = b.done()
    assert done.reason == "tool_use"


def test_builder_usage_total_and_pricing() -> None:
    def price(u: Usage) -> None:
        u.cost.input = u.input * 1.0
        u.cost.total = u.cost.input

    b = MessageBuilder(pricing=price)
    u = b.set_usage(input=10, output=5, cache_read=3, cache_write=2)
    assert (u.total_tokens, u.cost.total) == (20, 10.0)
    u = b.set_usage(output=7)
    assert (u.input, u.output, u.total_tokens) == (10, 7, 22)


async def _events(gen: Any) -> list[Any]:
    return [e async for e in gen]


async def test_guard_stream_turns_exception_into_error_keeping_partial() -> None:
    b = MessageBuilder(provider="p")

    async def producer() -> Any:
        yield b.start()
        ev = b.text_start()
        yield ev
        yield b.text_delta("half", ev.index)
        raise RateLimitError("slow down", status=429)

    events = await _events(guard_stream(producer(), b))
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "error"]
    err = events[-1].error
    assert (err.stop_reason, err.error_message, err.error_kind, err.text) == ("error", "slow down", "rate_limit", "half")


async def test_guard_stream_requires_terminal_and_drops_after_it() -> None:
    b = MessageBuilder()

    async def no_terminal() -> Any:
        yield b.start()

    events = await _events(guard_stream(no_terminal(), b))
    assert [e.type for e in events] == ["start", "error"]
    assert events[-1].error.error_message == "stream ended without a terminal event"

    b2 = MessageBuilder()

    async def extra() -> Any:
        yield b2.start()
        yield b2.done()
        yield b2.done()

    assert [e.type for e in await _events(guard_stream(extra(), b2))] == ["start", "done"]


async def test_guard_stream_abort_interrupts_waiting_producer() -> None:
    b = MessageBuilder()
    signal = AbortSignal()
    closed = asyncio.Event()

    async def producer() -> Any:
        try:
            yield b.start()
            ev = b.text_start()
            yield ev
            yield b.text_delta("so far", ev.index)
            await asyncio.Event().wait()
        finally:
            closed.set()

    out = []
    async for ev in guard_stream(producer(), b, signal):
        out.append(ev)
        if ev.type == "text_delta":
            asyncio.get_running_loop().call_soon(signal.abort)
    assert out[-1].type == "error"
    assert (out[-1].reason, out[-1].error.text, out[-1].error.stop_reason) == ("aborted", "so far", "aborted")
    assert closed.is_set()


async def test_guard_stream_does_not_swallow_outside_cancellation() -> None:
    b = MessageBuilder()
    reached = asyncio.Event()

    async def producer() -> Any:
        yield b.start()
        reached.set()
        await asyncio.Event().wait()

    async def consume() -> None:
        async for _ in guard_stream(producer(), b, AbortSignal()):
            pass

    task = asyncio.ensure_future(consume())
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_abort_signal_scope() -> None:
    from ketch.llm import Aborted

    signal = AbortSignal()
    entered = asyncio.Event()

    async def work() -> str:
        try:
            async with signal.scope():
                entered.set()
                await asyncio.Event().wait()
        except Aborted as exc:
            return f"aborted: {exc.reason}"
        return "finished"

    task = asyncio.ensure_future(work())
    await entered.wait()
    signal.abort("user pressed stop")
    assert await task == "aborted: user pressed stop"
    assert repr(signal) == "AbortSignal(aborted=True)"
    with pytest.raises(Aborted):
        async with signal.scope():
            pass


async def test_closing_the_guarded_stream_closes_the_producer() -> None:
    b = MessageBuilder()
    closed = asyncio.Event()

    async def producer() -> Any:
        try:
            yield b.start()
            ev = b.text_start()
            yield ev
            await asyncio.Event().wait()
        finally:
            closed.set()

    stream = guard_stream(producer(), b, AbortSignal())
    assert (await anext(stream)).type == "start"
    assert (await anext(stream)).type == "text_start"
    await stream.aclose()
    assert closed.is_set()


def test_the_builder_finishes_an_aborted_request_keeping_its_partial_text() -> None:
    builder = MessageBuilder(provider="p", api="a", model="m")
    builder.start()
    index = builder.text_start().index
    builder.text_delta("Hel", index)
    end = builder.aborted()
    assert (end.type, end.reason) == ("error", "aborted")
    assert end.error == AssistantMessage(
        content=[TextContent(text="Hel")],
        provider="p",
        api="a",
        model="m",
        stop_reason="aborted",
        error_message="Request was aborted",
        timestamp=end.error.timestamp,
    )
