"""Streaming a large tool call stays linear in its size: the partial arguments are parsed
a bounded number of times, and the writers' joiner sends a call's fragments in few events.

Black-box: public names of ``ketch.llm`` and ``ketch.testing`` only. Sizes, not timings.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import msgspec

from ketch.llm import MessageBuilder
from ketch.llm import Request
from ketch.llm import TextDelta
from ketch.llm import ToolCall
from ketch.llm import ToolCallDelta
from ketch.llm import ToolCallDeltaJoiner
from ketch.llm import ToolCallEnd
from ketch.llm import UserMessage
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

BIG = {"path": "big.txt", "content": "".join(f'line {i}: "quoted" \\ text\n' for i in range(40_000))}
BIG_JSON = msgspec.json.encode(BIG).decode()  # about 1 MB


def _fragments(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_the_partial_args_of_a_1mb_call_are_parsed_a_bounded_number_of_times() -> None:
    b = MessageBuilder()
    index = b.tool_call_start("w1", "write").index
    fragments = _fragments(BIG_JSON)
    assert len(fragments) > 100_000
    parsed: list[dict[str, Any]] = []  # every new parse is a new dict on the partial call
    for piece in fragments:
        event = b.tool_call_delta(piece, index)
        assert event.delta == piece
        args = event.partial.content[index].args  # type: ignore[union-attr]
        if not parsed or args is not parsed[-1]:
            parsed.append(args)
    # every fragment of the first 1024 characters (128), then each quarter of growth (31)
    assert len(parsed) == 159
    # each parse is a best-effort view of the text so far: the content only grows, a
    # prefix of the final content, and the last one misses at most a fifth of it
    contents = [p.get("content", "") for p in parsed]
    assert all(BIG["content"].startswith(c) for c in contents)
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(contents))
    assert len(contents[-1]) >= len(BIG["content"]) * 4 // 5
    end = b.tool_call_end(index)
    assert end.tool_call == ToolCall(id="w1", name="write", args=BIG)


def test_short_arguments_are_parsed_at_every_fragment() -> None:
    b = MessageBuilder()
    index = b.tool_call_start("c1", "get_weather").index
    seen = [dict(b.tool_call_delta(piece, index).partial.content[index].args) for piece in ['{"ci', 'ty": "Par', 'is"}']]  # type: ignore[union-attr]
    assert seen == [{}, {"city": "Par"}, {"city": "Paris"}]


async def test_a_scripted_1mb_call_streams_its_fragments_in_order_and_ends_with_the_same_args() -> None:
    model = ScriptedModel([reply(tool_call("write", BIG, id="w1"))])
    events = [e async for e in model.stream(Request(messages=[UserMessage(content="write")]))]
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if type(e) is ToolCallDelta]
    assert kinds == ["start", "toolcall_start", *["toolcall_delta"] * len(deltas), "toolcall_end", "done"]
    assert deltas == _fragments(BIG_JSON)
    [end] = [e for e in events if type(e) is ToolCallEnd]
    assert end.tool_call.args == BIG
    assert events[-1].message.content == [ToolCall(id="w1", name="write", args=BIG)]  # type: ignore[union-attr]


# -- the joiner of the wire writers ---------------------------------------------------------------


def _stream(b: MessageBuilder) -> list[Any]:
    """Two calls streamed in fragments, a text block between them."""
    events: list[Any] = []
    first = b.tool_call_start("a", "write")
    events.append(first)
    events += [b.tool_call_delta(p, first.index) for p in _fragments(BIG_JSON[:3000], 100)]
    events.append(b.tool_call_end(first.index))
    text = b.text_start()
    events += [text, b.text_delta("hi", text.index), b.text_delta(" there", text.index), b.text_end(text.index)]
    second = b.tool_call_start("b", "ls")
    events += [second, b.tool_call_delta('{"pa', second.index), b.tool_call_delta('th":"."}', second.index)]
    events.append(b.tool_call_end(second.index))
    return events


def _shape(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.type, e.delta) if type(e) in (ToolCallDelta, TextDelta) else (e.type,) for e in events]


def test_the_joiner_joins_a_calls_fragments_up_to_its_limit_and_keeps_everything_else_in_order() -> None:
    events = _stream(MessageBuilder())
    joiner: ToolCallDeltaJoiner[Any] = ToolCallDeltaJoiner(limit=1024)
    out: list[Any] = []
    for event in events:
        out += joiner.feed(event)
    assert joiner.flush() == []
    first = BIG_JSON[:3000]
    assert _shape(out) == [
        ("toolcall_start",),
        ("toolcall_delta", first[:1100]),  # fragments of 100: the first that reaches 1024 sends
        ("toolcall_delta", first[1100:2200]),
        ("toolcall_delta", first[2200:]),  # the rest, before the call's end
        ("toolcall_end",),
        ("text_start",),
        ("text_delta", "hi"),  # text is not joined
        ("text_delta", " there"),
        ("text_end",),
        ("toolcall_start",),
        ("toolcall_delta", '{"path":"."}'),
        ("toolcall_end",),
    ]
    joined = out[1]
    assert (joined.index, joined.partial) == (events[1].index, events[1].partial)


def test_the_joiner_sends_a_held_fragment_before_another_calls_and_on_flush() -> None:
    b = MessageBuilder()
    one, two = b.tool_call_start("a", "x").index, b.tool_call_start("b", "y").index
    joiner: ToolCallDeltaJoiner[Any] = ToolCallDeltaJoiner()
    out: list[Any] = []
    for piece, index in [('{"a"', one), (":1}", one), ('{"b"', two), (":2}", two)]:
        out += joiner.feed(b.tool_call_delta(piece, index))
    assert [(e.index, e.delta) for e in out] == [(one, '{"a":1}')]
    assert [(e.index, e.delta) for e in joiner.flush()] == [(two, '{"b":2}')]
    assert joiner.flush() == []


def test_the_joiner_rewraps_an_event_that_carries_the_delta() -> None:
    class Update(msgspec.Struct):
        event: Any
        note: str

    b = MessageBuilder()
    index = b.tool_call_start("a", "x").index
    joiner: ToolCallDeltaJoiner[Any] = ToolCallDeltaJoiner()
    held = joiner.feed(Update(event=b.tool_call_delta('{"a"', index), note="1"))
    held += joiner.feed(Update(event=b.tool_call_delta(":1}", index), note="2"))
    assert held == []
    [out] = joiner.feed(Update(event=b.tool_call_end(index), note="3"))[:1]
    assert (out.note, out.event.delta, json.loads(out.event.delta)) == ("2", '{"a":1}', {"a": 1})
