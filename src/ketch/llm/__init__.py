"""Talking to models: messages, the streaming protocol, the model interface, errors.

This package imports nothing else from ketch. Provider adapters and the HTTP client
load lazily, on first use.
"""

from .errors import ErrorKind, ModelError
from .messages import (
    AssistantMessage,
    ContentBlock,
    Cost,
    CustomMessage,
    ImageContent,
    Message,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    from_dict,
    from_json,
    to_dict,
    to_json,
)
from .model import Context, Model, StreamOptions, ThinkingLevel, ToolSpec, complete
from .signal import Aborted, AbortSignal
from .stream import MessageBuilder, StreamEvent, guard_stream, parse_partial_json

__all__ = [
    "AbortSignal",
    "Aborted",
    "AssistantMessage",
    "ContentBlock",
    "Context",
    "Cost",
    "CustomMessage",
    "ErrorKind",
    "ImageContent",
    "Message",
    "MessageBuilder",
    "Model",
    "ModelError",
    "StopReason",
    "StreamEvent",
    "StreamOptions",
    "TextContent",
    "ThinkingContent",
    "ThinkingLevel",
    "ToolCall",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "complete",
    "from_dict",
    "from_json",
    "guard_stream",
    "parse_partial_json",
    "to_dict",
    "to_json",
]
