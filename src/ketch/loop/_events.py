"""Loop events: a tagged union on ``type``, plus the run summary and result.

Canonical orders (u = user, a = assistant, tr = tool result)::

    text only:  agent_start, turn_start, message_start(u), message_end(u),
                message_start(a), message_update*, message_end(a), turn_end, agent_end
    tool turn:  … message_end(a), tool_execution_start(c1), tool_execution_start(c2),
                tool_execution_update*, tool_execution_end (completion order),
                message_start/end(tr1), message_start/end(tr2) (call order), turn_end,
                turn_start, message_start(a2) …
    continue:   no user events.
    paused:     … message_end(a), tool_execution_start(c1), approval_required(c1) (the
                calls not started yet get no event), agent_end (end reason
                "approval_required"; no turn_end: the turn goes on when the run resumes).
    resumed:    agent_start, turn_start (the paused turn's number), the remaining calls'
                tool events, message_start/end(tr) for every call of the turn (call
                order), turn_end, …
    aborted:    … message_end(a, stop_reason "aborted"), message_start/end(tr) closing
                each complete call of that message (call order), turn_end, agent_end.

``retry`` is the model stream's own retry event (:class:`ketch.llm.Retry`),
passed on as it is; the loop emits one of its own before compacting away a context
overflow (``error_kind="context_overflow"``).
"""

from __future__ import annotations

from typing import Any
from typing import ClassVar
from typing import Literal
from typing import TypeAlias
from typing import TypeVar

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolResultMessage
from ..llm._messages import Usage
from ..llm._stream import Retry as Retry
from ..llm._stream import StreamEvent
from ..llm._tokens import ContextUsage
from ._next import EndReason as EndReason
from ._next import GuardrailTrip
from ._state import RunState
from ._tool import ToolResult

T = TypeVar("T")



class RunSummary(msgspec.Struct, kw_only=True):
    """How a run went: turns (model calls), tool calls and errors, usage, and why it ended.

    ``usage`` includes what tools spent on models (:attr:`ToolResult.usage
    <ketch.loop.ToolResult.usage>`, e.g. subagents), itemised in ``tool_usage`` by who
    spent it (summed when the same key comes back).

    ``guardrail`` is the guardrail that ended the run (``end_reason == "guardrail"``).
    """

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    usage: Usage = msgspec.field(default_factory=Usage)
    end_reason: EndReason = "stop"
    error: str | None = None
    duration: float = 0.0
    tool_usage: dict[str, Usage] = msgspec.field(default_factory=dict)
    guardrail: GuardrailTrip | None = None

    @property
    def cost(self) -> float:
        """Total cost of the run in US dollars."""
        return self.usage.cost.total


class RunError(Exception):
    """Raised by :meth:`RunResult.raise_for_error` for runs that did not end normally."""

    def __init__(self, message: str, summary: RunSummary) -> None:
        super().__init__(message)
        self.summary = summary
        self.end_reason = summary.end_reason


_ENDED: dict[str, str] = {
    "max_turns": "the run stopped at its max_turns limit",
    "max_budget": "the run stopped at its max_budget_usd limit",
    "aborted": "the run was aborted",
    "approval_required": "the run paused: a tool call waits for approval (resume it with a decision)",
}


class RunResult(msgspec.Struct, kw_only=True):
    """What a run produced: its new messages and its summary; ``tool_call_notes`` are the
    run's ``tool_call_note`` events (what ``before_tool_call`` reported about each call,
    e.g. the permission engine's decisions), in order.

    ``uncommitted`` are the queued messages the run took (from ``get_steering_messages``
    and ``get_follow_up_messages``) but did not commit, because an abort or a stop
    control ended it first, in the order taken: putting them back is up to the caller.

    ``state`` is set when the run paused for approval (``end_reason ==
    "approval_required"``): resume it with :meth:`ketch.Agent.resume` or
    :func:`ketch.loop.resume_loop`.

    ``output`` is the validated value of the run's ``output_type`` (typed output), None
    without one or when the run did not end with an accepted answer.

    :attr:`error` says why a run did not end normally (None when it did).
    """

    messages: list[Message]
    summary: RunSummary
    tool_call_notes: list[ToolCallNote] = msgspec.field(default_factory=list)
    uncommitted: list[Message] = msgspec.field(default_factory=list)
    state: RunState | None = None
    output: Any = None

    @property
    def end_reason(self) -> EndReason:
        """Why the run ended."""
        return self.summary.end_reason

    @property
    def usage(self) -> Usage:
        """Token usage summed over the run's model calls."""
        return self.summary.usage

    @property
    def cost(self) -> float:
        """Total cost of the run in US dollars."""
        return self.summary.usage.cost.total

    @property
    def error(self) -> str | None:
        """Why the run did not end normally, in one line; None when it did (``end_reason``
        ``stop`` or ``stop_sequence``). It is the failure's message (``No API key for
        provider 'openai': pass api_key or set OPENAI_API_KEY``, a model or network
        error, a denial) or what ended the run (a limit, an abort, a pause for approval).
        ``print(result.error or result.text)`` shows either the answer or why there is none."""
        s = self.summary
        if s.end_reason == "stop" or s.end_reason == "stop_sequence":
            return None
        return s.error or _ENDED.get(s.end_reason, f"the run ended with {s.end_reason}")

    @property
    def last_assistant(self) -> AssistantMessage | None:
        """The run's last assistant message, if any."""
        for m in reversed(self.messages):
            if type(m) is AssistantMessage:
                return m
        return None

    @property
    def text(self) -> str:
        """The text of the last assistant message ("" if none)."""
        m = self.last_assistant
        return m.text if m is not None else ""

    def parse(self, type_: type[T]) -> T:
        """The final text parsed and validated as ``type_`` (dataclass, TypedDict, msgspec
        Struct or pydantic model); raises ``StructuredOutputError`` naming what is wrong."""
        from ..llm._structured import parse_structured

        return parse_structured(self.text, type_)

    def raise_for_error(self) -> RunResult:
        """Raise :class:`RunError` unless the run ended with ``stop`` or
        ``stop_sequence``; return self otherwise."""
        s = self.summary
        if s.end_reason != "stop" and s.end_reason != "stop_sequence":
            detail = f": {s.error}" if s.error else ""
            raise RunError(f"Run ended with {s.end_reason}{detail}", s)
        return self


class _Event(msgspec.Struct, tag_field="type", kw_only=True):
    pass


class AgentStart(_Event, tag="agent_start"):
    """The run started."""

    type: ClassVar[Literal["agent_start"]] = "agent_start"


class AgentEnd(_Event, tag="agent_end"):
    """The run ended. Always the last event of a run. ``state`` is set when the run
    paused for approval (``summary.end_reason == "approval_required"``)."""

    type: ClassVar[Literal["agent_end"]] = "agent_end"
    messages: list[Message]
    summary: RunSummary
    state: RunState | None = None


class TurnStart(_Event, tag="turn_start"):
    """A turn (one model call and its tools) begins. ``turn`` counts from 1."""

    type: ClassVar[Literal["turn_start"]] = "turn_start"
    turn: int


class TurnEnd(_Event, tag="turn_end"):
    """A turn ended with its assistant message and tool results (in call order).

    ``context`` is how full the model's context window now is.
    """

    type: ClassVar[Literal["turn_end"]] = "turn_end"
    turn: int
    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    context: ContextUsage | None = None


class MessageStart(_Event, tag="message_start"):
    """A message begins (user, tool result, custom, or a streaming assistant message)."""

    type: ClassVar[Literal["message_start"]] = "message_start"
    message: Message


class MessageUpdate(_Event, tag="message_update"):
    """The streaming assistant message changed; ``event`` is the underlying stream event."""

    type: ClassVar[Literal["message_update"]] = "message_update"
    message: AssistantMessage
    event: StreamEvent


class MessageEnd(_Event, tag="message_end"):
    """A message is complete and committed to the transcript."""

    type: ClassVar[Literal["message_end"]] = "message_end"
    message: Message


class _ToolEvent(_Event):
    """The fields every tool call's event has: the call's id and its tool's name."""

    tool_call_id: str
    tool_name: str


class _ToolArgsEvent(_ToolEvent):
    """A tool call's event that carries the arguments the model sent."""

    args: dict[str, Any]


class ToolExecutionStart(_ToolArgsEvent, tag="tool_execution_start"):
    """A tool call starts, with the arguments the model sent."""

    type: ClassVar[Literal["tool_execution_start"]] = "tool_execution_start"


class ToolExecutionUpdate(_ToolArgsEvent, tag="tool_execution_update"):
    """A running tool reported progress or a partial result."""

    type: ClassVar[Literal["tool_execution_update"]] = "tool_execution_update"
    partial: Any


class ToolExecutionEnd(_ToolEvent, tag="tool_execution_end"):
    """A tool call finished; ``duration`` is in seconds."""

    type: ClassVar[Literal["tool_execution_end"]] = "tool_execution_end"
    result: ToolResult
    is_error: bool
    duration: float


class ToolCallNote(_ToolEvent, tag="tool_call_note"):
    """What ``before_tool_call`` reported about a call (``BeforeToolCallResult.note``, e.g.
    a permission decision); comes just before the call's ``tool_execution_end``."""

    type: ClassVar[Literal["tool_call_note"]] = "tool_call_note"
    note: Any


class ApprovalRequired(_ToolArgsEvent, tag="approval_required"):
    """A call needs approval before it runs: the run will pause at the end of this batch
    (the call had a ``tool_execution_start``; this takes the place of its end)."""

    type: ClassVar[Literal["approval_required"]] = "approval_required"
    reason: str | None = None


class _CompactionEvent(_Event):
    """The fields of both compaction events: why it ran and the context's size before."""

    reason: str
    tokens_before: int


class CompactionStart(_CompactionEvent, tag="compaction_start"):
    """A summary compaction begins (``reason``: ``threshold``, ``overflow`` or ``manual``)."""

    type: ClassVar[Literal["compaction_start"]] = "compaction_start"


class CompactionEnd(_CompactionEvent, tag="compaction_end"):
    """A summary compaction ended; ``error`` is set when it failed (nothing was committed).

    ``usage`` is the summary call's (its cost also in ``cost``); both count towards the
    run's usage and budget.
    """

    type: ClassVar[Literal["compaction_end"]] = "compaction_end"
    tokens_after: int
    messages_summarized: int
    cost: float
    error: str | None = None
    usage: Usage = msgspec.field(default_factory=Usage)


AgentEvent: TypeAlias = (
    AgentStart
    | AgentEnd
    | TurnStart
    | TurnEnd
    | MessageStart
    | MessageUpdate
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionUpdate
    | ToolExecutionEnd
    | ToolCallNote
    | ApprovalRequired
    | Retry
    | CompactionStart
    | CompactionEnd
)
