"""Custom messages declare what the model sees (``to_llm``) instead of being probed."""

from __future__ import annotations

from ketch.context import estimate_message_tokens
from ketch.llm import CustomMessage
from ketch.llm import Message
from ketch.llm import UserMessage
from ketch.loop import default_convert_to_llm


class Note(CustomMessage, tag="test_note"):
    text: str


class Shown(CustomMessage, tag="test_shown"):
    text: str

    def to_llm(self) -> Message | list[Message] | None:
        return UserMessage(content=f"note: {self.text}")


def test_a_custom_message_is_dropped_unless_it_says_what_the_model_sees() -> None:
    hi = UserMessage(content="hi")
    out = default_convert_to_llm([hi, Note(text="ui only"), Shown(text="seen")])
    assert out == [hi, UserMessage(content="note: seen", timestamp=out[1].timestamp)]
    assert Note(text="x").to_llm() is None
    assert Note.resets_usage_anchor is False


def test_token_estimates_count_what_the_model_sees_of_a_custom_message() -> None:
    assert estimate_message_tokens(Note(text="a long note " * 50)) == 0
    shown = Shown(text="a long note " * 50)
    assert estimate_message_tokens(shown) == estimate_message_tokens(UserMessage(content=f"note: {shown.text}"))
    assert estimate_message_tokens(shown) > 0
