"""The model interface: what a request looks like and what a model must do with it.

A :class:`Model` turns a :class:`Request` plus :class:`StreamOptions` into an async
iterator of :data:`~ketch.llm.StreamEvent`. It never raises for request or
runtime failures: those end the stream with a :class:`~ketch.llm._stream.StreamError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import Protocol
from typing import TypeAlias
from typing import get_args
from typing import runtime_checkable

import msgspec

from ._messages import HOSTED_TOOL_KINDS
from ._messages import AssistantMessage
from ._messages import Message
from ._signal import AbortSignal
from ._stream import StreamDone
from ._stream import StreamError
from ._stream import StreamEvent

if TYPE_CHECKING:
    from ._retry import RetryPolicy

ThinkingLevel: TypeAlias = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
THINKING_LEVELS: tuple[ThinkingLevel, ...] = get_args(ThinkingLevel)
"""Every thinking level, in order of effort (derived from :data:`ThinkingLevel`)."""

DEFAULT_CONTEXT_WINDOW = 128_000
"""The context window (tokens) assumed for a model nothing is known about: the one
default every part of ketch uses (registry entries, unknown models, test doubles)."""

ToolChoiceMode: TypeAlias = Literal["auto", "none", "required"]
"""The tool choices that are not a tool's name."""
TOOL_CHOICE_MODES: tuple[ToolChoiceMode, ...] = get_args(ToolChoiceMode)

ToolChoice: TypeAlias = ToolChoiceMode | str
"""``auto``, ``none``, ``required``, or the name of one tool to force."""


class ToolSpec(msgspec.Struct, kw_only=True, frozen=True):
    """What a model is told about a tool: name, description and JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


class HostedTool(msgspec.Struct, kw_only=True, frozen=True):
    """A tool the provider runs itself, asked for by its provider-neutral ``kind``
    (``web_search``, ``web_fetch``, ``code_execution``, ``file_search``, ``mcp``).

    ``options`` are the provider's own settings of the tool, sent as they are (e.g.
    ``{"max_uses": 3}`` for Anthropic's web search, ``{"vector_store_ids": [...]}`` for
    OpenAI's file search). Each adapter sends the kinds it supports in its own form and
    fails the request with an ``invalid_request`` error naming the kind and the provider
    for the others, unless ``fallback`` names a function tool that stands in for it:
    then that tool is offered instead, and it is withheld where the hosted one is sent.
    """

    kind: str
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    fallback: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in HOSTED_TOOL_KINDS:
            raise ValueError(f"HostedTool kind {self.kind!r} is not known; allowed: {', '.join(HOSTED_TOOL_KINDS)}")


def hosted_kinds(model: object) -> frozenset[str] | None:
    """The :class:`HostedTool` kinds ``model`` runs (its API's: Anthropic Messages, the
    OpenAI Responses API and Gemini run some; other APIs none), or None when ketch cannot
    tell (a model behind a ketch server: its provider decides). A model class of your own
    says what it runs with a ``hosted_kinds`` attribute (a frozenset of kinds)."""
    kinds: Iterable[str] | None = getattr(model, "hosted_kinds", frozenset())
    return None if kinds is None else frozenset(kinds)


class SystemBlock(msgspec.Struct, frozen=True):
    """One block of a :class:`SystemPrompt`: its ``text`` and whether a provider's
    prompt cache should end a cached prefix after it (``cache``)."""

    text: str
    cache: bool = False


class SystemPrompt(str):
    """A system prompt made of blocks, each with its own cache marker.

    It is the blocks' texts joined with blank lines (a ``str``), so it goes wherever a
    system prompt does (``Agent(system_prompt=...)``, ``Conversation.system_prompt``);
    the loop sends the joined text as ``Request.system_prompt`` and the blocks as
    ``Request.system_blocks``. Adapters that can send blocks do: Anthropic sends one
    ``text`` block per block, with ``cache_control`` on those marked ``cache`` (on the
    last block when none is marked; Anthropic allows four cache breakpoints per request,
    the last message's included). OpenAI and Gemini cache prompt prefixes by themselves
    and get the joined text. Put what never changes first, so the cached prefix survives
    changes to later blocks::

        SystemPrompt([SystemBlock(RULES, cache=True), SystemBlock(f"Today is {today}.")])
    """

    __slots__ = ("blocks",)
    blocks: tuple[SystemBlock, ...]

    def __new__(cls, blocks: Sequence[SystemBlock | str]) -> SystemPrompt:
        parts = tuple(b if isinstance(b, SystemBlock) else SystemBlock(b) for b in blocks)
        self = super().__new__(cls, "\n\n".join(b.text for b in parts if b.text))
        self.blocks = parts
        return self

    def __repr__(self) -> str:
        return f"SystemPrompt({list(self.blocks)!r})"


class Request(msgspec.Struct, kw_only=True):
    """Everything a model sees in one request. ``system_blocks``, when set, is the
    system prompt as blocks with cache markers (``system_prompt`` is then their joined
    text, for adapters that send one text); see :meth:`of`."""

    system_prompt: str = ""
    messages: list[Message] = msgspec.field(default_factory=list)
    tools: list[ToolSpec] = msgspec.field(default_factory=list)
    system_blocks: tuple[SystemBlock, ...] | None = None

    @classmethod
    def of(cls, system_prompt: str, messages: list[Message], tools: list[ToolSpec]) -> Request:
        """A request whose ``system_prompt`` may be a :class:`SystemPrompt` (split into
        the plain joined text and ``system_blocks``)."""
        if type(system_prompt) is str:
            return cls(system_prompt=system_prompt, messages=messages, tools=tools)
        blocks = system_prompt.blocks if isinstance(system_prompt, SystemPrompt) else None
        return cls(system_prompt=str(system_prompt), messages=messages, tools=tools, system_blocks=blocks)


class StreamOptions(msgspec.Struct, kw_only=True):
    """Per-request options. Providers ignore what they do not support.

    ``response_format`` is a JSON schema (``{"name": ..., "schema": {...}}``) for
    structured output. ``api_key`` and ``headers`` are never logged or shown in reprs.
    ``extra`` holds provider-specific request fields. ``stop_sequences``: texts that end
    the response (Anthropic, OpenAI Chat and Gemini send them; the Responses API has no
    such field). Only Anthropic says a stop sequence ended the response (the message's
    ``stop_reason`` is then ``stop_sequence``); elsewhere it reads ``stop``.
    ``hosted_tools``: tools the provider runs itself (:class:`HostedTool`); a model
    that runs none refuses them.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    stop_sequences: list[str] | None = None
    thinking: ThinkingLevel = "off"
    tool_choice: ToolChoice | None = None
    response_format: dict[str, Any] | None = None
    api_key: str | None = msgspec.field(default=None)
    headers: Mapping[str, str] | None = None
    signal: AbortSignal | None = None
    session_id: str | None = None
    cache_key: str | None = None
    extra: dict[str, Any] | None = None
    hosted_tools: tuple[HostedTool, ...] | None = None

    def __repr__(self) -> str:
        shown = []
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is None:
                continue
            if name in ("api_key", "headers"):
                value = "***"
            shown.append(f"{name}={value!r}")
        return f"StreamOptions({', '.join(shown)})"


@runtime_checkable
class Model(Protocol):
    """A language model reachable through the stream protocol.

    ``provider`` names who serves it (``openai``, ``anthropic``, ``local`` …), ``api``
    the wire protocol, ``id`` the model id sent to the provider. ``context_window`` is
    the one answer to "how many tokens fit in a request" that the loop, the agent, the
    compactor and the command all read (a registry model's listed window, the local
    model's ``n_ctx``, :data:`DEFAULT_CONTEXT_WINDOW` for a model nothing is known about).
    """

    @property
    def provider(self) -> str: ...

    @property
    def api(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def context_window(self) -> int:
        """The context window in tokens."""
        ...

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one assistant response. Never raises for request or runtime failures."""
        ...


@runtime_checkable
class SettableContextWindow(Protocol):
    """A model whose context window the user may set (every model ketch ships).

    ``set_context_window(n)`` makes :attr:`Model.context_window` answer ``n`` (a user
    setting for a model the registry does not know, or knows wrong);
    ``set_context_window(None)`` restores the model's own answer.
    """

    def set_context_window(self, window: int | None) -> None:
        """Override the context window (None: the model's own again)."""
        ...


@runtime_checkable
class PreparesMessages(Protocol):
    """A model that makes a request's messages valid for its API itself.

    Every model ketch ships does (with :func:`prepare_messages`): it pairs each tool call
    with exactly one result, giving a call without one the error result
    ``"No result provided"``, and cleans messages written by other models. For such a
    model (``prepares_messages`` true) the loop sends the converted transcript as it is,
    so a request is repaired once; for any other model the loop pairs calls and results
    itself (:func:`ketch.loop.repair_messages`), with the same text.
    """

    @property
    def prepares_messages(self) -> bool:
        """True when :meth:`Model.stream` prepares the request's messages itself."""
        ...


@runtime_checkable
class SupportsNativeOutput(Protocol):
    """A model that says whether it honours ``StreamOptions.response_format``.

    ``native_output`` true: the provider's own structured output (a JSON schema the
    answer must follow) works for this model, also alongside tools; typed output
    (``output_type``) then uses it by default. A model without this property, or with
    it false, gets typed output through an output tool instead.
    """

    @property
    def native_output(self) -> bool:
        """True when ``response_format`` is honoured (with or without tools)."""
        ...


@runtime_checkable
class RetriesRequests(Protocol):
    """A model that retries a failed request itself, as its ``retry`` policy says (every
    HTTP model ketch ships; pass ``retry=RetryPolicy(...)`` to :func:`get_model`).

    Whatever retries the whole call elsewhere sets ``retry`` to one attempt: a durable
    agent's worker does, since Temporal retries the activity.
    """

    retry: RetryPolicy


ModelFactory: TypeAlias = Callable[[str], Model]


async def complete(
    model: Model, request: Request, options: StreamOptions | None = None
) -> AssistantMessage:
    """Run :meth:`Model.stream` to the end and return the final message.

    Failures come back as a message with ``stop_reason`` ``error`` or ``aborted``.
    """
    final: AssistantMessage | None = None
    async for event in model.stream(request, options):
        if type(event) is StreamDone:
            final = event.message
        elif type(event) is StreamError:
            final = event.error
    if final is None:
        final = AssistantMessage(
            provider=model.provider,
            api=model.api,
            model=model.id,
            stop_reason="error",
            error_message="stream ended without a terminal event",
            error_kind="network",
        )
    return final
