"""Loop configuration: the model, options, stop controls, and hooks as plain function fields.

Every hook may be a plain function or an ``async def``; the loop awaits the result
when it is awaitable. A hook that raises never escapes the run: model-side hooks turn
into an error assistant message, tool-side hooks into an error tool result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import Literal
from typing import Protocol
from typing import TypeAlias
from typing import TypedDict
from typing import TypeVar

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ..llm._messages import Usage
from ..llm._messages import UserMessage
from ..llm._model import Model
from ..llm._model import StreamOptions
from ..llm._model import ThinkingLevel
from ..llm._signal import AbortSignal
from ..llm._tokens import ContextMeter
from ._guardrails import Guardrail
from ._phase import PhaseRef
from ._repair import LLMView
from ._tool import Deps
from ._tool import Tool
from ._tool import ToolResult

if TYPE_CHECKING:
    from ._capability import Capability

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]

ToolExecution: TypeAlias = Literal["parallel", "sequential"]
"""How a batch of tool calls runs: concurrently (calls a tool marks ``sequential`` wait
for the ones before them) or one after another."""

LENGTH_RECOVERY_PROMPT = (
    "Output token limit hit. Resume directly where you stopped: no apology, no recap. "
    "Break the remaining work into smaller pieces."
)


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


class UsageLimits(msgspec.Struct, kw_only=True, frozen=True):
    """Limits on what one run may use, besides ``max_turns`` and ``max_budget_usd``.

    Per run: ``tool_calls``, ``input_tokens``, ``output_tokens`` and ``total_tokens``
    (summed over the run's model calls; their number is ``max_turns``). Per
    request: ``request_input_tokens``, ``request_output_tokens``. None means no limit.

    Checked before each model call where the next request can be predicted (the calls
    made, the tokens used so far plus the transcript's estimated size for the input;
    output limits become the request's ``max_tokens``), before a batch of tool calls
    (one that would pass ``tool_calls`` is not run: each call gets an error result), and
    after each call otherwise (a response that used more than predicted ends the run
    before the next call). A run that reaches a limit ends with ``end_reason ==
    "usage_limit"`` and an ``error`` naming the limit.
    """

    tool_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    request_input_tokens: int | None = None
    request_output_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"UsageLimits.{name} must be a positive integer or None, got {value!r}")


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


@dataclass(slots=True, kw_only=True)
class LoopConfig(Generic[Deps]):
    """How the loop runs. Only ``model`` is required.

    ``deps`` is the application's own object (a database handle, the current user,
    settings), handed to every tool call as ``ToolContext.deps``; ``None`` unless given.
    Type it by parametrising: ``LoopConfig[MyDeps](model=..., deps=MyDeps(...))``.

    Stop controls: ``max_turns`` (model calls per run), ``max_budget_usd`` (run cost),
    ``usage_limits`` (tool calls and tokens: :class:`UsageLimits`),
    ``stop_when`` predicates after each turn's tools (any true ends the run; one that
    raises counts as false and is logged),
    ``on_stop`` consulted when the model would end. Tool execution: parallel by default
    with ``max_tool_concurrency``; ``tool_execution="sequential"`` forces one at a time.
    ``steering_during_tools="interrupt"`` polls steering after each tool finishes and skips
    calls not yet started. ``max_repeated_tool_calls``: a call with the same tool and
    arguments as that many earlier calls of the run is not run; its error result tells
    the model so (None: no limit). ``guardrails``: input, output and tool guardrails
    (:class:`~ketch.loop.Guardrail`; a trip ends the run with ``guardrail``).
    ``phase``: a :class:`~ketch.loop.PhaseRef` the loop keeps up to date (observable
    from other tasks; its owner sets the terminal kind).

    Queues: ``get_steering_messages`` and ``get_follow_up_messages`` hand the loop
    messages to commit. Once the run is aborted they are not called, and the abort is
    checked before each message they returned is committed: a message the run took but
    did not commit (an abort, ``max_turns`` or another stop control ended it first) is
    absent from the run's messages and listed in ``RunResult.uncommitted`` (and
    ``RunStream.uncommitted``); putting it back is up to the caller (the
    :class:`~ketch.Agent` does).

    Typed output: ``output_type`` makes the run end with a validated value of that type
    in ``RunResult.output``, asked for as ``output_mode`` says (``auto``, ``native``,
    ``tool``, ``prompted``); an invalid answer or one an ``output_validators`` function
    rejects goes back to the model at most ``output_retries`` times, then the run ends
    with ``end_reason == "output_invalid"`` (see :mod:`ketch.loop._output`).
    """

    model: Model
    thinking: ThinkingLevel = "off"
    options: StreamOptions = field(default_factory=StreamOptions)

    max_turns: int | None = None
    max_budget_usd: float | None = None
    usage_limits: UsageLimits | None = None
    stop_when: Sequence[Callable[[TurnInfo], MaybeAwaitable[bool]]] = ()
    on_stop: Callable[[StopInfo], MaybeAwaitable[StopDecision | None]] | None = None
    length_recoveries: int = 3
    length_recovery_prompt: str = LENGTH_RECOVERY_PROMPT

    tool_execution: ToolExecution = "parallel"
    max_tool_concurrency: int = 16
    steering_during_tools: Literal["wait", "interrupt"] = "wait"
    max_tool_errors: int | None = None
    max_repeated_tool_calls: int | None = None
    tool_timeout: float | None = None
    tool_abort_grace: float = 5.0

    transform_context: Callable[[list[Message], AbortSignal], MaybeAwaitable[list[Message]]] | None = None
    convert_to_llm: Callable[[list[Message]], MaybeAwaitable[list[Message]]] | None = None
    get_api_key: Callable[[str], MaybeAwaitable[str | None]] | None = None
    get_steering_messages: Callable[[], MaybeAwaitable[list[Message]]] | None = None
    get_follow_up_messages: Callable[[], MaybeAwaitable[list[Message]]] | None = None
    before_tool_call: Callable[[ToolCallInfo], MaybeAwaitable[BeforeToolCallResult | None]] | None = None
    after_tool_call: Callable[[ToolCallInfo, ToolResult], MaybeAwaitable[AfterToolCallResult | None]] | None = None
    middlewares: Sequence[Middleware] = ()
    prepare_next_turn: Callable[[TurnInfo], MaybeAwaitable[NextTurn | None]] | None = None
    context_manager: ContextManager | None = None
    guardrails: Sequence[Guardrail] = ()
    capabilities: Sequence[Capability] = ()
    phase: PhaseRef | None = None
    deps: Deps = None  # type: ignore[assignment]  # None unless given

    output_type: Any = None
    output_mode: Literal["auto", "native", "tool", "prompted"] = "auto"
    output_retries: int = 1
    output_validators: Sequence[Callable[[Any], Any]] = ()


class AgentOptions(TypedDict, Generic[Deps], total=False):
    """The options of an agent: the :class:`LoopConfig` fields an :class:`~ketch.Agent`
    takes as keywords (``Agent(model, max_turns=3, guardrails=[...])``), with the same
    names, types and meanings; a missing key takes LoopConfig's default.

    Not here: ``model`` (the agent's first argument) and the fields the agent itself
    drives for each run (:data:`AGENT_MANAGED`). ``tests/test_agent.py`` keeps
    this in step with LoopConfig: a field of one without the other fails it.
    """

    thinking: ThinkingLevel
    options: StreamOptions

    max_turns: int | None
    max_budget_usd: float | None
    usage_limits: UsageLimits | None
    stop_when: Sequence[Callable[[TurnInfo], MaybeAwaitable[bool]]]
    on_stop: Callable[[StopInfo], MaybeAwaitable[StopDecision | None]] | None
    length_recoveries: int
    length_recovery_prompt: str

    tool_execution: ToolExecution
    max_tool_concurrency: int
    steering_during_tools: Literal["wait", "interrupt"]
    max_tool_errors: int | None
    max_repeated_tool_calls: int | None
    tool_timeout: float | None
    tool_abort_grace: float

    transform_context: Callable[[list[Message], AbortSignal], MaybeAwaitable[list[Message]]] | None
    convert_to_llm: Callable[[list[Message]], MaybeAwaitable[list[Message]]] | None
    get_api_key: Callable[[str], MaybeAwaitable[str | None]] | None
    before_tool_call: Callable[[ToolCallInfo], MaybeAwaitable[BeforeToolCallResult | None]] | None
    after_tool_call: Callable[[ToolCallInfo, ToolResult], MaybeAwaitable[AfterToolCallResult | None]] | None
    middlewares: Sequence[Middleware]
    prepare_next_turn: Callable[[TurnInfo], MaybeAwaitable[NextTurn | None]] | None
    context_manager: ContextManager | None
    guardrails: Sequence[Guardrail]
    capabilities: Sequence[Capability]
    deps: Deps

    output_type: Any
    output_mode: Literal["auto", "native", "tool", "prompted"]
    output_retries: int
    output_validators: Sequence[Callable[[Any], Any]]


AGENT_MANAGED: dict[str, str] = {
    "model": "the agent's first argument",
    "get_steering_messages": "the agent's steering queue (Agent.steer)",
    "get_follow_up_messages": "the agent's follow-up queue (Agent.follow_up)",
    "phase": "the agent keeps its own phase (Agent.phase)",
}
"""The :class:`LoopConfig` fields that are not agent options (:class:`AgentOptions`),
with what the agent gives the loop for them instead."""


def stop_after_tool(*names: str) -> Callable[[TurnInfo], bool]:
    """A ``stop_when`` predicate: stop once any of these tools returned a successful result."""
    wanted = frozenset(names)

    def predicate(turn: TurnInfo) -> bool:
        return any(r.tool_name in wanted and not r.is_error for r in turn.tool_results)

    return predicate
