"""Talking to models: messages, the streaming protocol, the model interface, errors.

This package imports nothing else from ketch but the bottom helper ``ketch._lazy``.
Provider adapters and the HTTP client load lazily, on first use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from ._errors import ErrorKind
from ._errors import ModelError
from ._errors import exception_text
from ._messages import AssistantMessage
from ._messages import AudioContent
from ._messages import Citation
from ._messages import ContentBlock
from ._messages import Cost
from ._messages import CustomMessage
from ._messages import DocumentContent
from ._messages import HostedToolCall
from ._messages import HostedToolResult
from ._messages import ImageContent
from ._messages import Message
from ._messages import StopReason
from ._messages import TextContent
from ._messages import ThinkingContent
from ._messages import ToolCall
from ._messages import ToolResultMessage
from ._messages import Usage
from ._messages import UserMessage
from ._messages import encode_json
from ._messages import hosted_result_text
from ._messages import message_from_dict
from ._messages import message_to_dict
from ._messages import messages_from_json
from ._messages import messages_to_json
from ._messages import scrub_surrogates
from ._messages import use_clock
from ._model import DEFAULT_CONTEXT_WINDOW
from ._model import HostedTool
from ._model import Model
from ._model import PreparesMessages
from ._model import Request
from ._model import RetriesRequests
from ._model import SettableContextWindow
from ._model import StreamOptions
from ._model import SupportsNativeOutput
from ._model import SystemBlock
from ._model import SystemPrompt
from ._model import ThinkingLevel
from ._model import ToolSpec
from ._model import complete
from ._model import hosted_kinds
from ._signal import Aborted
from ._signal import AbortSignal
from ._stream import AsyncClosable
from ._stream import HostedToolBlock
from ._stream import MessageBuilder
from ._stream import Retry
from ._stream import StreamDone
from ._stream import StreamError
from ._stream import StreamEvent
from ._stream import StreamStart
from ._stream import TextDelta
from ._stream import TextEnd
from ._stream import TextStart
from ._stream import ThinkingDelta
from ._stream import ThinkingEnd
from ._stream import ThinkingStart
from ._stream import ToolCallDelta
from ._stream import ToolCallDeltaJoiner
from ._stream import ToolCallEnd
from ._stream import ToolCallStart
from ._stream import guard_stream
from ._stream import parse_partial_json

if TYPE_CHECKING:
    from ._fallback import FallbackModel
    from ._http import close_session
    from ._http import redact_text
    from ._http import redact_url
    from ._providers.proxy import ProxyModel
    from ._providers.proxy import proxy
    from ._registry import ModelInfo
    from ._registry import register_model
    from ._registry import register_provider
    from ._registry import takes_audio
    from ._registry import takes_documents
    from ._resolve import get_model
    from ._resolve import register_api
    from ._retry import RetryPolicy
    from ._structured import parse_structured
    from ._structured import response_format_for

_LAZY = {
    "FallbackModel": "._fallback",
    "close_session": "._http",
    "redact_text": "._http",
    "redact_url": "._http",
    "ProxyModel": "._providers.proxy",
    "proxy": "._providers.proxy",
    "ModelInfo": "._registry",
    "register_model": "._registry",
    "register_provider": "._registry",
    "takes_audio": "._registry",
    "takes_documents": "._registry",
    "get_model": "._resolve",
    "register_api": "._resolve",
    "RetryPolicy": "._retry",
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
    "AudioContent",
    "Citation",
    "ContentBlock",
    "Cost",
    "CustomMessage",
    "DocumentContent",
    "ErrorKind",
    "FallbackModel",
    "HostedTool",
    "HostedToolBlock",
    "HostedToolCall",
    "HostedToolResult",
    "ImageContent",
    "Message",
    "MessageBuilder",
    "Model",
    "ModelError",
    "ModelInfo",
    "PreparesMessages",
    "ProxyModel",
    "Request",
    "RetriesRequests",
    "Retry",
    "RetryPolicy",
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
    "ToolCallDeltaJoiner",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "close_session",
    "complete",
    "encode_json",
    "exception_text",
    "get_model",
    "guard_stream",
    "hosted_kinds",
    "hosted_result_text",
    "message_from_dict",
    "message_to_dict",
    "messages_from_json",
    "messages_to_json",
    "parse_partial_json",
    "parse_structured",
    "proxy",
    "redact_text",
    "redact_url",
    "register_api",
    "register_model",
    "register_provider",
    "response_format_for",
    "scrub_surrogates",
    "takes_audio",
    "takes_documents",
    "use_clock",
]
