"""The tool step of a turn: what runs the assistant message's tool calls.

:func:`tool_step` picks it: the output tool's answer (typed output's ``tool`` mode:
:class:`~ketch.loop._output.AnswerStep`), a refusal of a batch over the tool-call limit
(:class:`~ketch.loop._limits.Refusal`), one :class:`~ketch.loop._execute.ToolBatch`
(:class:`BatchStep`), nothing (:class:`NoCalls`), or nothing for a call that failed or was
aborted (:class:`Failed`: the run ends). Like a batch, a step is iterated
(:meth:`ToolStep.events`), then asked for its :meth:`ToolStep.result`: the
:class:`~ketch.loop._next.Turn` (its results, counted, for the loop to commit), or the
:class:`~ketch.loop._next.Pause` of a batch waiting for approval.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Protocol

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ._events import AgentEvent
from ._execute import ToolBatch
from ._execute import result_messages
from ._next import NO_EVENTS
from ._next import End
from ._next import Pause
from ._next import Turn
from ._runtime import Run
from ._state import RunState

if TYPE_CHECKING:  # (a Protocol class costs import time; the loop only annotates with it)

    class ToolStep(Protocol):
        def events(self) -> AsyncIterator[AgentEvent]:
            """Run the step, yielding its events."""
            ...

        def result(self) -> Turn | Pause:
            """What the step produced; valid once :meth:`events` is exhausted."""
            ...


def tool_step(
    run: Run, message: AssistantMessage, calls: list[ToolCall], done: list[ToolResultMessage] | None
) -> ToolStep:
    """The step that runs ``calls`` of ``message`` (``done``: for a resumed turn, the
    results of its calls that ran before the pause; None for a new response)."""
    if message.stop_reason == "error" or message.stop_reason == "aborted":
        return Failed(run, message)
    output = run.output
    if calls and done is None and output is not None:
        answer = output.output_call(message)
        if answer is not None:
            from ._output import AnswerStep  # loaded with the run's typed output

            return AnswerStep(output, message, calls, answer)
    if not calls:
        return NoCalls(message)
    if run.cfg.usage_limits is not None:
        from ._limits import refusal  # loaded with a run's usage limits

        refused = refusal(run, message, calls)
        if refused is not None:
            return refused
    if run.phase is not None:
        run.phase._set("tool_executing")
    batch = ToolBatch(run.runner, run.tools, run.conversation, message, calls, run.signal, run.poll_steering)
    return BatchStep(run, batch, done, batch.events)


def resumed_step(run: Run, state: RunState) -> ToolStep:
    """The tool step of a paused turn going on: its calls still to run, after those that ran."""
    message = state.message
    waiting = {p.tool_call_id for p in state.pending}
    return tool_step(run, message, [c for c in message.tool_calls if c.id in waiting], state.completed)


class BatchStep(msgspec.Struct):
    """The calls as one :class:`ToolBatch` (``batch``); a resumed turn's results come with
    those of its calls that ran before the pause (``done``), in call order. ``events`` is
    the batch's own: no further hand-off per event."""

    run: Run
    batch: ToolBatch
    done: list[ToolResultMessage] | None
    events: Callable[[], AsyncIterator[AgentEvent]]

    def result(self) -> Turn | Pause:
        run = self.run
        tools = self.batch
        batch = tools.result()
        run.notes.extend(batch.notes)
        run.add_tool_usage(batch.outcomes)
        results = result_messages(batch.outcomes)
        if self.done:
            order = {c.id: i for i, c in enumerate(tools.message.tool_calls)}
            results = sorted(self.done + results, key=lambda r: order.get(r.tool_call_id, len(order)))
        if batch.pending is not None:
            return run.pause(tools.message, batch.pending, results)
        return Turn(tools.message, tools.calls, run.count_results(results), batch)


class Failed(msgspec.Struct):
    """The call failed or was aborted: no tool runs (an aborted message's complete calls
    get error results) and the run ends with its stop reason."""

    run: Run
    message: AssistantMessage

    def events(self) -> AsyncIterator[AgentEvent]:
        return NO_EVENTS

    def result(self) -> Turn:
        message = self.message
        end = End("error" if message.stop_reason == "error" else "aborted", message.error_message)
        return Turn(message, [], self.run.aborted_results(message), end=end, failed=True)


class NoCalls(msgspec.Struct):
    """A response without tool calls: nothing runs."""

    message: AssistantMessage

    def events(self) -> AsyncIterator[AgentEvent]:
        return NO_EVENTS

    def result(self) -> Turn:
        return Turn(self.message, [], [])
