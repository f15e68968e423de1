"""Messages as the GenAI semantic conventions' JSON (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``), written only when content
capture is on."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..llm import AssistantMessage
from ..llm import ImageContent
from ..llm import Message
from ..llm import StopReason
from ..llm import TextContent
from ..llm import ThinkingContent
from ..llm import ToolCall
from ..llm import ToolResultMessage
from ..llm import UserMessage
from ..llm import encode_json

_encoder = msgspec.json.Encoder()

FINISH_REASONS: dict[str, str] = {
    "stop": "stop",
    "length": "length",
    "tool_use": "tool_call",
    "pause": "pause",
    "error": "error",
    "aborted": "aborted",
}
"""ketch's stop reasons as the conventions' finish reasons."""


def finish_reason(stop_reason: StopReason, error_kind: str | None) -> str:
    """The conventions' finish reason for a response's stop reason."""
    if stop_reason == "error" and error_kind == "content_filter":
        return "content_filter"
    return FINISH_REASONS.get(stop_reason, stop_reason)


def _part(block: Any) -> dict[str, Any]:
    kind = type(block)
    if kind is TextContent:
        return {"type": "text", "content": block.text}
    if kind is ThinkingContent:
        return {"type": "reasoning", "content": block.thinking}
    if kind is ToolCall:
        return {"type": "tool_call", "id": block.id, "name": block.name, "arguments": block.args}
    if kind is ImageContent:
        if block.url is not None:
            return {"type": "uri", "modality": "image", "mime_type": block.mime_type, "uri": block.url}
        return {"type": "blob", "modality": "image", "mime_type": block.mime_type, "content": block.data}
    return {"type": getattr(block, "type", kind.__name__)}


def message_json(message: Message) -> dict[str, Any] | None:
    """One message in the conventions' shape (None for application-only messages)."""
    kind = type(message)
    if kind is UserMessage:
        assert isinstance(message, UserMessage)
        content = message.content
        parts = [_part(b) for b in content] if isinstance(content, list) else [{"type": "text", "content": content}]
        return {"role": "user", "parts": parts}
    if kind is AssistantMessage:
        assert isinstance(message, AssistantMessage)
        return {"role": "assistant", "parts": [_part(b) for b in message.content]}
    if kind is ToolResultMessage:
        assert isinstance(message, ToolResultMessage)
        return {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": message.tool_call_id, "response": message.text}],
        }
    return None


def to_json(value: Any) -> str:
    """``value`` as a JSON string (lone surrogates become U+FFFD)."""
    return encode_json(value, _encoder).decode()


def input_messages(messages: Iterable[Message]) -> str:
    """``gen_ai.input.messages`` for the messages a request was made from."""
    return to_json([m for m in (message_json(x) for x in messages) if m is not None])


def output_messages(message: AssistantMessage) -> str:
    """``gen_ai.output.messages`` for one response."""
    out = message_json(message)
    assert out is not None
    out["finish_reason"] = finish_reason(message.stop_reason, message.error_kind)
    return to_json([out])


def system_instructions(system_prompt: str) -> str:
    """``gen_ai.system_instructions`` for a system prompt."""
    return to_json([{"type": "text", "content": system_prompt}])
