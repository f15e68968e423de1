"""What comes after a step of the loop (:data:`Next`), and what a turn produced (:class:`Turn`).

Every decision of the loop is a value: :class:`Continue` with the messages to commit
before the next model call, :class:`End` with the run's end reason and error, or
:class:`Pause` with the state of a run waiting for approval. The checks of
:mod:`ketch.loop._controls` and of each feature (usage limits, guardrails, typed output)
return ``Next | None`` (None: no opinion, ask the next check); the skeleton
(:meth:`ketch.loop._run._Run.events`) matches on the answer.

A leaf of the loop (it imports only the messages; the annotations name the hooks' types and
the run state).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import NoReturn
from typing import Protocol
from typing import TypeAlias
from typing import final

import msgspec

from ..llm._messages import Message

if TYPE_CHECKING:
    from ..llm._messages import AssistantMessage
    from ..llm._messages import ToolCall
    from ..llm._messages import ToolResultMessage
    from ._hooks import TurnInfo
    from ._state import RunState


EndReason: TypeAlias = Literal[
    "stop",
    "max_turns",
    "max_budget",
    "aborted",
    "error",
    "stop_guard",
    "approval_required",
    "usage_limit",
    "output_invalid",
    "guardrail",
    "stop_sequence",
    "denied",
]
"""Why a run ended (:attr:`RunSummary.end_reason <ketch.loop.RunSummary.end_reason>`)."""

GuardrailKind: TypeAlias = Literal["input", "output", "tool_call", "tool_result"]
"""Where a guardrail runs."""


class GuardrailTrip(msgspec.Struct, kw_only=True, frozen=True):
    """The guardrail that ended a run (``RunSummary.guardrail``)."""

    name: str
    kind: GuardrailKind
    message: str | None = None
    info: Any = None

    @property
    def text(self) -> str:
        """``Guardrail "<name>" tripped[: <message>]`` (the run's ``error``)."""
        return f'Guardrail "{self.name}" tripped' + (f": {self.message}" if self.message else "")


@final  # (the loop tests `type(x) is Continue`: no subclass may pass for it)
class Continue(msgspec.Struct, frozen=True):
    """Make another model call, after committing ``pending`` (queued or injected messages)."""

    pending: Sequence[Message]


@final  # (the loop tests `type(x) is End`: no subclass may pass for it)
class End(msgspec.Struct, frozen=True):
    """End the run with ``reason`` and ``error``; ``guardrail`` is the guardrail that tripped."""

    reason: EndReason
    error: str | None = None
    guardrail: GuardrailTrip | None = None


@final  # (the loop tests `type(x) is Pause`: no subclass may pass for it)
class Pause(msgspec.Struct, frozen=True):
    """End the run waiting for approval; ``state`` resumes it."""

    state: RunState


Next: TypeAlias = Continue | End | Pause
"""What comes after a step: another call, the end, or a pause for approval."""

GO_ON = Continue(())
"""Another call, with nothing to commit first (the tool calls go on)."""


class BatchFacts(Protocol):
    """What the checks after a turn read of its tool batch (a
    :class:`~ketch.loop._execute.BatchResult`): an abort, the first tool guardrail that
    tripped, the first call denied with ``stop``, the steering taken during the batch,
    and whether the run stops after it."""

    @property
    def aborted(self) -> bool: ...
    @property
    def tripped(self) -> GuardrailTrip | None: ...
    @property
    def denied(self) -> str | None: ...
    @property
    def steering(self) -> Sequence[Message]: ...
    @property
    def stop(self) -> bool: ...


@final  # (the loop tests `type(x) is Turn`: no subclass may pass for it)
class Turn(msgspec.Struct):
    """What one turn produced, for the checks after it.

    ``message``: the turn's assistant message; ``calls``: the calls its tool step was given
    (for a resumed turn, those still to run); ``results``: the committed tool results, in
    call order; ``batch``: what the tool batch reported (None when no batch ran);
    ``end``: the end the tool step decided itself (a refusal over the tool-call limit, the
    output tool's answer, a failed or aborted call); ``answered``: the response called the
    output tool (typed output); ``failed``: the model call failed or was aborted.
    The checks fill ``pending`` (the steering messages polled after the turn) and ``info``
    (the :class:`~ketch.loop.TurnInfo` the hooks share).
    """

    message: AssistantMessage
    calls: list[ToolCall]
    results: list[ToolResultMessage]
    batch: BatchFacts | None = None
    end: End | None = None
    answered: bool = False
    failed: bool = False
    pending: Sequence[Message] = ()
    info: TurnInfo | None = None


class NoEvents:
    """An async iterator of no events (a tool step without events, a call without a stream)."""

    __slots__ = ()

    def __aiter__(self) -> NoEvents:
        return self

    async def __anext__(self) -> NoReturn:
        raise StopAsyncIteration


NO_EVENTS = NoEvents()
