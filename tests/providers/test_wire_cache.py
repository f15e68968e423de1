"""White-box test: imports ketch implementation modules (private) directly.

Requests built from a growing transcript, whose converted messages (and their JSON)
each adapter reuses from turn to turn, equal requests built from scratch, are sent as
the bytes ``msgspec.json.encode`` gives for them, and no request is changed by a later
one.

The reference is the same adapter with a ``rewrite`` hook, which always converts the
whole transcript afresh.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from ketch.llm import AssistantMessage
from ketch.llm import ImageContent
from ketch.llm import Message
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ThinkingContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import ToolSpec
from ketch.llm import UserMessage
from ketch.llm._handoff import MISSING_TOOL_RESULT
from ketch.llm._providers import wire_cache
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._providers.base import HTTPModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._providers.wire_cache import WireItems
from ketch.llm._providers.wire_cache import encode_body
from ketch.llm._retry import RetryPolicy

MODEL = "gpt-4o-mini"
SYSTEM = "Be brief."
TOOLS = [ToolSpec(name="add", description="Add.", parameters={"type": "object", "properties": {}})]


def _chat(**kwargs: Any) -> HTTPModel:
    return OpenAIChatModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


def _anthropic(**kwargs: Any) -> HTTPModel:
    return AnthropicModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


def _responses(**kwargs: Any) -> HTTPModel:
    return OpenAIResponsesModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


def _gemini(**kwargs: Any) -> HTTPModel:
    return GeminiModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


def _gemini3(**kwargs: Any) -> HTTPModel:
    # Gemini 3 gives unsigned calls a placeholder signature; the transcript's own
    # messages come from another model of the same API.
    return GeminiModel("gemini-3-pro-preview", api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


MAKERS: dict[str, tuple[Callable[..., HTTPModel], str, str]] = {
    "openai-chat": (_chat, "openai", "openai-chat"),
    "anthropic": (_anthropic, "anthropic", "anthropic-messages"),
    "openai-responses": (_responses, "openai", "openai-responses"),
    "gemini": (_gemini, "google", "gemini"),
    "gemini-3": (_gemini3, "google", "gemini"),
}
KEYS = {"openai-chat": "messages", "anthropic": "messages", "openai-responses": "input", "gemini": "contents"}
KEYS["gemini-3"] = KEYS["gemini"]


def _change_everything(items: list[dict[str, Any]]) -> None:
    """Change every item and every block the adapter made (values taken from the
    messages themselves, such as tool arguments, are theirs)."""
    for item in items:
        for value in item.values():
            if isinstance(value, list):
                for block in value:
                    if isinstance(block, dict):
                        block["changed"] = True
        item["changed"] = True


def _same(provider: str, api: str, content: list[Any], stop: str = "stop") -> AssistantMessage:
    return AssistantMessage(
        content=content, provider=provider, api=api, model=MODEL, stop_reason=stop  # type: ignore[arg-type]
    )


def _foreign(content: list[Any], stop: str = "stop") -> AssistantMessage:
    return AssistantMessage(
        content=content, provider="other", api="other-api", model="other-model", stop_reason=stop  # type: ignore[arg-type]
    )


def _result(id: str, text: str, *, image: bool = False, error: bool = False) -> ToolResultMessage:
    content: list[Any] = [TextContent(text=text)]
    if image:
        content.append(ImageContent(data="aGk=", mime_type="image/png"))
    return ToolResultMessage(tool_call_id=id, tool_name="add", content=content, is_error=error)


def transcript(provider: str, api: str) -> list[Message]:
    """Every rule of the hand-off, several times over, in an order that only grows."""
    long_a = "x" * 70 + "|a"
    long_b = "x" * 70 + "|b"
    return [
        UserMessage(content="Question 1"),
        _same(provider, api, [ThinkingContent(thinking="hm", signature="sig"), ToolCall(id="c1", name="add")]),
        _result("c1", "1"),
        _same(provider, api, [TextContent(text="One.")]),
        UserMessage(content=[TextContent(text="Look"), ImageContent(data="aGk=", mime_type="image/png")]),
        _foreign([ThinkingContent(thinking="t"), ToolCall(id=long_a, name="add"), ToolCall(id=long_b, name="add")]),
        _result(long_b, "b", image=True),
        _result(long_a, "a"),
        _result("orphan", "dropped"),
        _foreign([TextContent(text="", signature="s")]),
        _same(provider, api, [TextContent(text="partial")], stop="aborted"),
        _same(provider, api, [ToolCall(id="c2", name="add")]),
        UserMessage(content="Question 2"),
        _same(provider, api, [TextContent(text="failed")], stop="error"),
        _foreign([TextContent(text="From elsewhere.", signature="s2"), ToolCall(id="0", name="add")]),
        _result("0", "zero", error=True),
        _foreign([ToolCall(id="0", name="add")]),
        _result("0", "again"),
        _same(provider, api, [TextContent(text="Done.")]),
        UserMessage(content="Question 3"),
        _same(provider, api, [ToolCall(id="c3", name="add"), ToolCall(id="c4", name="add")]),
        _result("c3", "3", image=True),
        _result("c4", "4"),
        UserMessage(content=""),
        _same(provider, api, [ToolCall(id="c5", name="add")]),
    ]


def _body(model: HTTPModel, messages: list[Message], system: str = SYSTEM) -> dict[str, Any]:
    context = Request(system_prompt=system, messages=messages, tools=TOOLS)
    return model.build_request(context, StreamOptions(), "k").body


def _fresh(maker: Callable[..., HTTPModel], messages: list[Message], system: str = SYSTEM) -> dict[str, Any]:
    return _body(maker(rewrite=lambda body: None), messages, system)


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_growing_transcript_gives_the_requests_built_from_scratch(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    grown: list[Message] = []  # one list extended in place, as the loop's view does
    for i, message in enumerate(messages):
        grown.append(message)
        assert _body(model, grown) == _fresh(maker, messages[: i + 1]), i
        # A new list holding the same messages is the same transcript.
        assert _body(model, list(grown), "") == _fresh(maker, messages[: i + 1], ""), i


@pytest.mark.parametrize("name", list(MAKERS))
def test_no_request_or_message_changes_after_it_is_built(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    before = msgspec.json.encode(messages)
    model = maker()
    bodies = [_body(model, messages[:i]) for i in range(1, len(messages) + 1)]
    snapshots = [msgspec.json.encode(b) for b in bodies]
    # Change every request afterwards: later requests must not see it.
    for body in bodies:
        _change_everything(body[KEYS[name]])
    again = [_body(model, messages[:i]) for i in range(1, len(messages) + 1)]
    assert [msgspec.json.encode(b) for b in again] == snapshots
    assert msgspec.json.encode(messages) == before


@pytest.mark.parametrize("name", list(MAKERS))
def test_changes_other_than_growth_give_the_new_transcript(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    _body(model, messages)
    variants = [
        messages[:10],  # shorter
        [*messages[:-1], UserMessage(content="Replaced last")],  # same length, last replaced
        [*messages[:5], UserMessage(content="Edited"), *messages[6:]],  # a middle message replaced
        [UserMessage(content="New start"), *messages[1:]],  # first replaced
        messages[3:],  # starts elsewhere
        messages,
        [*messages, _result("c5", "5"), UserMessage(content="More")],
    ]
    for i, variant in enumerate(variants):
        assert _body(model, variant) == _fresh(maker, variant), i


def test_calls_waiting_for_a_result_get_one_until_it_arrives() -> None:
    model = _chat()
    messages: list[Message] = [
        UserMessage(content="Hi"),
        _same("openai", "openai-chat", [ToolCall(id="c1", name="add", args={"a": 1})]),
    ]
    first = _body(model, messages)["messages"]
    messages.append(_result("c1", "2"))
    second = _body(model, messages)["messages"]
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1}'}}],
    }
    assert first == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi"},
        {**call, "content": None},
        {"role": "tool", "tool_call_id": "c1", "content": MISSING_TOOL_RESULT},
    ]
    assert second == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi"},
        {**call, "content": None},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_message_replaced_in_place_is_seen(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    view = list(messages)  # one list, changed in place as a cleared view changes it
    _body(model, view)
    view[2] = _result("c1", "[cleared]")
    assert _body(model, view) == _fresh(maker, view)
    view.append(UserMessage(content="Next"))
    seventh = view[7]
    assert isinstance(seventh, ToolResultMessage)
    view[7] = _result(seventh.tool_call_id, "[cleared]")
    assert _body(model, view) == _fresh(maker, view)


class _Incomparable:
    def __eq__(self, other: object) -> bool:
        raise ValueError("cannot compare")

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("name", list(MAKERS))
def test_an_equal_copy_is_the_same_transcript_and_an_incomparable_one_is_new(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    _body(model, messages)
    copies = [messages[0], *(copy.deepcopy(m) for m in messages[1:])]
    assert _body(model, copies) == _fresh(maker, copies)
    first = [*messages[:2], msgspec.structs.replace(messages[2], details=_Incomparable())]
    _body(model, first)
    second = [*messages[:2], msgspec.structs.replace(messages[2], details=_Incomparable()), messages[3]]
    assert _body(model, second) == _fresh(maker, second)


def test_many_transcripts_on_one_model_each_give_their_own_requests() -> None:
    model = _chat()
    transcripts = [[UserMessage(content=f"Transcript {i}"), *transcript("openai", "openai-chat")] for i in range(20)]
    for turn in range(1, 8):
        for i, messages in enumerate(transcripts):
            head = messages[: turn * 3]
            assert _body(model, head) == _fresh(_chat, head), (turn, i)


def test_the_cache_holds_at_most_its_message_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_cache, "_BUDGET", 20)
    model = _chat()
    cache = model._wire_cache  # type: ignore[attr-defined]
    transcripts = [[UserMessage(content=f"Transcript {i}"), *transcript("openai", "openai-chat")] for i in range(4)]
    for turn in range(1, 8):
        for messages in transcripts:
            head = messages[: turn * 3]
            assert _body(model, head) == _fresh(_chat, head)
            held = [len(entry.sources) for entry in cache._entries.values()]
            assert cache._held == sum(held)
            assert sum(held) <= 20 or len(held) == 1


# -- the JSON of the cached items ----------------------------------------------------


def _joined(body: dict[str, Any]) -> bytes:
    return b"".join(encode_body(body))


def _long(provider: str, api: str) -> list[Message]:
    """A transcript whose cached JSON is sent as a piece of its own."""
    return [UserMessage(content="x" * 70_000), *transcript(provider, api)[1:]]


def _items(body: dict[str, Any], name: str) -> WireItems:
    items = body[KEYS[name]]
    assert type(items) is WireItems
    return items


# The items whose JSON the request for the whole transcript carries.
CARRIED = {
    "openai-chat": range(1, 24),  # after the system message
    "anthropic": range(0, 18),
    "openai-responses": range(0, 24),
    "gemini": range(0, 16),
    "gemini-3": range(0, 16),
}


@pytest.mark.parametrize("long", [False, True], ids=["short", "long"])
@pytest.mark.parametrize("name", list(MAKERS))
def test_a_growing_transcript_is_encoded_as_msgspec_encodes_it(name: str, long: bool) -> None:
    maker, provider, api = MAKERS[name]
    messages = _long(provider, api) if long else transcript(provider, api)
    model = maker()
    grown: list[Message] = []
    for i, message in enumerate(messages):
        grown.append(message)
        body = _body(model, grown)
        expected = msgspec.json.encode(_fresh(maker, messages[: i + 1]))
        assert msgspec.json.encode(body) == expected, i
        assert _joined(body) == expected, i
        bare = _body(model, list(grown), "")
        assert _joined(bare) == msgspec.json.encode(_fresh(maker, messages[: i + 1], "")), i
    if long:  # the cached JSON is a piece of its own, a view of the cache's buffer
        pieces = encode_body(body)
        assert [type(piece) for piece in pieces] == [memoryview, memoryview, memoryview]
        assert len(pieces[1]) > 70_000 and len(pieces[0]) + len(pieces[2]) < 3_000
        return
    assert _items(body, name).encoded_range == CARRIED[name]
    shift = 1 if name == "openai-chat" else 0
    assert _items(bare, name).encoded_range == range(CARRIED[name].start - shift, CARRIED[name].stop - shift)


# The items carried by the request for the first 12 messages.
CARRIED_AT_12 = {
    "openai-chat": range(1, 10),
    "anthropic": range(0, 7),
    "openai-responses": range(0, 9),
    "gemini": range(0, 6),
    "gemini-3": range(0, 6),
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_grown_transcript_reuses_the_cached_items(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    before = _items(_body(model, messages[:12]), name)
    after = _items(_body(model, messages), name)
    assert before.encoded_range == CARRIED_AT_12[name]
    assert all(after[i] is before[i] for i in CARRIED_AT_12[name])
    assert after.encoded_range == CARRIED[name]
    # A model of its own converts afresh: equal items, not the same ones.
    other = _items(_body(maker(), messages), name)
    assert other == after and not any(other[i] is after[i] for i in CARRIED[name])


@pytest.mark.parametrize("name", list(MAKERS))
def test_short_transcripts_are_converted_afresh_and_longer_ones_cached(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    for n in range(1, 8):
        body = _body(model, messages[:n])
        assert body == _fresh(maker, messages[:n])
        assert _items(body, name).encoded_range is None, n
    again = _items(_body(model, messages[:7]), name)
    assert not any(a is b for a, b in zip(again, _items(_body(model, messages[:7]), name), strict=True))
    assert _items(_body(model, messages[:12]), name).encoded_range == CARRIED_AT_12[name]


def test_the_carried_json_is_copied_in_and_an_item_put_in_its_place_is_encoded() -> None:
    model = _chat()
    messages: list[Message] = []
    for i in range(4):
        messages += [UserMessage(content=f"Q{i}"), _same("openai", "openai-chat", [TextContent(text=str(i))])]
    messages.append(UserMessage(content="Last"))
    body = _body(model, messages)
    items = _items(body, "openai-chat")
    assert items.encoded_range == range(1, 9)
    sent = msgspec.json.encode(body)
    assert _joined(body) == sent
    # Cached items must not be changed: a change behind the list's back is not seen.
    items[1]["content"] = "changed"
    assert _joined(body) == sent
    assert msgspec.json.encode(body) != sent
    items[1] = {"role": "user", "content": "replaced"}
    assert items.encoded_range is None
    assert _joined(body) == msgspec.json.encode(body)
    assert b'"replaced"' in _joined(body)


_NEW = {"role": "user", "content": "new"}

# A list change and the items whose JSON the list carries afterwards, for a list of 19
# items carrying 1..17.
CHANGES: dict[str, tuple[Callable[[WireItems], object], range | None]] = {
    "set before": (lambda w: w.__setitem__(0, _NEW), range(1, 18)),
    "set inside": (lambda w: w.__setitem__(5, _NEW), None),
    "set first carried": (lambda w: w.__setitem__(1, _NEW), None),
    "set last carried": (lambda w: w.__setitem__(-2, _NEW), None),
    "set after": (lambda w: w.__setitem__(-1, _NEW), range(1, 18)),
    "set slice": (lambda w: w.__setitem__(slice(18, 19), [_NEW]), None),
    "delete before": (lambda w: w.__delitem__(0), range(0, 17)),
    "delete inside": (lambda w: w.__delitem__(3), None),
    "delete after": (lambda w: w.__delitem__(18), range(1, 18)),
    "delete slice": (lambda w: w.__delitem__(slice(-1, None)), None),
    "+=": (lambda w: w.__iadd__([_NEW, _NEW]), range(1, 18)),
    "*= 2": (lambda w: w.__imul__(2), None),
    "*= 0": (lambda w: w.__imul__(0), None),
    "append": (lambda w: w.append(_NEW), range(1, 18)),
    "extend": (lambda w: w.extend([_NEW]), range(1, 18)),
    "insert first": (lambda w: w.insert(0, _NEW), range(2, 19)),
    "insert before the run": (lambda w: w.insert(1, _NEW), range(2, 19)),
    "insert far before": (lambda w: w.insert(-100, _NEW), range(2, 19)),
    "insert inside": (lambda w: w.insert(4, _NEW), None),
    "insert after the run": (lambda w: w.insert(18, _NEW), range(1, 18)),
    "insert at the end": (lambda w: w.insert(100, _NEW), range(1, 18)),
    "pop": (lambda w: w.pop(), range(1, 18)),
    "pop first": (lambda w: w.pop(0), range(0, 17)),
    "pop inside": (lambda w: w.pop(-3), None),
    "remove": (lambda w: w.remove(w[-1]), None),
    "clear": (lambda w: w.clear(), None),
    "sort": (lambda w: w.sort(key=lambda item: str(item.get("role"))), None),
    "reverse": (lambda w: w.reverse(), None),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_list_change_is_encoded_as_msgspec_encodes_it(change: str) -> None:
    body = _body(_chat(), transcript("openai", "openai-chat")[:20])
    items = _items(body, "openai-chat")
    assert len(items) == 19 and items.encoded_range == range(1, 18)
    apply, carried = CHANGES[change]
    apply(items)
    assert items.encoded_range == carried
    assert _joined(body) == msgspec.json.encode(body)


def test_a_change_made_behind_the_list_methods_is_caught() -> None:
    body = _body(_chat(), transcript("openai", "openai-chat")[:20])
    items = _items(body, "openai-chat")
    list.__setitem__(items, 1, _NEW)  # bypasses WireItems.__setitem__
    assert _joined(body) == msgspec.json.encode(body)
    list.__delitem__(items, slice(2, None))
    assert _joined(body) == msgspec.json.encode(body)


BEHIND_THE_BACK: dict[str, Callable[[WireItems], object]] = {
    "list.__setitem__ inside": lambda w: list.__setitem__(w, 5, _NEW),
    "list.__delitem__ inside": lambda w: list.__delitem__(w, 5),
    "list.insert inside": lambda w: list.insert(w, 5, _NEW),
    "list.reverse": lambda w: list.reverse(w),
}


@pytest.mark.parametrize("change", [*CHANGES, *BEHIND_THE_BACK])
def test_a_request_changed_and_dropped_does_not_change_the_next(change: str) -> None:
    # The list handed out with a request is reused for the next one once nothing else
    # holds it; whatever was done to it must not reach the next request.
    messages = transcript("openai", "openai-chat")
    model = _chat()
    items = _items(_body(model, messages[:20]), "openai-chat")
    CHANGES[change][0](items) if change in CHANGES else BEHIND_THE_BACK[change](items)
    del items
    body = _body(model, messages[:22])
    assert body == _fresh(_chat, messages[:22])
    assert _joined(body) == msgspec.json.encode(body)
    assert _items(body, "openai-chat").encoded_range == range(1, 19)


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_dropped_request_list_is_reused_and_one_still_held_is_not(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    first = _items(_body(model, messages[:12]), name)
    snapshot = list(first)
    second = _items(_body(model, messages[:20]), name)
    assert second is not first and list(first) == snapshot  # ``first`` was still held
    second_id = id(second)
    del first, second
    third = _items(_body(model, messages), name)
    assert id(third) == second_id
    assert third == _fresh(maker, messages)[KEYS[name]]


def test_copies_are_plain_lists() -> None:
    items = _items(_body(_chat(), transcript("openai", "openai-chat")[:20]), "openai-chat")
    for duplicate in (copy.copy(items), copy.deepcopy(items), items[:], items.copy()):
        assert type(duplicate) is list and duplicate == items
    joined = items + [_NEW]  # noqa: RUF005 (the operator is what is tested)
    assert type(joined) is list and joined == [*items, _NEW]


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_changed_transcript_is_encoded_as_msgspec_encodes_it(name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = transcript(provider, api)
    model = maker()
    variants = [
        messages,
        messages[:10],
        [*messages[:5], UserMessage(content="Edited"), *messages[6:]],
        [*messages, _result("c5", "5"), UserMessage(content="More")],
        [UserMessage(content="New start"), *messages[1:]],
        [*messages, _result("c5", "5"), UserMessage(content="More")],
    ]
    for i, variant in enumerate(variants):
        body = _body(model, variant)
        assert _joined(body) == msgspec.json.encode(_fresh(maker, variant)), i


def test_bodies_without_carried_json_are_encoded_as_msgspec_encodes_them() -> None:
    bodies: list[Any] = [
        {},
        {"messages": WireItems()},
        {"messages": WireItems([{"role": "user", "content": "hi"}]), "n": 1.5},
        {"a": [1, 2], "b": {"c": None}},
    ]
    for body in bodies:
        assert _joined(body) == msgspec.json.encode(body)


def test_pieces_still_held_do_not_change_as_the_cache_grows() -> None:
    messages = _long("openai", "openai-chat")
    model = _chat()
    held = [encode_body(_body(model, messages[: i + 1])) for i in range(len(messages))]
    for i, pieces in enumerate(held):
        assert b"".join(pieces) == msgspec.json.encode(_fresh(_chat, messages[: i + 1])), i
    assert len(held[-1]) == 3


def test_a_nul_byte_in_a_callers_raw_value_does_not_confuse_the_pieces() -> None:
    model = _chat()
    body = _body(model, _long("openai", "openai-chat"))
    body["metadata"] = msgspec.Raw(b'"a\x00b"')
    assert encode_body(body) == [msgspec.json.encode(body)]


@pytest.mark.parametrize("name", list(MAKERS))
async def test_long_requests_are_sent_as_msgspec_encodes_them(loopback: Any, name: str) -> None:
    maker, provider, api = MAKERS[name]
    messages = _long(provider, api)
    model = maker(retry=RetryPolicy(max_attempts=1))
    model.base_url = loopback.url  # no replies are queued: every request fails once, after it is sent
    grown: list[Message] = []
    for i, message in enumerate(messages):
        grown.append(message)
        context = Request(system_prompt=SYSTEM, messages=grown, tools=TOOLS)
        events = [event async for event in model.stream(context)]
        assert events[-1].type == "error", i
    for i, received in enumerate(loopback.requests):
        expected = msgspec.json.encode(_fresh(maker, messages[: i + 1]))
        assert received.body == expected, i
        assert received.headers["Content-Length"] == str(len(expected))
        assert received.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("name", list(MAKERS))
async def test_requests_are_sent_as_msgspec_encodes_them(loopback: Any, name: str) -> None:
    maker, provider, api = MAKERS[name]
    key = KEYS[name]
    messages = transcript(provider, api)
    bodies: list[bytes] = []

    def observe(exchange: HTTPExchange) -> None:
        if exchange.phase == "request":
            bodies.append(msgspec.json.encode(exchange.body))

    model = maker(observer=observe, retry=RetryPolicy(max_attempts=1))
    model.base_url = loopback.url  # no replies are queued: every request fails once, after it is sent
    grown: list[Message] = []
    replaced = [{"role": "user", "content": "from extra"}]
    cases: list[StreamOptions] = []
    for i, message in enumerate(messages):
        grown.append(message)
        options = StreamOptions(extra={"temperature": 0.5}) if i % 3 == 0 else StreamOptions()
        if i == len(messages) - 1:
            options = StreamOptions(extra={key: replaced})
        cases.append(options)
        context = Request(system_prompt=SYSTEM, messages=grown, tools=TOOLS)
        events = [event async for event in model.stream(context, options)]
        assert events[-1].type == "error", i
    assert len(loopback.requests) == len(bodies) == len(messages)
    for i, (received, observed) in enumerate(zip(loopback.requests, bodies, strict=True)):
        assert received.body == observed, i
        fresh = _fresh(maker, messages[: i + 1])
        fresh.update(cases[i].extra or {})
        assert received.body == msgspec.json.encode(fresh), i
    assert loopback.requests[-1].json[key] == replaced


@pytest.mark.parametrize("cached", [False, True], ids=["one piece", "pieces"])
async def test_a_body_over_a_megabyte_arrives_whole_without_a_warning(loopback: Any, cached: bool) -> None:
    # aiohttp warns (ResourceWarning) when given more than 1 MB of bytes to send.
    messages: list[Message] = [UserMessage(content="y" * 1_100_000)]
    for i in range(4):
        messages += [_same("openai", "openai-chat", [TextContent(text=f"Seen {i}.")]), UserMessage(content="And?")]
    model = _chat(retry=RetryPolicy(max_attempts=1), **({} if cached else {"rewrite": lambda body: None}))
    model.base_url = loopback.url  # no replies are queued: the request fails once it is sent
    context = Request(system_prompt=SYSTEM, messages=messages, tools=TOOLS)
    pieces = encode_body(model.build_request(context, StreamOptions(), "k").body)
    assert len(pieces) == (3 if cached else 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = [event async for event in model.stream(context)]
    assert events[-1].type == "error"
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    expected = msgspec.json.encode(_fresh(_chat, messages))
    assert loopback.requests[-1].body == expected
    assert loopback.requests[-1].headers["Content-Length"] == str(len(expected))
