"""Scripted models for testing agents without a network.

:class:`ScriptedModel` answers from a FIFO of scripted replies; :class:`FunctionModel`
computes each reply from the request. Both stream real deltas through the same
protocol as every provider, honour abort signals, and record every request they get::

    model = ScriptedModel([
        reply(tool_call("add", {"a": 1, "b": 2})),
        "The sum is 3.",
    ])
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections import deque
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from typing import TypeAlias

import msgspec

from .llm import DEFAULT_CONTEXT_WINDOW
from .llm import AssistantMessage
from .llm import HostedToolCall
from .llm import HostedToolResult
from .llm import Message
from .llm import MessageBuilder
from .llm import Request
from .llm import StopReason
from .llm import StreamEvent
from .llm import StreamOptions
from .llm import TextContent
from .llm import ThinkingContent
from .llm import ToolCall
from .llm import ToolSpec
from .llm import Usage
from .llm import encode_json
from .llm import guard_stream

__all__ = [
    "FunctionModel",
    "Reply",
    "ScriptedModel",
    "ScriptedRequest",
    "error_reply",
    "reply",
    "thinking",
    "tool_call",
]

_ids = itertools.count(1)


class Reply(msgspec.Struct, kw_only=True):
    """One scripted model response.

    ``blocks`` are streamed in order (text and thinking in ``chunk_size`` character
    deltas, tool-call arguments as JSON fragments). ``error`` ends the stream with an
    error of ``error_kind`` after the blocks. ``delay`` sleeps before each chunk;
    ``hang`` blocks after the last chunk until the request is aborted or cancelled.
    ``usage`` defaults to an estimate of about four characters per token. A provider-hosted
    tool's call or result (:class:`~ketch.llm.HostedToolCall`,
    :class:`~ketch.llm.HostedToolResult`) streams whole, as a ``hosted_tool`` event.
    """

    blocks: list[TextContent | ThinkingContent | ToolCall | HostedToolCall | HostedToolResult] = msgspec.field(
        default_factory=list
    )
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    error: str | None = None
    error_kind: str = "server"
    delay: float = 0.0
    hang: bool = False
    chunk_size: int = 8


Scripted: TypeAlias = "str | Reply | AssistantMessage"


def tool_call(name: str, args: dict[str, Any] | None = None, *, id: str | None = None, raw: str | None = None) -> ToolCall:
    """A scripted tool call. ``raw`` sends these exact argument characters instead of
    encoding ``args`` (to script malformed JSON)."""
    call = ToolCall(id=id or f"call_{next(_ids)}", name=name, args=args or {})
    if raw is not None:
        call.raw_arguments = raw
    return call


def thinking(text: str, *, signature: str | None = None) -> ThinkingContent:
    """A scripted thinking block."""
    return ThinkingContent(thinking=text, signature=signature)


def reply(
    *blocks: str | TextContent | ThinkingContent | ToolCall | HostedToolCall | HostedToolResult,
    stop_reason: StopReason | None = None,
    usage: Usage | None = None,
    delay: float = 0.0,
    hang: bool = False,
    chunk_size: int = 8,
) -> Reply:
    """A scripted reply made of blocks; strings become text blocks."""
    parts = [TextContent(text=b) if isinstance(b, str) else b for b in blocks]
    return Reply(
        blocks=parts, stop_reason=stop_reason, usage=usage, delay=delay, hang=hang, chunk_size=chunk_size
    )


def error_reply(
    message: str, *blocks: str | TextContent | ThinkingContent | ToolCall, kind: str = "server"
) -> Reply:
    """A reply that fails with ``message`` (of error ``kind``) after streaming ``blocks``."""
    r = reply(*blocks)
    r.error = message
    r.error_kind = kind
    return r


class ScriptedRequest(msgspec.Struct, kw_only=True):
    """A request as a scripted model received it (messages copied at request time)."""

    system_prompt: str
    messages: list[Message]
    tools: list[ToolSpec]
    options: StreamOptions

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered in this request."""
        return [t.name for t in self.tools]


def _arguments_json(arguments: dict[str, Any]) -> bytes:
    """Tool-call arguments as a provider sends them: JSON, a lone surrogate as U+FFFD."""
    return encode_json(arguments)


def _estimate_usage(request: Request, blocks: Iterable[Any]) -> Usage:
    in_chars = len(request.system_prompt)
    for m in request.messages:
        for b in getattr(m, "content", ()):
            in_chars += len(getattr(b, "text", "") or getattr(b, "thinking", ""))
    out_chars = 0
    for b in blocks:
        if isinstance(b, TextContent):
            out_chars += len(b.text)
        elif isinstance(b, ThinkingContent):
            out_chars += len(b.thinking)
        elif isinstance(b, ToolCall):
            out_chars += len(b.name) + len(_arguments_json(b.args))
    inp, out = (in_chars + 3) // 4, (out_chars + 3) // 4
    return Usage(input=inp, output=out, total_tokens=inp + out)


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or []


async def _play(script: Reply, builder: MessageBuilder, request: Request) -> AsyncIterator[StreamEvent]:
    async def pause() -> None:
        if script.delay > 0:
            await asyncio.sleep(script.delay)

    yield builder.start()
    for block in script.blocks:
        if isinstance(block, (HostedToolCall, HostedToolResult)):
            await pause()
            yield builder.hosted(msgspec.structs.replace(block))
        elif isinstance(block, TextContent):
            ev = builder.text_start()
            yield ev
            for piece in _chunks(block.text, script.chunk_size):
                await pause()
                yield builder.text_delta(piece, ev.index)
            yield builder.text_end(ev.index, signature=block.signature)
        elif isinstance(block, ThinkingContent):
            th = builder.thinking_start(redacted=block.redacted)
            yield th
            for piece in _chunks(block.thinking, script.chunk_size):
                await pause()
                yield builder.thinking_delta(piece, th.index)
            yield builder.thinking_end(th.index, signature=block.signature)
        else:
            tc = builder.tool_call_start(block.id, block.name, signature=block.signature)
            yield tc
            raw = block.raw_arguments
            if raw is None:
                raw = _arguments_json(block.args).decode() if block.args else ""
            for piece in _chunks(raw, script.chunk_size):
                await pause()
                yield builder.tool_call_delta(piece, tc.index)
            yield builder.tool_call_end(tc.index)
    usage = script.usage or _estimate_usage(request, script.blocks)
    builder.set_usage(
        input=usage.input, output=usage.output, cache_read=usage.cache_read, cache_write=usage.cache_write
    )
    if script.usage is not None and script.usage.cost.total:
        builder.message.usage.cost = msgspec.structs.replace(script.usage.cost)
    if script.hang:
        await asyncio.Event().wait()
    if script.error is not None:
        yield builder.error(script.error, kind=script.error_kind)
    else:
        yield builder.done(script.stop_reason)


def _as_reply(item: Scripted) -> Reply:
    if isinstance(item, str):
        return reply(item)
    if isinstance(item, AssistantMessage):
        blocks = list(item.content)
        r = Reply(blocks=blocks, stop_reason=item.stop_reason, usage=item.usage)
        if item.stop_reason in ("error", "aborted"):
            r.error = item.error_message or "error"
            r.error_kind = item.error_kind or "server"
            r.stop_reason = None
        return r
    return item


class _RecordingModel:
    """Shared parts of the scripted models: identity, request log, streaming."""

    def __init__(self, *, provider: str, api: str, id: str, context_window: int = DEFAULT_CONTEXT_WINDOW) -> None:
        self._provider = provider
        self._api = api
        self._id = id
        self._window = context_window
        self._window_override: int | None = None
        self.requests: list[ScriptedRequest] = []

    @property
    def provider(self) -> str:
        """Provider name reported on messages."""
        return self._provider

    @property
    def api(self) -> str:
        """API name reported on messages."""
        return self._api

    @property
    def id(self) -> str:
        """Model id reported on messages."""
        return self._id

    @property
    def context_window(self) -> int:
        """The context window in tokens (``context_window=`` given, else the default)."""
        return self._window_override or self._window

    def set_context_window(self, window: int | None) -> None:
        """Override :attr:`context_window` (None: the constructor's again)."""
        self._window_override = window

    def _record(self, request: Request, options: StreamOptions) -> None:
        self.requests.append(
            ScriptedRequest(
                system_prompt=request.system_prompt,
                messages=list(request.messages),
                tools=list(request.tools),
                options=options,
            )
        )

    def _builder(self) -> MessageBuilder:
        return MessageBuilder(provider=self._provider, api=self._api, model=self._id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self._id!r}, requests={len(self.requests)})"


class ScriptedModel(_RecordingModel):
    """A model that answers from a FIFO of scripted replies.

    Items are strings (a text reply), :class:`Reply` objects, or whole
    :class:`AssistantMessage` values. When the script runs out, the stream ends with the
    error ``"no more scripted responses"``.
    """

    def __init__(
        self,
        replies: Iterable[Scripted] = (),
        *,
        provider: str = "scripted",
        api: str = "scripted",
        id: str = "scripted-model",
        context_window: int = DEFAULT_CONTEXT_WINDOW,
    ) -> None:
        super().__init__(provider=provider, api=api, id=id, context_window=context_window)
        self._queue: deque[Reply] = deque(_as_reply(r) for r in replies)

    def add(self, *replies: Scripted) -> None:
        """Append replies to the script."""
        self._queue.extend(_as_reply(r) for r in replies)

    @property
    def remaining(self) -> int:
        """How many scripted replies are still queued."""
        return len(self._queue)

    def assert_complete(self) -> None:
        """Fail if any scripted reply was never requested."""
        if self._queue:
            raise AssertionError(f"{len(self._queue)} scripted response(s) were never requested")

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream the next scripted reply."""
        options = options or StreamOptions()
        self._record(request, options)
        builder = self._builder()
        script = self._queue.popleft() if self._queue else None
        return guard_stream(self._produce(script, builder, request), builder, options.signal)

    async def _produce(
        self, script: Reply | None, builder: MessageBuilder, request: Request
    ) -> AsyncIterator[StreamEvent]:
        if script is None:
            yield builder.start()
            yield builder.error("no more scripted responses", kind="invalid_request")
            return
        async for ev in _play(script, builder, request):
            yield ev


Responder: TypeAlias = Callable[[Request, StreamOptions], "Scripted | Awaitable[Scripted]"]


class FunctionModel(_RecordingModel):
    """A model whose reply is computed by ``fn(request, options)``, sync or async.

    ``fn`` returns a string, a :class:`Reply` or an :class:`AssistantMessage`; an
    exception it raises becomes an error reply.
    """

    def __init__(
        self,
        fn: Responder,
        *,
        provider: str = "function",
        api: str = "function",
        id: str = "function-model",
        context_window: int = DEFAULT_CONTEXT_WINDOW,
    ) -> None:
        super().__init__(provider=provider, api=api, id=id, context_window=context_window)
        self._fn = fn

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream the reply computed for this request."""
        options = options or StreamOptions()
        self._record(request, options)
        builder = self._builder()
        return guard_stream(self._produce(request, options, builder), builder, options.signal)

    async def _produce(
        self, request: Request, options: StreamOptions, builder: MessageBuilder
    ) -> AsyncIterator[StreamEvent]:
        result = self._fn(request, options)
        if inspect.isawaitable(result):
            result = await result
        async for ev in _play(_as_reply(result), builder, request):
            yield ev
