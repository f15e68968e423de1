"""What the loop's hooks are given and return: the conversation, a tool call, a finished
turn, the verdicts of ``before_tool_call``, ``after_tool_call`` and ``on_stop``, what
``prepare_next_turn`` may replace, and the context manager's protocol.

Plain data, below the loop's configuration (:mod:`ketch.loop._config`), its capabilities
and its tool step, which all speak these types.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal
from typing import Protocol
from typing import TypeAlias
from typing import TypeVar

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ..llm._messages import Usage
from ..llm._messages import UserMessage
from ..llm._model import Model
from ..llm._model import ThinkingLevel
from ..llm._signal import AbortSignal
from ..llm._tokens import ContextMeter
from ._repair import LLMView
from ._tool import Tool
from ._tool import ToolResult

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]

@dataclass(slots=True)
class Conversation:
    """What the loop works on: the system prompt, the transcript and the tools.

    ``messages`` is appended to in place as messages commit. Reuse one conversation
    across runs on the same transcript: it keeps the model's view of the history
    (``view``) and the window accounting (``meter``) up to date incrementally.

    ``pending_context``: messages :meth:`add_context` queued for the next request.
    """

    system_prompt: str = ""
    messages: list[Message] = field(default_factory=list)
    tools: Sequence[Tool] = ()
    view: LLMView = field(default_factory=LLMView, repr=False, compare=False)
    meter: ContextMeter = field(default_factory=ContextMeter, repr=False, compare=False)
    pending_context: list[Message] = field(default_factory=list, repr=False, compare=False)

    def add_context(self, context: str | Message) -> None:
        """Add ``context`` to the next request: before the next model call the loop
        commits it to the transcript (a string as a user message), after the messages
        queued for that turn, with ``message_start``/``message_end`` events. For hooks
        (``info.conversation`` of ``before_tool_call``, ``after_tool_call``, ``on_stop``,
        ``stop_when``, ``prepare_next_turn``) that want the model to know something
        without changing a tool result or the system prompt (so prompt caches still hit)."""
        self.pending_context.append(UserMessage(content=context) if isinstance(context, str) else context)


@dataclass(slots=True, frozen=True)
class ToolCallInfo:
    """One tool call as hooks and middlewares see it.

    ``before_tool_call`` gets it with the validated ``args`` about to be executed;
    ``after_tool_call`` gets it (with the arguments the tool ran with) and the result.
    """

    tool_call: ToolCall
    tool: Tool
    args: dict[str, Any]
    assistant_message: AssistantMessage
    conversation: Conversation
    signal: AbortSignal


class BeforeToolCallResult(msgspec.Struct, kw_only=True):
    """``block`` the call (with ``reason``), replace its arguments with ``args``, or ask
    for the user's ``approval`` first.

    Build with :meth:`blocked`, :meth:`with_args` or :meth:`approval_required`. ``stop`` (with ``block``) ends the
    run after this batch, whatever the batch's other calls returned, with ``end_reason ==
    "denied"`` and the block's reason as the run's ``error``; ``note`` is anything
    worth reporting about the decision (a permission decision, say): the loop emits it as
    a ``tool_call_note`` event just before the call's ``tool_execution_end``.
    """

    block: bool = False
    reason: str | None = None
    args: dict[str, Any] | None = None
    stop: bool = False
    note: Any = None
    approval: bool = False

    @classmethod
    def approval_required(cls, reason: str | None = None, *, note: Any = None) -> BeforeToolCallResult:
        """Do not run the call yet: the run pauses with ``end_reason ==
        "approval_required"`` and a :class:`RunState` listing it (with ``reason``), to be
        resumed with a decision. A call resumed with ``approve()`` or ``edit()`` runs
        even if this hook asks again."""
        return cls(approval=True, reason=reason, note=note)

    @classmethod
    def blocked(cls, reason: str | None = None, *, stop: bool = False, note: Any = None) -> BeforeToolCallResult:
        """Do not run the call: its result is an error with ``reason`` (a generic text
        when None). ``stop`` also ends the run after this batch (``end_reason ==
        "denied"``; queued messages are not taken)."""
        return cls(block=True, reason=reason, stop=stop, note=note)

    @classmethod
    def with_args(cls, args: dict[str, Any], *, note: Any = None) -> BeforeToolCallResult:
        """Run the call with ``args`` instead of the model's arguments."""
        return cls(args=args, note=note)


class AfterToolCallResult(msgspec.Struct, kw_only=True):
    """Per-field overrides of a tool result; ``None`` keeps the original field, except
    for ``details``, where leaving it unset keeps the original and ``None`` clears it."""

    content: list[Any] | str | None = None
    details: Any = msgspec.UNSET
    is_error: bool | None = None
    terminate: bool | None = None


@dataclass(slots=True, frozen=True)
class TurnInfo:
    """A finished turn, for ``stop_when`` predicates and ``prepare_next_turn``."""

    turn: int
    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    conversation: Conversation
    new_messages: list[Message]
    usage: Usage


class NextTurn(msgspec.Struct, kw_only=True):
    """Replacements for the next turn; ``None`` keeps the current value.

    ``messages`` replaces the transcript in place (a committed rewrite).
    """

    model: Model | None = None
    thinking: ThinkingLevel | None = None
    tools: Sequence[Tool] | None = None
    system_prompt: str | None = None
    messages: list[Message] | None = None


@dataclass(slots=True, frozen=True)
class StopInfo:
    """The model would end the run (no tool calls, nothing queued)."""

    turn: int
    message: AssistantMessage
    conversation: Conversation


class StopDecision(msgspec.Struct, kw_only=True):
    """The ``on_stop`` verdict: allow the end, continue with an injected message, or escalate.

    Build with :meth:`allow`, :meth:`continue_with` or :meth:`escalate`. A ``continue``
    without a message counts as allow.
    """

    action: Literal["allow", "continue", "escalate"] = "allow"
    message: str | Message | None = None
    reason: str | None = None

    @classmethod
    def allow(cls) -> StopDecision:
        """Let the run end."""
        return cls(action="allow")

    @classmethod
    def continue_with(cls, message: str | Message) -> StopDecision:
        """Keep going: inject ``message`` (a string becomes a user message)."""
        return cls(action="continue", message=message)

    @classmethod
    def escalate(cls, reason: str | None = None) -> StopDecision:
        """End the run as an error (``stop_guard``) with ``reason`` (``"on_stop escalated"``
        when None)."""
        return cls(action="escalate", reason=reason)

    def injected(self) -> Message | None:
        """The message to inject, if this decision continues the run."""
        if self.action != "continue" or self.message is None:
            return None
        return UserMessage(content=self.message) if isinstance(self.message, str) else self.message


@dataclass(slots=True, frozen=True)
class ContextRequest:
    """What a :class:`ContextManager` is asked for.

    ``reason``: ``request`` (before a model call; project or compact if needed),
    ``overflow`` (the provider reported a context overflow; compact and commit), or
    ``manual`` (the user asked to compact, with optional ``instructions``).
    """

    reason: Literal["request", "overflow", "manual"]
    model: Model
    signal: AbortSignal
    system_prompt: str = ""
    instructions: str | None = None


class Projection(msgspec.Struct, kw_only=True):
    """A context manager's answer: the ``messages`` to send, and optionally a committed
    rewrite of the transcript (``commit``) that replaces it in place."""

    messages: list[Message]
    commit: list[Message] | None = None


class ContextManager(Protocol):
    """Keeps requests inside the model's context window.

    ``manage`` is an async generator: it may yield compaction events (passed on to the
    run's consumer) and must end by yielding one :class:`Projection`.
    """

    def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
        """Project, compact or recover ``messages`` for ``request``."""
        ...


Middleware: TypeAlias = Callable[
    [ToolCallInfo, Callable[[dict[str, Any]], Awaitable[ToolResult]]], Awaitable[ToolResult]
]
"""``async def mw(call, next) -> ToolResult``: wraps execution; call ``await next(args)``."""


async def maybe_await(value: Any) -> Any:
    """``value``, awaited when it is awaitable (a hook or a tool callback may be either)."""
    if inspect.isawaitable(value):
        return await value
    return value
