"""ketch: a fast, fault-correct, asyncio-native agent runtime."""

from .llm import (
    AbortSignal,
    AssistantMessage,
    Context,
    CustomMessage,
    ImageContent,
    Message,
    Model,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "AbortSignal",
    "AssistantMessage",
    "Context",
    "CustomMessage",
    "ImageContent",
    "Message",
    "Model",
    "StreamOptions",
    "TextContent",
    "ThinkingContent",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
]
