"""The run's limits: ``max_turns``, ``max_budget_usd`` and :class:`~ketch.loop.UsageLimits`.

Checked before each model call (:class:`Maximum`, :class:`UsageLimit`; before the first call also with the prompts about to be committed),
in each request (the output limits become its ``max_tokens``: :func:`max_tokens`), and
before a batch of tool calls (:func:`refusal`: a batch that would pass ``tool_calls`` is
not run). Each check returns the run's :class:`~ketch.loop._next.End`, or None.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import Literal

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolCall
from ..llm._model import StreamOptions
from ..llm._tokens import estimate_message_tokens
from ._config import UsageLimits
from ._events import AgentEvent
from ._events import ToolExecutionEnd
from ._events import ToolExecutionStart
from ._execute import CallOutcome
from ._execute import result_messages
from ._next import End
from ._next import Next
from ._next import Turn
from ._runtime import Run
from ._tool import ToolResult


def tool_limit_text(limit: int, used: int, asked: int) -> str:
    """The result text of calls not run because they would pass the tool-call limit."""
    return (
        f"Usage limit: {asked} tool call(s) not run; {used} of the run's {limit} allowed tool calls "
        "(tool_calls) were used already"
    )


class Maximum:
    """``max_turns`` (the run's model calls) or ``max_budget_usd`` (its cost): no model
    call once the run used that much."""

    __slots__ = ("limit", "reason", "summary")

    def __init__(self, run: Run, reason: Literal["max_turns", "max_budget"], limit: float) -> None:
        self.summary = run.summary
        self.reason: Literal["max_turns", "max_budget"] = reason
        self.limit = limit

    def __call__(self) -> End | None:
        summary = self.summary
        used = summary.turns if self.reason == "max_turns" else summary.usage.cost.total
        return End(self.reason) if used >= self.limit else None


class UsageLimit:
    """``usage_limits``: no model call that would pass one (what can be predicted of it)."""

    __slots__ = ("limits", "run")

    def __init__(self, run: Run, limits: UsageLimits) -> None:
        self.run = run
        self.limits = limits

    def __call__(self) -> End | None:
        reached = self.reached(())
        return None if reached is None else End("usage_limit", reached)

    async def first(self, prompts: list[Message]) -> End | None:
        """Before the first call, with the ``prompts`` about to be committed (nothing is sent when one is reached)."""
        reached = self.reached(prompts)
        return None if reached is None else End("usage_limit", reached)

    def reached(self, prompts: Sequence[Message]) -> str | None:
        """The usage limit the next model call would pass (its message), or None.
        ``prompts`` are messages about to be committed before it."""
        limits = self.limits
        summary = self.run.summary
        used = summary.usage
        if limits.output_tokens is not None and used.output >= limits.output_tokens:
            return (
                f"Usage limit reached: {used.output:,} output tokens, the limit (output_tokens) is "
                f"{limits.output_tokens:,}"
            )
        if limits.total_tokens is None and limits.input_tokens is None and limits.request_input_tokens is None:
            return None
        conversation = self.run.conversation
        predicted = conversation.meter.measure(conversation.messages, self.run.model.context_window).tokens
        predicted += sum(estimate_message_tokens(m) for m in prompts)
        if limits.request_input_tokens is not None and predicted > limits.request_input_tokens:
            return (
                f"Usage limit: the next request would send about {predicted:,} input tokens, the limit "
                f"(request_input_tokens) is {limits.request_input_tokens:,}"
            )
        if limits.input_tokens is not None and used.input + predicted > limits.input_tokens:
            return (
                f"Usage limit: {used.input:,} input tokens used and about {predicted:,} more in the next "
                f"request, the limit (input_tokens) is {limits.input_tokens:,}"
            )
        if limits.total_tokens is not None and used.total_tokens + predicted > limits.total_tokens:
            return (
                f"Usage limit: {used.total_tokens:,} tokens used and about {predicted:,} more in the next "
                f"request, the limit (total_tokens) is {limits.total_tokens:,}"
            )
        return None


def limit_checks(
    run: Run,
) -> tuple[list[Callable[[list[Message]], Awaitable[Next | None]]], list[Callable[[], End | None]]]:
    """The run's checks of its limits: before the first call (with the prompts), and
    before each other call."""
    cfg = run.cfg
    before_call: list[Callable[[], End | None]] = []
    if cfg.max_turns is not None:
        before_call.append(Maximum(run, "max_turns", cfg.max_turns))
    if cfg.max_budget_usd is not None:
        before_call.append(Maximum(run, "max_budget", cfg.max_budget_usd))
    if cfg.usage_limits is None:
        return [], before_call
    limit = UsageLimit(run, cfg.usage_limits)
    return [limit.first], [*before_call, limit]


def max_tokens(run: Run, options: StreamOptions) -> int | None:
    """The request's ``max_tokens`` under the output limits."""
    limits = run.cfg.usage_limits
    cap = options.max_tokens
    if limits is None:
        return cap
    for limit in (
        limits.request_output_tokens,
        None if limits.output_tokens is None else limits.output_tokens - run.summary.usage.output,
    ):
        if limit is not None:
            cap = limit if cap is None else min(cap, limit)
    return cap


def refusal(run: Run, message: AssistantMessage, calls: list[ToolCall]) -> Refusal | None:
    """The tool step of a batch that would pass ``UsageLimits.tool_calls``, or None."""
    limits = run.cfg.usage_limits
    if limits is None or limits.tool_calls is None or run.summary.tool_calls + len(calls) <= limits.tool_calls:
        return None
    text = tool_limit_text(limits.tool_calls, run.summary.tool_calls, len(calls))
    return Refusal(run, message, calls, text, [CallOutcome(c, ToolResult.error(text), 0.0, False) for c in calls])


class Refusal(msgspec.Struct):
    """A batch not run because it would pass the tool-call limit: each call gets an error
    result (``outcomes``, with its ``tool_execution_start`` and ``_end``), and the run ends."""

    run: Run
    message: AssistantMessage
    calls: list[ToolCall]
    text: str
    outcomes: list[CallOutcome]

    async def events(self) -> AsyncGenerator[AgentEvent, None]:
        for outcome in self.outcomes:
            call = outcome.call
            yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
            yield ToolExecutionEnd(
                tool_call_id=call.id, tool_name=call.name, result=outcome.result, is_error=True, duration=0.0
            )

    def result(self) -> Turn:
        results = self.run.count_results(result_messages(self.outcomes))
        return Turn(self.message, self.calls, results, end=End("usage_limit", self.text))
