"""White-box test: imports ketch implementation modules (private) directly.

Cross-provider handoff: what each target model sees of a transcript."""

from __future__ import annotations

import re

from ketch.llm import AssistantMessage
from ketch.llm import CustomMessage
from ketch.llm import Message
from ketch.llm import TextContent
from ketch.llm import ThinkingContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.llm import messages_to_json
from ketch.llm._handoff import MISSING_TOOL_RESULT
from ketch.llm._handoff import anthropic_tool_id
from ketch.llm._handoff import mistral_tool_id
from ketch.llm._handoff import openai_chat_tool_id
from ketch.llm._handoff import openai_responses_tool_id
from ketch.llm._handoff import prepare_messages

TARGET = {"provider": "anthropic", "api": "anthropic-messages", "model": "claude-sonnet-4-5"}
OTHER = {"provider": "openai", "api": "openai-responses", "model": "gpt-5"}


class Note(CustomMessage, tag="handoff_note"):
    text: str


def user(text: str, t: float = 1.0) -> UserMessage:
    return UserMessage(content=text, timestamp=t)


def asst(*blocks: TextContent | ThinkingContent | ToolCall, origin: dict[str, str] = TARGET, t: float = 2.0,
         stop: str = "stop") -> AssistantMessage:
    return AssistantMessage(content=list(blocks), timestamp=t, stop_reason=stop, **origin)  # type: ignore[arg-type]


def result(call_id: str, text: str = "ok", name: str = "f", t: float = 3.0) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call_id, tool_name=name, content=[TextContent(text=text)], timestamp=t)


def missing(call_id: str, name: str = "f", t: float = 2.0) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name=name, content=[TextContent(text=MISSING_TOOL_RESULT)], is_error=True, timestamp=t
    )


def prepare(messages: list[Message], **kw: object) -> list[Message]:
    return prepare_messages(messages, **TARGET, **kw)  # type: ignore[arg-type]


def test_same_model_history_passes_by_identity() -> None:
    messages: list[Message] = [
        user("hi"),
        asst(
            ThinkingContent(thinking="", signature="sig-enc"),
            ThinkingContent(thinking="plan", signature="sig-1"),
            ThinkingContent(thinking="", signature="r", redacted=True),
            TextContent(text="calling", signature="ts"),
            ToolCall(id="toolu_1", name="f", args={"a": 1}, signature="x"),
        ),
        result("toolu_1"),
        asst(TextContent(text="done")),
    ]
    out = prepare(messages)
    assert out == messages
    assert out is not messages
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_cross_model_assistant_is_cleaned() -> None:
    call = ToolCall(id="call_1|fc.9", name="f", args={"a": 1}, signature="fc_sig")
    foreign = asst(
        ThinkingContent(thinking="readable", signature="s"),
        ThinkingContent(thinking="", signature="enc"),
        ThinkingContent(thinking="", signature="r", redacted=True),
        TextContent(text="plain"),
        TextContent(text="signed", signature='{"id":"msg_1"}'),
        TextContent(text=""),
        call,
        origin=OTHER,
    )
    messages: list[Message] = [user("hi"), foreign, result("call_1|fc.9")]
    out = prepare(messages, normalize_id=anthropic_tool_id)
    assert out == [
        messages[0],
        asst(
            TextContent(text="plain"),
            TextContent(text="signed"),
            ToolCall(id="call_1_fc_9", name="f", args={"a": 1}),
            origin=OTHER,
        ),
        result("call_1_fc_9"),
    ]
    new = out[1]
    assert isinstance(new, AssistantMessage)
    assert new.content[0] is foreign.content[3]
    assert new.usage is foreign.usage


def test_other_model_of_the_same_provider_counts_as_foreign() -> None:
    origin = {**TARGET, "model": "claude-opus-4-1"}
    msg = asst(ThinkingContent(thinking="t", signature="s"), TextContent(text="a"), origin=origin)
    assert prepare([msg]) == [asst(TextContent(text="a"), origin=origin)]
    origin = {**TARGET, "api": "other-api"}
    msg = asst(ThinkingContent(thinking="t", signature="s"), TextContent(text="a"), origin=origin)
    assert prepare([msg]) == [asst(TextContent(text="a"), origin=origin)]


def test_cross_model_without_normaliser_keeps_ids_but_strips_signatures() -> None:
    messages: list[Message] = [asst(ToolCall(id="a.b", name="f", signature="s"), origin=OTHER), result("a.b")]
    assert prepare(messages) == [asst(ToolCall(id="a.b", name="f"), origin=OTHER), messages[1]]
    out = prepare(messages)
    assert out[1] is messages[1]


def test_cross_model_message_left_empty_is_dropped() -> None:
    messages: list[Message] = [
        user("a"),
        asst(ThinkingContent(thinking="only thinking"), origin=OTHER),
        user("b", t=4.0),
    ]
    assert prepare(messages) == [messages[0], messages[2]]


def test_unchanged_foreign_message_passes_by_identity() -> None:
    msg = asst(TextContent(text="hello"), ToolCall(id="call_ok", name="f"), origin=OTHER)
    messages: list[Message] = [msg, result("call_ok")]
    out = prepare(messages, normalize_id=anthropic_tool_id)
    assert out[0] is msg and out[1] is messages[1]


def test_failed_and_aborted_assistants_are_skipped_with_their_results() -> None:
    messages: list[Message] = [
        user("a"),
        asst(TextContent(text="partial"), ToolCall(id="c1", name="f"), stop="aborted"),
        result("c1"),
        asst(TextContent(text="boom"), stop="error"),
        user("b", t=5.0),
        asst(TextContent(text="fine"), t=6.0),
    ]
    assert prepare(messages) == [messages[0], messages[4], messages[5]]


def test_missing_results_get_synthetic_errors_before_the_next_user_message() -> None:
    messages: list[Message] = [
        asst(ToolCall(id="c1", name="f"), ToolCall(id="c2", name="g"), ToolCall(id="c3", name="h"), t=7.0),
        result("c2", name="g"),
        user("steer", t=8.0),
        result("c1"),
    ]
    assert prepare(messages) == [
        messages[0],
        messages[1],
        missing("c1", "f", t=7.0),
        missing("c3", "h", t=7.0),
        messages[2],
    ]


def test_missing_results_before_the_next_assistant_and_at_the_end() -> None:
    messages: list[Message] = [
        asst(ToolCall(id="c1", name="f"), t=2.0),
        asst(ToolCall(id="c2", name="g"), t=3.0),
    ]
    assert prepare(messages) == [messages[0], missing("c1", "f", t=2.0), messages[1], missing("c2", "g", t=3.0)]


def test_missing_results_use_normalised_ids() -> None:
    messages: list[Message] = [asst(ToolCall(id="x:1", name="f"), origin=OTHER)]
    assert prepare(messages, normalize_id=anthropic_tool_id) == [
        asst(ToolCall(id="x_1", name="f"), origin=OTHER),
        missing("x_1"),
    ]


def test_orphan_and_duplicate_results_are_dropped() -> None:
    messages: list[Message] = [
        result("early"),
        user("a"),
        asst(ToolCall(id="c1", name="f")),
        result("c1"),
        result("c1", text="again"),
        result("unknown"),
        user("b"),
        result("c1", text="late"),
    ]
    assert prepare(messages) == [messages[1], messages[2], messages[3], messages[6]]


def test_results_only_match_the_latest_assistant() -> None:
    messages: list[Message] = [
        asst(ToolCall(id="c1", name="f")),
        result("c1"),
        asst(ToolCall(id="c2", name="f")),
        result("c1", text="stale"),
        result("c2"),
    ]
    assert prepare(messages) == [messages[0], messages[1], messages[2], messages[4]]


def test_custom_messages_are_dropped() -> None:
    messages: list[Message] = [
        user("a"),
        Note(text="ui only"),
        asst(ToolCall(id="c1", name="f")),
        Note(text="between"),
        result("c1"),
    ]
    assert prepare(messages) == [messages[0], messages[2], messages[4]]


def test_ids_normalised_by_one_foreign_message_do_not_leak_into_later_turns() -> None:
    messages: list[Message] = [
        asst(ToolCall(id="a.b", name="f"), origin=OTHER),
        result("a.b"),
        asst(ToolCall(id="a.b", name="f")),
        result("a.b"),
    ]
    out = prepare(messages, normalize_id=anthropic_tool_id)
    assert out == [asst(ToolCall(id="a_b", name="f"), origin=OTHER), result("a_b"), messages[2], messages[3]]
    assert out[3] is messages[3]


def test_inputs_are_never_mutated() -> None:
    messages: list[Message] = [
        user("a"),
        asst(
            ThinkingContent(thinking="t", signature="s"),
            TextContent(text="x", signature="y"),
            ToolCall(id="id.1", name="f", args={"k": [1]}, signature="z"),
            origin=OTHER,
        ),
        result("id.1"),
        asst(ToolCall(id="c9", name="g")),
        Note(text="n"),
    ]
    before = messages_to_json(messages)
    snapshot = list(messages)
    prepare(messages, normalize_id=anthropic_tool_id)
    prepare(messages, normalize_id=mistral_tool_id)
    assert messages_to_json(messages) == before
    assert messages == snapshot and all(a is b for a, b in zip(messages, snapshot, strict=True))


def test_prepare_is_idempotent() -> None:
    messages: list[Message] = [
        asst(ThinkingContent(thinking="t"), ToolCall(id="a/b", name="f", signature="s"), origin=OTHER),
        user("x"),
    ]
    once = prepare(messages, normalize_id=anthropic_tool_id)
    assert prepare(once, normalize_id=anthropic_tool_id) == once


def test_anthropic_tool_id() -> None:
    assert anthropic_tool_id("toolu_01AbC-9") == "toolu_01AbC-9"
    assert anthropic_tool_id("call_1|fc_2.x y") == "call_1_fc_2_x_y"
    assert anthropic_tool_id("a" * 70) == "a" * 64
    assert anthropic_tool_id("é:ü") == "___"


def test_openai_tool_ids() -> None:
    assert openai_responses_tool_id("toolu_01|x") == "toolu_01_x"
    assert openai_responses_tool_id("b" * 80) == "b" * 64
    assert openai_chat_tool_id("c" * 50) == "c" * 40
    assert openai_chat_tool_id("call.1") == "call_1"


def test_mistral_tool_id() -> None:
    assert mistral_tool_id("abcDEF123") == "abcDEF123"
    made = mistral_tool_id("call_0123456789")
    assert re.fullmatch(r"[a-zA-Z0-9]{9}", made)
    assert mistral_tool_id("call_0123456789") == made
    assert mistral_tool_id("call_0123456780") != made
