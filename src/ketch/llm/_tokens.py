"""Token accounting: how full the context window is, without a network call.

:func:`context_usage` anchors on real numbers: the input (plus cache) tokens the
provider reported for the last assistant message that has usage, plus an estimate for
the messages after it. :class:`ContextMeter` keeps that figure up to date in
O(new messages) per call.
Estimates: about 4 characters per token for Latin text, about 1.5 tokens per
character for CJK-dominant text, and a fixed cost per image. A tokenizer can replace
the estimate with :func:`set_token_counter`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import msgspec

from ._messages import AssistantMessage
from ._messages import AudioContent
from ._messages import CustomMessage
from ._messages import DocumentContent
from ._messages import HostedToolCall
from ._messages import HostedToolResult
from ._messages import ImageContent
from ._messages import Message
from ._messages import TextContent
from ._messages import ThinkingContent
from ._messages import ToolCall
from ._messages import ToolResultMessage
from ._messages import UserMessage
from ._messages import encode_json

IMAGE_TOKENS = 1200
"""Estimated tokens for one image."""

_counter: Callable[[str], int] | None = None


def set_token_counter(counter: Callable[[str], int] | None) -> None:
    """Count text tokens with ``counter`` (e.g. a local tokenizer) instead of estimating."""
    global _counter
    _counter = counter


class ContextUsage(msgspec.Struct, kw_only=True, frozen=True):
    """How much of the context window the transcript uses."""

    tokens: int
    window: int

    @property
    def percent(self) -> float:
        """``tokens`` as a percentage of ``window``."""
        return 100.0 * self.tokens / self.window if self.window > 0 else 0.0


def estimate_text_tokens(text: str) -> int:
    """Estimated tokens of ``text``: ~4 chars/token Latin, ~1.5 tokens/char CJK."""
    if not text:
        return 0
    if _counter is not None:
        return _counter(text)
    chars = len(text)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > 2 * chars:
        return max(1, round(chars * 1.5))
    return max(1, (size + 3) // 4)


_json = msgspec.json.Encoder()


def _block_tokens(block: Any) -> int:
    cls = type(block)
    if cls is TextContent:
        return estimate_text_tokens(block.text)
    if cls is ThinkingContent:
        return estimate_text_tokens(block.thinking) or (1 if block.signature else 0)
    if cls is ToolCall:
        size = len(encode_json(block.args, _json))
        return max(1, (len(block.name) + size + 3) // 4)
    if cls is ImageContent:
        return IMAGE_TOKENS
    if cls is HostedToolCall or cls is HostedToolResult:  # sent natively, or as its summary
        native = block.native
        size = len(encode_json(native, _json)) if native is not None else len(getattr(block, "output", ""))
        return max(1, (size + 3) // 4)
    if cls is DocumentContent:  # its bytes (base64 is 4/3 of them), about 4 a token
        return max(1, (len(block.data) * 3 // 4 + 3) // 4)
    if cls is AudioContent:  # about 32 tokens a second: 1 per 500 bytes of compressed or 16 kHz audio
        return max(1, len(block.data) * 3 // 4 // 500)
    return 0


def estimate_message_tokens(message: Message) -> int:
    """Estimated tokens of one message (custom messages count their ``to_llm()`` form)."""
    cls = type(message)
    if cls is UserMessage or cls is AssistantMessage or cls is ToolResultMessage:
        content: list[Any] = message.content  # type: ignore[attr-defined]
        return max(1, sum(_block_tokens(b) for b in content))
    if not isinstance(message, CustomMessage):
        return 0
    converted = message.to_llm()
    if converted is None:
        return 0
    if isinstance(converted, list):
        return sum(estimate_message_tokens(m) for m in converted)
    return estimate_message_tokens(converted)


def _anchor_tokens(m: Message, not_before: float) -> int:
    """The context size an assistant message's reported usage shows (0: not an anchor)."""
    if type(m) is not AssistantMessage:
        return 0
    assert isinstance(m, AssistantMessage)
    if m.stop_reason in ("error", "aborted") or m.timestamp < not_before:
        return 0
    u = m.usage
    tokens = u.input + u.cache_read + u.cache_write
    if tokens == 0 and u.total_tokens:
        tokens = u.total_tokens - u.output
    return tokens + u.output if tokens > 0 else 0


class ContextMeter:
    """Incremental :func:`context_usage` for one transcript.

    For an append-only transcript each :meth:`measure` costs O(new messages); any other
    change (the list shrank, or its first or last-seen message was replaced) triggers
    one full recount. A transcript that starts with a compaction summary (a message
    whose class sets ``resets_usage_anchor``) only anchors on assistant messages newer
    than it: older kept messages report the size of the pre-compaction context.
    """

    __slots__ = ("_anchor", "_first", "_last", "_not_before", "_seen", "_tail")

    def __init__(self) -> None:
        self._seen = 0
        self._anchor = 0
        self._tail = 0
        self._not_before = 0.0
        self._first: Message | None = None
        self._last: Message | None = None

    def measure(self, messages: Sequence[Message], window: int) -> ContextUsage:
        """How full ``window`` is with ``messages``."""
        seen = self._seen
        if seen and (len(messages) < seen or messages[0] is not self._first or messages[seen - 1] is not self._last):
            seen = 0
        if seen == 0:
            self._anchor = 0
            self._tail = 0
            first = messages[0] if messages else None
            self._not_before = first.timestamp if isinstance(first, CustomMessage) and first.resets_usage_anchor else 0.0
        not_before = self._not_before
        for i in range(seen, len(messages)):
            m = messages[i]
            anchor = _anchor_tokens(m, not_before)
            if anchor:
                self._anchor = anchor
                self._tail = 0
            else:
                self._tail += estimate_message_tokens(m)
        self._seen = len(messages)
        if messages:
            self._first, self._last = messages[0], messages[-1]
        return ContextUsage(tokens=self._anchor + self._tail, window=window)


def context_usage(messages: Sequence[Message], window: int) -> ContextUsage:
    """Tokens in context: the last reported request size plus estimates for what follows.

    One-off; to follow a growing transcript cheaply, keep a :class:`ContextMeter`.
    """
    return ContextMeter().measure(messages, window)
