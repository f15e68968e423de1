"""Talking to models: messages, the streaming protocol, the model interface, errors.

This package imports nothing else from ketch but the bottom helper ``ketch._lazy``.
Provider adapters and the HTTP client load lazily, on first use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from ._errors import ErrorKind, ModelError
from ._messages import (
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
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
    scrub_surrogates,
    use_clock,
)
from ._model import (
    DEFAULT_CONTEXT_WINDOW,
    Model,
    PreparesMessages,
    Request,
    SettableContextWindow,
    StreamOptions,
    SupportsNativeOutput,
    SystemBlock,
    SystemPrompt,
    ThinkingLevel,
    ToolSpec,
    complete,
)
from ._signal import Aborted, AbortSignal
from ._stream import (
    AsyncClosable,
    MessageBuilder,
    Retry,
    StreamDone,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    guard_stream,
    parse_partial_json,
)

if TYPE_CHECKING:
    from ._fallback import FallbackModel
    from ._http import close_session
    from ._providers.proxy import ProxyModel, proxy
    from ._registry import ModelInfo, register_model, register_provider
    from ._resolve import get_model, register_api
    from ._structured import parse_structured, response_format_for

_LAZY = {
    "FallbackModel": "._fallback",
    "close_session": "._http",
    "ProxyModel": "._providers.proxy",
    "proxy": "._providers.proxy",
    "ModelInfo": "._registry",
    "register_model": "._registry",
    "register_provider": "._registry",
    "get_model": "._resolve",
    "register_api": "._resolve",
    "parse_structured": "._structured",
    "response_format_for": "._structured",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "AbortSignal",
    "Aborted",
    "AssistantMessage",
    "AsyncClosable",
    "ContentBlock",
    "Cost",
    "CustomMessage",
    "ErrorKind",
    "FallbackModel",
    "ImageContent",
    "Message",
    "MessageBuilder",
    "Model",
    "ModelError",
    "ModelInfo",
    "PreparesMessages",
    "ProxyModel",
    "Request",
    "Retry",
    "SettableContextWindow",
    "StopReason",
    "StreamDone",
    "StreamError",
    "StreamEvent",
    "StreamOptions",
    "StreamStart",
    "SupportsNativeOutput",
    "SystemBlock",
    "SystemPrompt",
    "TextContent",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "ThinkingContent",
    "ThinkingDelta",
    "ThinkingEnd",
    "ThinkingLevel",
    "ThinkingStart",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "close_session",
    "complete",
    "get_model",
    "guard_stream",
    "message_from_dict",
    "message_to_dict",
    "messages_from_json",
    "messages_to_json",
    "parse_partial_json",
    "parse_structured",
    "proxy",
    "register_api",
    "register_model",
    "register_provider",
    "response_format_for",
    "scrub_surrogates",
    "use_clock",
]
