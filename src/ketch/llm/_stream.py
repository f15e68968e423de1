"""The provider-neutral streaming protocol.

A model stream yields :data:`StreamEvent` values: one :class:`StreamStart`, then block
events (``text_*``, ``thinking_*``, ``toolcall_*``), optionally :class:`Retry`
when a provider retries, and exactly one terminal :class:`StreamDone` or
:class:`StreamError`. Every event carries ``partial``, the live assistant message being
assembled, so consumers never rebuild it themselves.

Providers build events with :class:`MessageBuilder` and wrap their producer in
:func:`guard_stream`, which guarantees the terminal event, turns exceptions into error
messages and aborts into ``aborted`` messages that keep the partial content.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from types import AsyncGeneratorType
from typing import Any
from typing import ClassVar
from typing import Generic
from typing import Literal
from typing import Protocol
from typing import TypeAlias
from typing import TypeGuard
from typing import TypeVar
from typing import runtime_checkable

import jiter
import msgspec

from ._errors import ModelError
from ._errors import ServerError
from ._errors import exception_text
from ._messages import AssistantMessage
from ._messages import HostedToolCall
from ._messages import HostedToolResult
from ._messages import StopReason
from ._messages import TextContent
from ._messages import ThinkingContent
from ._messages import ToolCall
from ._messages import Usage
from ._signal import AbortSignal
from ._signal import AbortWaiter


@runtime_checkable
class AsyncClosable(Protocol):
    """A stream that can be closed before its end (async generators can): whoever stops
    reading a model's stream early closes it, so the producer's cleanup runs now."""

    def aclose(self) -> Awaitable[Any]:
        """Close the stream (runs the producer's ``finally`` blocks)."""
        ...


def is_closable(stream: object) -> TypeGuard[AsyncClosable]:
    """Whether ``stream`` is :class:`AsyncClosable` (an async generator is decided
    without the protocol check, which costs microseconds)."""
    return type(stream) is AsyncGeneratorType or isinstance(stream, AsyncClosable)


class _Event(msgspec.Struct, tag_field="type", kw_only=True):
    pass


class StreamStart(_Event, tag="start"):
    """The stream began; ``partial`` is the (empty) message being assembled."""

    type: ClassVar[Literal["start"]] = "start"

    partial: AssistantMessage


class _BlockStart(_Event):
    """The fields of a ``*_start`` event: the block opened at ``index``."""

    index: int
    partial: AssistantMessage


class _BlockDelta(_Event):
    """The fields of a ``*_delta`` event: ``delta`` appended to the block at ``index``."""

    index: int
    delta: str
    partial: AssistantMessage


class _BlockEnd(_Event):
    """The fields of a text or thinking ``*_end`` event: the block's full ``content``."""

    index: int
    content: str
    partial: AssistantMessage


class TextStart(_BlockStart, tag="text_start"):
    """A text block opened at ``index``."""

    type: ClassVar[Literal["text_start"]] = "text_start"


class TextDelta(_BlockDelta, tag="text_delta"):
    """Text appended to the block at ``index``."""

    type: ClassVar[Literal["text_delta"]] = "text_delta"


class TextEnd(_BlockEnd, tag="text_end"):
    """The text block at ``index`` is complete; ``content`` is its full text."""

    type: ClassVar[Literal["text_end"]] = "text_end"


class ThinkingStart(_BlockStart, tag="thinking_start"):
    """A thinking block opened at ``index``."""

    type: ClassVar[Literal["thinking_start"]] = "thinking_start"


class ThinkingDelta(_BlockDelta, tag="thinking_delta"):
    """Reasoning text appended to the block at ``index``."""

    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"


class ThinkingEnd(_BlockEnd, tag="thinking_end"):
    """The thinking block at ``index`` is complete."""

    type: ClassVar[Literal["thinking_end"]] = "thinking_end"


class ToolCallStart(_BlockStart, tag="toolcall_start"):
    """A tool call opened at ``index`` (id and name known, arguments ``{}``)."""

    type: ClassVar[Literal["toolcall_start"]] = "toolcall_start"


class ToolCallDelta(_BlockDelta, tag="toolcall_delta"):
    """A fragment of the call's JSON arguments (``delta``).

    The partial's call holds a best-effort parse of the text so far in ``args``, refreshed
    at a bounded rate so that a long call streams in linear time: on every fragment while
    the text is shorter than 1024 characters, then each time it has grown by a quarter.
    ``toolcall_end`` holds the exact arguments. To parse at every fragment, join the
    deltas and call :func:`parse_partial_json`.
    """

    type: ClassVar[Literal["toolcall_delta"]] = "toolcall_delta"


class ToolCallEnd(_Event, tag="toolcall_end"):
    """The tool call at ``index`` is complete with its final arguments."""

    type: ClassVar[Literal["toolcall_end"]] = "toolcall_end"

    index: int
    tool_call: ToolCall
    partial: AssistantMessage


class HostedToolBlock(_Event, tag="hosted_tool"):
    """A provider-hosted tool's call or result (``block``), complete, added at ``index``."""

    type: ClassVar[Literal["hosted_tool"]] = "hosted_tool"

    index: int
    block: HostedToolCall | HostedToolResult
    partial: AssistantMessage


class Retry(_Event, tag="retry"):
    """The provider will retry after ``delay`` seconds.

    When ``discard_partial`` is true, content already streamed is void: the next
    :class:`StreamStart` begins a fresh message.
    """

    type: ClassVar[Literal["retry"]] = "retry"

    attempt: int
    max_attempts: int
    delay: float
    error_kind: str
    error_message: str
    discard_partial: bool


class StreamDone(_Event, tag="done"):
    """Terminal: the message completed normally."""

    type: ClassVar[Literal["done"]] = "done"

    reason: StopReason
    message: AssistantMessage


class StreamError(_Event, tag="error"):
    """Terminal: the request failed or was aborted; ``error`` keeps partial content and usage."""

    type: ClassVar[Literal["error"]] = "error"

    reason: Literal["error", "aborted"]
    error: AssistantMessage
    retry_after: float | None = None
    """The delay in seconds the server asked for before a retry (Retry-After), if any."""


StreamEvent: TypeAlias = (
    StreamStart
    | TextStart
    | TextDelta
    | TextEnd
    | ThinkingStart
    | ThinkingDelta
    | ThinkingEnd
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | HostedToolBlock
    | Retry
    | StreamDone
    | StreamError
)


def parse_partial_json(text: str) -> dict[str, Any]:
    """Best-effort parse of streamed JSON object text; never raises.

    ``""`` -> ``{}``; complete JSON -> parsed; ``{"city":"Par`` -> ``{"city": "Par"}``;
    ``{"city":`` -> ``{}``; anything that is not a JSON object -> ``{}``.
    """
    if not text or text.isspace():
        return {}
    try:
        value = jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def parse_tool_arguments(text: str) -> tuple[dict[str, Any], str | None]:
    """Strictly parse complete tool-call arguments.

    Returns ``(arguments, None)`` on success and ``({}, reason)`` when the text is not a
    JSON object. Empty text means no arguments.
    """
    if not text or text.isspace():
        return {}, None
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        # Models sometimes put raw newlines inside strings; accept that one repair.
        try:
            value = jiter.from_json(text.replace("\n", "\\n").encode())
        except ValueError:
            return {}, f"invalid JSON: {exc}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


_Block = TypeVar("_Block", TextContent, ThinkingContent, ToolCall)

_PARSE_EVERY_BELOW = 1024
"""Streamed arguments shorter than this (characters) are parsed again on every fragment;
longer ones each time they have grown by ``1 / _PARSE_GROWTH`` since the last parse, so
the parses of an N-character call cost O(N) in all (a geometric series)."""
_PARSE_GROWTH = 4


class StreamedText:
    """Text that streams in fragments and is parsed now and then as it grows (a tool
    call's JSON arguments; a typed answer): kept as the fragments received, joined only
    when read, so appending is O(1) and the parses of an N-character text cost O(N)."""

    __slots__ = ("next_parse", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.next_parse = 0

    def add(self, delta: str) -> bool:
        """Append ``delta``; whether the text is due for a new parse: on every fragment
        while it is shorter than 1024 characters, then each time it has grown by a quarter."""
        self.parts.append(delta)
        size = self.size + len(delta)
        self.size = size
        if size < self.next_parse:
            return False
        self.next_parse = size + 1 if size < _PARSE_EVERY_BELOW else size + size // _PARSE_GROWTH
        return True

    def text(self) -> str:
        """The text so far (the fragments are joined once and kept joined)."""
        parts = self.parts
        if len(parts) == 1:
            return parts[0]
        joined = "".join(parts)
        parts[:] = [joined]
        return joined


def _wrong_block(index: int, expected: str) -> ServerError:
    """The error for an event aimed at a block of another kind: the provider's stream
    does not hold together (a classified server error, never an assertion)."""
    return ServerError(f"The provider sent a malformed stream: content block {index} is not a {expected} block")


class MessageBuilder:
    """Assembles an :class:`AssistantMessage` and returns the matching stream events.

    Providers call the methods in stream order and yield what they return. Indexes are
    positions in ``message.content``; each ``*_start`` returns its event and the new
    block's index is ``event.index``.
    """

    __slots__ = ("_args", "_open", "_pricing", "message")

    def __init__(
        self,
        *,
        provider: str = "",
        api: str = "",
        model: str = "",
        pricing: Callable[[Usage], None] | None = None,
    ) -> None:
        self.message = AssistantMessage(provider=provider, api=api, model=model)
        self._args: dict[int, StreamedText] = {}
        self._open: dict[int, str] = {}
        self._pricing = pricing

    def reset(self) -> None:
        """Start over with an empty message (after a retry that discards partial output)."""
        m = self.message
        self.message = AssistantMessage(provider=m.provider, api=m.api, model=m.model)
        self._args.clear()
        self._open.clear()

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> StreamStart:
        """The first event of the stream."""
        return StreamStart(partial=self.message)

    def done(self, reason: StopReason | None = None) -> StreamDone:
        """Close open blocks silently and finish. Without ``reason``: ``tool_use`` when
        the message holds tool calls, else ``stop``."""
        self._close_silently()
        m = self.message
        if reason is None:
            reason = "tool_use" if any(type(b) is ToolCall for b in m.content) else "stop"
        m.stop_reason = reason
        return StreamDone(reason=reason, message=m)

    def error(
        self,
        message: str,
        *,
        kind: str | None = None,
        aborted: bool = False,
    ) -> StreamError:
        """Finish with an error (or ``aborted``) message that keeps partial content."""
        self._close_silently()
        m = self.message
        m.stop_reason = "aborted" if aborted else "error"
        m.error_message = message
        m.error_kind = None if aborted else (kind or "unknown")
        return StreamError(reason=m.stop_reason, error=m)

    def aborted(self) -> StreamError:
        """Finish as aborted: the request was aborted (partial content is kept)."""
        return self.error("Request was aborted", aborted=True)

    def _close_silently(self) -> None:
        for index, kind in list(self._open.items()):
            if kind == "tool_call":
                self._finish_tool_call(index, None)
        self._open.clear()

    # -- usage -----------------------------------------------------------------------
    def set_usage(
        self,
        *,
        input: int | None = None,
        output: int | None = None,
        cache_read: int | None = None,
        cache_write: int | None = None,
    ) -> Usage:
        """Overwrite the given usage counts, recompute the total and the cost."""
        u = self.message.usage
        if input is not None:
            u.input = input
        if output is not None:
            u.output = output
        if cache_read is not None:
            u.cache_read = cache_read
        if cache_write is not None:
            u.cache_write = cache_write
        u.total_tokens = u.input + u.output + u.cache_read + u.cache_write
        if self._pricing is not None:
            self._pricing(u)
        return u

    # -- blocks (the per-chunk ``*_delta`` methods check their block inline) -----------
    def _open_block(self, block: TextContent | ThinkingContent | ToolCall, kind: str) -> int:
        """Append ``block`` as an open block of ``kind``; its index."""
        content = self.message.content
        content.append(block)
        index = len(content) - 1
        self._open[index] = kind
        return index

    def _block(self, index: int, cls: type[_Block], expected: str) -> _Block:
        """The block at ``index``, which must be a ``cls`` (else the stream is malformed)."""
        block = self.message.content[index]
        if type(block) is not cls:
            raise _wrong_block(index, expected)
        return block

    def _close_block(self, index: int, cls: type[_Block], expected: str, signature: str | None) -> _Block:
        """Close the ``cls`` block at ``index``, setting its ``signature`` when given."""
        block = self._block(index, cls, expected)
        if signature is not None:
            block.signature = signature
        self._open.pop(index, None)
        return block

    # -- text ------------------------------------------------------------------------
    def text_start(self) -> TextStart:
        """Open a text block."""
        return TextStart(index=self._open_block(TextContent(text=""), "text"), partial=self.message)

    def text_delta(self, delta: str, index: int) -> TextDelta:
        """Append to the text block at ``index``."""
        block = self.message.content[index]
        if type(block) is not TextContent:
            raise _wrong_block(index, "text")
        # Detach the string first so CPython can grow it in place (linear, not quadratic).
        text = block.text
        block.text = ""
        text += delta
        block.text = text
        return TextDelta(index=index, delta=delta, partial=self.message)

    def text_end(self, index: int, *, signature: str | None = None) -> TextEnd:
        """Close the text block at ``index``."""
        block = self._close_block(index, TextContent, "text", signature)
        return TextEnd(index=index, content=block.text, partial=self.message)

    # -- thinking --------------------------------------------------------------------
    def thinking_start(self, *, redacted: bool = False, signature: str | None = None) -> ThinkingStart:
        """Open a thinking block (``redacted`` blocks carry only a signature)."""
        block = ThinkingContent(thinking="", redacted=redacted, signature=signature)
        return ThinkingStart(index=self._open_block(block, "thinking"), partial=self.message)

    def thinking_delta(self, delta: str, index: int) -> ThinkingDelta:
        """Append reasoning text to the block at ``index``."""
        block = self.message.content[index]
        if type(block) is not ThinkingContent:
            raise _wrong_block(index, "thinking")
        text = block.thinking
        block.thinking = ""
        text += delta
        block.thinking = text
        return ThinkingDelta(index=index, delta=delta, partial=self.message)

    def thinking_signature(self, index: int, signature: str) -> None:
        """Append to the opaque signature of the thinking block at ``index``."""
        block = self._block(index, ThinkingContent, "thinking")
        block.signature = (block.signature or "") + signature

    def thinking_end(self, index: int, *, signature: str | None = None) -> ThinkingEnd:
        """Close the thinking block at ``index``."""
        block = self._close_block(index, ThinkingContent, "thinking", signature)
        return ThinkingEnd(index=index, content=block.thinking, partial=self.message)

    # -- provider-hosted tools -------------------------------------------------------
    def hosted(self, block: HostedToolCall | HostedToolResult) -> HostedToolBlock:
        """Add a provider-hosted tool's call or result (complete) to the message."""
        content = self.message.content
        content.append(block)
        return HostedToolBlock(index=len(content) - 1, block=block, partial=self.message)

    # -- tool calls ------------------------------------------------------------------
    def tool_call_start(self, id: str, name: str, *, signature: str | None = None) -> ToolCallStart:
        """Open a tool call; arguments follow as JSON fragments."""
        index = self._open_block(ToolCall(id=id, name=name, args={}, signature=signature), "tool_call")
        return ToolCallStart(index=index, partial=self.message)

    def tool_call_delta(self, delta: str, index: int) -> ToolCallDelta:
        """Append a JSON fragment; the partial's ``args`` follow its best-effort parse at
        a bounded rate (see :class:`ToolCallDelta`)."""
        block = self.message.content[index]
        if type(block) is not ToolCall:
            raise _wrong_block(index, "tool call")
        streamed = self._args.get(index)
        if streamed is None:
            streamed = self._args[index] = StreamedText()
        if streamed.add(delta):
            block.args = parse_partial_json(streamed.text())
        return ToolCallDelta(index=index, delta=delta, partial=self.message)

    def tool_call_end(self, index: int, *, args: dict[str, Any] | None = None) -> ToolCallEnd:
        """Close the call at ``index``; ``args`` given whole replace the streamed JSON."""
        block = self._finish_tool_call(index, args)
        self._open.pop(index, None)
        return ToolCallEnd(index=index, tool_call=block, partial=self.message)

    def set_tool_call_id(self, index: int, id: str) -> None:
        """Set the id of the call at ``index`` (for providers that send it late)."""
        self._block(index, ToolCall, "tool call").id = id

    def _finish_tool_call(self, index: int, args: dict[str, Any] | None) -> ToolCall:
        block = self._block(index, ToolCall, "tool call")
        streamed = self._args.pop(index, None)
        if args is not None:
            block.args = args
            return block
        raw = streamed.text() if streamed is not None else ""  # (none: no fragment came)
        parsed, error = parse_tool_arguments(raw)
        block.args = parsed
        if error is not None:
            block.raw_arguments = raw
            block.parse_error = error
        return block


_E = TypeVar("_E")


def _tool_call_delta(event: object) -> ToolCallDelta | None:
    """The tool-call delta ``event`` is or carries in its ``event`` field, if any."""
    if type(event) is ToolCallDelta:
        return event
    inner = getattr(event, "event", None)
    return inner if type(inner) is ToolCallDelta else None


class ToolCallDeltaJoiner(Generic[_E]):
    """Joins runs of ``toolcall_delta`` events of one tool call into one event, for writers
    that send every event as a line or a frame (``ketch run -o stream-json``, ``ketch
    serve``): arguments streamed a few characters at a time would cost a line each.

    :meth:`feed` takes each event in order (a stream event, or an event that carries one in
    its ``event`` field: the loop's ``message_update``) and returns the events to send now.
    A tool-call delta is held and the next ones of the same call are added to it until the
    held text reaches ``limit`` characters or another event comes; then it goes out as one
    event (the last one held, with the joined ``delta``), before that other event. Joined
    or not, the deltas of a call concatenate to the same text. Before sending anything
    else, take the held delta with :meth:`flush`.
    """

    __slots__ = ("_held", "_index", "_parts", "_size", "limit")

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._held: _E | None = None
        self._index = -1
        self._parts: list[str] = []
        self._size = 0

    def feed(self, event: _E) -> list[_E]:
        """The events to send now that ``event`` came (possibly none)."""
        delta = _tool_call_delta(event)
        if delta is None:
            if self._held is None:
                return [event]
            out = self.flush()
            out.append(event)
            return out
        out = self.flush() if self._held is not None and self._index != delta.index else []
        self._held = event
        self._index = delta.index
        self._parts.append(delta.delta)
        self._size += len(delta.delta)
        if self._size >= self.limit:
            out.extend(self.flush())
        return out

    def flush(self) -> list[_E]:
        """The held delta as one event (an empty list when none is held)."""
        held = self._held
        if held is None:
            return []
        parts = self._parts
        if len(parts) > 1:
            last = _tool_call_delta(held)
            assert last is not None
            joined: Any = msgspec.structs.replace(last, delta="".join(parts))
            held = joined if held is last else msgspec.structs.replace(held, event=joined)  # type: ignore[type-var]
        self._held = None
        self._index = -1
        self._parts = []
        self._size = 0
        return [held]


_BLOCK_EVENTS: frozenset[type] = frozenset(
    {TextStart, TextDelta, TextEnd, ThinkingStart, ThinkingDelta, ThinkingEnd, ToolCallStart, ToolCallDelta, ToolCallEnd}
)

# A message-producing coroutine body: yields events, may raise anything.
Producer = AsyncIterator[StreamEvent]


async def guard_stream(
    producer: Producer,
    builder: MessageBuilder,
    signal: AbortSignal | None = None,
    describe_error: Callable[[BaseException], tuple[str, str]] | None = None,
) -> AsyncIterator[StreamEvent]:
    """Run ``producer`` so that the stream protocol always holds.

    - exactly one terminal event: a producer that stops without one yields an error
      ``"stream ended without a terminal event"``; events after a terminal are dropped;
    - an exception becomes a :class:`StreamError` (``describe_error`` maps it to
      ``(message, kind)``; :class:`ModelError` carries its own kind);
    - aborting ``signal`` interrupts the producer at once and yields an ``aborted``
      error that keeps the partial content;
    - cancellation of the consuming task is never swallowed.
    """
    waiting = AbortWaiter(signal)
    started = False
    step = producer.__anext__
    try:
        while True:
            if signal is not None and signal.aborted:
                await _close(producer)
                if not started:
                    yield builder.start()
                yield builder.aborted()
                return
            waiting.active = True
            try:
                event = await step()
            except StopAsyncIteration:
                if not started:
                    yield builder.start()
                yield builder.error("stream ended without a terminal event", kind="network")
                return
            except asyncio.CancelledError:
                if waiting.caused_cancel():
                    if not started:
                        yield builder.start()
                    yield builder.aborted()
                    return
                raise
            except Exception as exc:
                await _close(producer)
                message, kind = _describe(exc, describe_error)
                if not started:
                    yield builder.start()
                yield builder.error(message, kind=kind)
                return
            finally:
                waiting.active = False
            if started and type(event) in _BLOCK_EVENTS:
                yield event
                continue
            if type(event) is StreamStart:
                if started:
                    continue
                started = True
            elif not started and type(event) is not Retry:
                started = True
                yield builder.start()
            yield event
            if type(event) is StreamDone or type(event) is StreamError:
                return
            if type(event) is Retry and event.discard_partial:
                started = False
    finally:
        waiting.close()
        # The consumer may stop early (aclose): the producer must not keep running.
        await _close(producer)


def _describe(
    exc: BaseException, describe_error: Callable[[BaseException], tuple[str, str]] | None
) -> tuple[str, str]:
    if isinstance(exc, ModelError):
        return exc.message, exc.kind
    if describe_error is not None:
        return describe_error(exc)
    return exception_text(exc), "unknown"


async def _close(producer: Producer) -> None:
    if is_closable(producer):
        try:
            await producer.aclose()
        except Exception:
            pass
