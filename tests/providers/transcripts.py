"""Transcripts the adapters' tests send: the same conversation, each adapter's own wire form."""

from __future__ import annotations

from ketch.llm import AssistantMessage
from ketch.llm import ImageContent
from ketch.llm import Request
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage


def with_images(provider: str, api: str, model: str) -> Request:
    """A prompt with an image (``AAAA``) and a tool result that is an image (``BBBB``)."""
    return Request(
        messages=[
            UserMessage(content=[TextContent(text="Look:"), ImageContent(data="AAAA")]),
            AssistantMessage(
                content=[ToolCall(id="call_1", name="shot", args={})],
                provider=provider, api=api, model=model, stop_reason="tool_use",
            ),
            ToolResultMessage(tool_call_id="call_1", tool_name="shot", content=[ImageContent(data="BBBB")]),
        ]
    )
