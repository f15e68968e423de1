"""Requests built from a growing transcript, whose converted messages each adapter
reuses from turn to turn, equal requests built from scratch, and no request is changed
by a later one.

The reference is the same adapter with a ``rewrite`` hook, which always converts the
whole transcript afresh.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from ketch.llm import (
    AssistantMessage,
    Context,
    ImageContent,
    Message,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from ketch.llm.handoff import MISSING_TOOL_RESULT
from ketch.llm.providers.anthropic import AnthropicModel
from ketch.llm.providers.base import HTTPModel
from ketch.llm.providers.openai_chat import OpenAIChatModel
from ketch.llm.providers.openai_responses import OpenAIResponsesModel

MODEL = "gpt-4o-mini"
SYSTEM = "Be brief."
TOOLS = [ToolSpec(name="add", description="Add.", parameters={"type": "object", "properties": {}})]


def _chat(**kwargs: Any) -> HTTPModel:
    return OpenAIChatModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


def _anthropic(**kwargs: Any) -> HTTPModel:
    return AnthropicModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


def _responses(**kwargs: Any) -> HTTPModel:
    return OpenAIResponsesModel(MODEL, api_key="k", base_url="http://127.0.0.1:9/v1", **kwargs)


MAKERS: dict[str, tuple[Callable[..., HTTPModel], str, str]] = {
    "openai-chat": (_chat, "openai", "openai-chat"),
    "anthropic": (_anthropic, "anthropic", "anthropic-messages"),
    "openai-responses": (_responses, "openai", "openai-responses"),
}


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
    context = Context(system_prompt=system, messages=messages, tools=TOOLS)
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
        _change_everything(body.get("messages", body.get("input", body.get("contents"))))
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
        _same("openai", "openai-chat", [ToolCall(id="c1", name="add", arguments={"a": 1})]),
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
    view[7] = _result(view[7].tool_call_id, "[cleared]")  # type: ignore[union-attr]
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
