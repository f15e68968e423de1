"""Loop configuration: the model, options, stop controls, and hooks as plain function fields.

Every hook may be a plain function or an ``async def``; the loop awaits the result
when it is awaitable. A hook that raises never escapes the run: model-side hooks turn
into an error assistant message, tool-side hooks into an error tool result.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import Literal
from typing import TypeAlias
from typing import TypedDict

import msgspec

from ..llm._messages import Message
from ..llm._model import Model
from ..llm._model import StreamOptions
from ..llm._model import ThinkingLevel
from ..llm._signal import AbortSignal
from ._guardrails import Guardrail
from ._hooks import AfterToolCallResult
from ._hooks import BeforeToolCallResult
from ._hooks import ContextManager
from ._hooks import MaybeAwaitable
from ._hooks import Middleware
from ._hooks import NextTurn
from ._hooks import StopDecision
from ._hooks import StopInfo
from ._hooks import ToolCallInfo
from ._hooks import TurnInfo
from ._phase import PhaseRef
from ._tool import Deps
from ._tool import ToolResult

if TYPE_CHECKING:
    from ._capability import Capability

ToolExecution: TypeAlias = Literal["parallel", "sequential"]
"""How a batch of tool calls runs: concurrently (calls a tool marks ``sequential`` wait
for the ones before them) or one after another."""

LENGTH_RECOVERY_PROMPT = (
    "Output token limit hit. Resume directly where you stopped: no apology, no recap. "
    "Break the remaining work into smaller pieces."
)


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
