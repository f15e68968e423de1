"""Provider-neutral messages and content blocks, with an exact JSON codec.

Every type here is a ``msgspec.Struct``: cheap to build on the streaming path and
encoded to JSON without an intermediate dict. Content blocks carry a ``type`` tag and
messages a ``role`` tag, so any list of them round-trips through :func:`messages_to_json` /
:func:`messages_from_json` (or :func:`message_to_dict` / :func:`message_from_dict`) exactly.

Applications add their own UI-only message kinds by subclassing :class:`CustomMessage`
with a tag of their choice; they are registered automatically and round-trip like the
built-in kinds, but the default conversion drops them before a model sees them.

JSON cannot carry a lone surrogate (a string of undecodable bytes that Python keeps as
surrogate escapes, such as a file name that is not UTF-8): :func:`messages_to_json` writes each
one as U+FFFD, as does every JSON encoder of ketch (:func:`scrub_surrogates`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from typing import ClassVar
from typing import Literal
from typing import TypeAlias
from typing import overload

import msgspec

StopReason: TypeAlias = Literal["stop", "stop_sequence", "length", "tool_use", "pause", "error", "aborted"]
"""Why a response ended: ``stop`` (the model finished), ``stop_sequence``, ``length`` (the
output limit), ``tool_use`` (it called tools), ``pause`` (the provider paused a long turn
of its hosted tools, e.g. Anthropic's ``pause_turn``: sending the transcript back as it is
lets the model continue), ``error``, ``aborted``."""


_clock: ContextVar[Callable[[], float] | None] = ContextVar("ketch_clock", default=None)


def _now() -> float:
    clock = _clock.get()
    return time.time() if clock is None else clock()


def monotonic() -> float:
    """Seconds for measuring durations: ``time.monotonic()``, or the clock set by
    :func:`use_clock` in this context."""
    clock = _clock.get()
    return time.monotonic() if clock is None else clock()


@contextmanager
def use_clock(clock: Callable[[], float]) -> Iterator[None]:
    """Within this context (and the tasks it starts), message timestamps and the loop's
    durations read ``clock()`` (seconds since the epoch) instead of the system clocks.

    A seam for deterministic execution: a durable workflow passes its replay-safe clock
    (``ketch.temporal`` does), so re-running the loop rebuilds the same messages.
    """
    token = _clock.set(clock)
    try:
        yield
    finally:
        _clock.reset(token)


class TextContent(msgspec.Struct, tag="text", tag_field="type", kw_only=True, omit_defaults=True):
    """Plain text. ``signature`` is an opaque provider token replayed verbatim."""

    type: ClassVar[Literal["text"]] = "text"

    text: str
    signature: str | None = None


class ThinkingContent(msgspec.Struct, tag="thinking", tag_field="type", kw_only=True, omit_defaults=True):
    """Model reasoning. ``redacted`` blocks carry only the opaque ``signature``."""

    type: ClassVar[Literal["thinking"]] = "thinking"

    thinking: str
    signature: str | None = None
    redacted: bool = False


class ImageContent(msgspec.Struct, tag="image", tag_field="type", kw_only=True, omit_defaults=True):
    """An image given either as base64 ``data`` or as a ``url``."""

    type: ClassVar[Literal["image"]] = "image"

    mime_type: str = "image/png"
    data: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("ImageContent needs exactly one of data (base64) or url")


DOCUMENT_TYPES = ("application/pdf", "text/plain")
"""The ``mime_type`` values a :class:`DocumentContent` may have."""


class DocumentContent(msgspec.Struct, tag="document", tag_field="type", kw_only=True, omit_defaults=True):
    """A document in a user message: a PDF or a plain-text file, as base64 ``data``, with
    an optional file ``name``. Sent natively to the providers that take documents
    (Anthropic, Gemini, OpenAI); a model that does not take them fails the request with
    an ``invalid_request`` error saying so."""

    type: ClassVar[Literal["document"]] = "document"

    data: str
    mime_type: str = "application/pdf"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.mime_type not in DOCUMENT_TYPES:
            raise ValueError(
                f"DocumentContent mime_type {self.mime_type!r} is not supported; allowed: {', '.join(DOCUMENT_TYPES)}"
            )

    @classmethod
    def from_bytes(cls, data: bytes, mime_type: str = "application/pdf", name: str | None = None) -> DocumentContent:
        """A document holding ``data`` (encoded to base64 here)."""
        import base64

        return cls(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type, name=name)


AUDIO_TYPES = ("audio/wav", "audio/mp3", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac")
"""The ``mime_type`` values an :class:`AudioContent` may have."""


class AudioContent(msgspec.Struct, tag="audio", tag_field="type", kw_only=True, omit_defaults=True):
    """A recording in a user message, as base64 ``data``, with an optional file ``name``.
    Sent natively to Gemini (every type) and to OpenAI Chat Completions (``audio/wav``
    and ``audio/mp3``); any other model fails the request with an ``invalid_request``
    error naming the provider and the recording, before anything is sent."""

    type: ClassVar[Literal["audio"]] = "audio"

    data: str
    mime_type: str = "audio/wav"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.mime_type not in AUDIO_TYPES:
            raise ValueError(
                f"AudioContent mime_type {self.mime_type!r} is not supported; allowed: {', '.join(AUDIO_TYPES)}"
            )

    @classmethod
    def from_bytes(cls, data: bytes, mime_type: str = "audio/wav", name: str | None = None) -> AudioContent:
        """A recording holding ``data`` (encoded to base64 here)."""
        import base64

        return cls(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type, name=name)


class ToolCall(msgspec.Struct, tag="tool_call", tag_field="type", kw_only=True, omit_defaults=True):
    """A request from the model to run a tool.

    ``args`` are the call's arguments. When the model sent arguments that are not valid
    JSON, ``args`` is ``{}`` and ``raw_arguments`` / ``parse_error`` keep what was
    received and why it failed.
    """

    type: ClassVar[Literal["tool_call"]] = "tool_call"

    id: str
    name: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    signature: str | None = None
    raw_arguments: str | None = None
    parse_error: str | None = None


HostedToolKind: TypeAlias = Literal["web_search", "web_fetch", "code_execution", "file_search", "mcp"]
"""The kinds of provider-hosted tools (tools the provider runs itself)."""

HOSTED_TOOL_KINDS: tuple[str, ...] = ("web_search", "web_fetch", "code_execution", "file_search", "mcp")
"""Every :data:`HostedToolKind`, in order."""


class Citation(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A source a hosted tool found: its ``url``, ``title`` and a quoted ``text``, if any."""

    url: str
    title: str | None = None
    text: str | None = None


class HostedToolCall(msgspec.Struct, tag="hosted_tool_call", tag_field="type", kw_only=True, omit_defaults=True):
    """A call of a tool the provider ran itself (web search, code execution, ...).

    ``kind`` is the provider-neutral :data:`HostedToolKind`, ``name`` the provider's own
    name for the tool, ``input`` what it was called with. ``native`` is the provider's
    own block, sent back verbatim to the same provider and API; other providers never
    see it (see :mod:`ketch.llm._handoff`). The loop does not run these calls."""

    type: ClassVar[Literal["hosted_tool_call"]] = "hosted_tool_call"

    id: str
    kind: str
    name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    native: Any = None


class HostedToolResult(msgspec.Struct, tag="hosted_tool_result", tag_field="type", kw_only=True, omit_defaults=True):
    """What a provider-hosted tool returned: a readable ``output`` summary, the
    ``citations`` it found, whether it failed, and the provider's own block
    (``native``, sent back verbatim to the same provider and API). A model of another
    provider sees the result as a text block (:func:`hosted_result_text`)."""

    type: ClassVar[Literal["hosted_tool_result"]] = "hosted_tool_result"

    call_id: str
    kind: str
    output: str = ""
    citations: list[Citation] = msgspec.field(default_factory=list)
    is_error: bool = False
    native: Any = None


def hosted_result_text(result: HostedToolResult) -> str:
    """The text a model of another provider sees in place of ``result``."""
    lines = [f"[{result.kind} result{' (error)' if result.is_error else ''}]"]
    if result.output:
        lines.append(result.output)
    for c in result.citations:
        if c.url not in result.output:
            lines.append(f"- {c.title} <{c.url}>" if c.title else f"- <{c.url}>")
    return "\n".join(lines)


ContentBlock: TypeAlias = TextContent | ThinkingContent | ImageContent | ToolCall | HostedToolCall | HostedToolResult
UserContent: TypeAlias = TextContent | ImageContent | DocumentContent | AudioContent
ToolResultContent: TypeAlias = TextContent | ImageContent | DocumentContent
AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall | HostedToolCall | HostedToolResult


class Cost(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Cost in US dollars, per token category."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    total: float = 0.0


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Token counts of one model response. ``input`` excludes cached tokens.

    ``total_tokens`` is always ``input + output + cache_read + cache_write``.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = msgspec.field(default_factory=Cost)

    def add(self, other: Usage) -> None:
        """Add ``other`` into this usage in place (tokens and costs)."""
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.total_tokens += other.total_tokens
        c, o = self.cost, other.cost
        c.input += o.input
        c.output += o.output
        c.cache_read += o.cache_read
        c.cache_write += o.cache_write
        c.total += o.total


class Message(msgspec.Struct, tag_field="role", kw_only=True, omit_defaults=True):
    """Base of every transcript entry. ``role`` is the JSON tag."""

    timestamp: float = msgspec.field(default_factory=_now)

    @property
    def role(self) -> str:
        """The message's role tag (``user``, ``assistant``, ``tool_result`` or a custom tag)."""
        return str(self.__struct_config__.tag)


class UserMessage(Message, tag="user"):
    """Input from the user. A plain string is accepted and becomes one text block."""

    content: list[UserContent] | str

    def __post_init__(self) -> None:
        if isinstance(self.content, str):
            self.content = [TextContent(text=self.content)]


class AssistantMessage(Message, tag="assistant"):
    """A model response, streamed or complete."""

    content: list[AssistantContent] = msgspec.field(default_factory=list)
    provider: str = ""
    api: str = ""
    model: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    error_kind: str | None = None
    response_id: str | None = None

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls in this message, in order."""
        return [b for b in self.content if type(b) is ToolCall]

    @property
    def text(self) -> str:
        """All text blocks joined."""
        return "".join(b.text for b in self.content if type(b) is TextContent)


class ToolResultMessage(Message, tag="tool_result"):
    """The outcome of one tool call. ``details`` is for the application, not the model."""

    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent] = msgspec.field(default_factory=list)
    details: Any = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """All text blocks joined."""
        return "".join(b.text for b in self.content if type(b) is TextContent)


class CustomMessage(Message):
    """Base for application-defined, UI-only messages.

    Subclass it with a tag (``class Note(CustomMessage, tag="note"): text: str``); the
    subclass is registered for JSON decoding. The default conversion to model messages
    uses :meth:`to_llm`, which drops the message unless a subclass overrides it.
    ``resets_usage_anchor`` (a class attribute) says the message replaces the history
    before it, so token accounting does not anchor on usage reported before it.
    """

    resets_usage_anchor: ClassVar[bool] = False

    def to_llm(self) -> Message | list[Message] | None:
        """What the model sees of this message: a message, several, or None (nothing)."""
        return None


_BUILTIN: dict[str, type[Message]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool_result": ToolResultMessage,
}

_encoder = msgspec.json.Encoder()


def message_text(message: Message) -> str:
    """The concatenated text of a message's text blocks ("" for messages without text)."""
    content = getattr(message, "content", None)
    if isinstance(content, list):
        return "".join(b.text for b in content if type(b) is TextContent)
    return ""


def _custom_kind(tag: str) -> type[Message] | None:
    stack: list[type[Message]] = [CustomMessage]
    while stack:
        cls = stack.pop()
        if cls.__struct_config__.tag == tag and cls is not CustomMessage:
            return cls
        stack.extend(cls.__subclasses__())
    return None


def message_to_dict(message: Message) -> dict[str, Any]:
    """A JSON-compatible dict of ``message``, tagged with its role."""
    out: dict[str, Any] = msgspec.to_builtins(message)
    return out


def message_from_dict(data: dict[str, Any]) -> Message:
    """Rebuild a message (built-in or registered custom kind) from :func:`message_to_dict` output."""
    role = data.get("role")
    cls = _BUILTIN.get(role) if isinstance(role, str) else None
    if cls is None and isinstance(role, str):
        cls = _custom_kind(role)
    if cls is None:
        raise ValueError(
            f"Unknown message role {role!r}: register custom kinds by subclassing "
            "ketch.CustomMessage with tag=<role>"
        )
    return msgspec.convert(data, type=cls)


def messages_to_json(messages: Message | list[Message]) -> bytes:
    """Encode one message or a list of messages as JSON bytes (a lone surrogate in a
    string becomes U+FFFD)."""
    return encode_json(messages, _encoder)


def encode_json(value: Any, encoder: msgspec.json.Encoder | None = None) -> bytes:
    """``value`` as JSON bytes by ``encoder`` (default: msgspec's plain one), where a lone
    surrogate in a string (JSON cannot carry one, e.g. from a file name that is not
    UTF-8) becomes U+FFFD instead of failing. The scrubbed retry runs only after the
    encoder refused: the common case costs nothing extra."""
    enc = encoder if encoder is not None else _encoder
    try:
        return enc.encode(value)
    except UnicodeEncodeError:
        pass
    try:
        return enc.encode(scrub_surrogates(value))
    except UnicodeEncodeError:  # in the text the encoder's enc_hook made of some value
        return enc.encode(scrub_surrogates(msgspec.to_builtins(value, enc_hook=enc.enc_hook)))


_SURROGATE = re.compile("[\ud800-\udfff]")


@overload
def scrub_surrogates(value: str) -> str: ...


@overload
def scrub_surrogates(value: Any) -> Any: ...


def scrub_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD,
    so that it can be encoded as JSON. Dicts, lists and tuples are copied (tuples as
    lists), ``msgspec`` structs become their builtin form, other values stay as they are.

    Meant for the rare retry after an encoder refused a value with
    ``UnicodeEncodeError``: the first attempt costs nothing extra."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_surrogates(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return scrub_surrogates(msgspec.to_builtins(value))
    return value


def messages_from_json(data: bytes | str) -> Any:
    """Decode JSON produced by :func:`messages_to_json`: a message or a list of messages."""
    raw = msgspec.json.decode(data)
    if isinstance(raw, list):
        return [message_from_dict(item) for item in raw]
    if isinstance(raw, dict):
        return message_from_dict(raw)
    raise ValueError("Expected a JSON object or array of messages")
