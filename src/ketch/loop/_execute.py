"""Tool execution: the per-call pipeline and the batch scheduler.

Per call: unknown tool -> circuit breaker -> malformed arguments -> ``prepare_arguments``
-> schema validation -> the tool's ``validate`` -> the repeated-call guard -> the tool's
``preview`` (an update) -> tool-call guardrails -> a resumed run's decision, or the
tool's ``requires_approval`` -> ``before_tool_call`` -> middlewares (outermost first) ->
execute (with timeout, cancellation and progress) -> ``after_tool_call`` -> tool-result
guardrails. Every failure becomes
an error :class:`ToolResult`; nothing raises out of a call. An exception's text is
:func:`ketch.llm._errors.exception_text` (``Type: message``), as for model errors.

The scheduler starts calls in order (FIFO, never skipping ahead): a concurrency-safe
call starts while nothing unsafe runs and the limit allows; an unsafe (sequential) call
starts only when nothing else runs, and nothing behind it starts before it ends. A call
that needs approval stops the batch from starting more calls: the running ones finish,
and the batch reports the calls not run as pending (see :mod:`ketch.loop._state`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import Literal

import msgspec

from .._schema import malformed_arguments_message
from .._schema import validate_arguments
from ..llm._errors import exception_text
from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ..llm._messages import monotonic
from ..llm._signal import AbortSignal
from ..llm._signal import AbortWaiter
from ..llm._signal import take_pending_cancel
from ._config import LoopConfig
from ._events import AgentEvent
from ._events import ApprovalRequired
from ._events import ToolCallNote
from ._events import ToolExecutionEnd
from ._events import ToolExecutionStart
from ._events import ToolExecutionUpdate
from ._guardrails import Guardrails
from ._guardrails import GuardrailTrip
from ._guardrails import ToolResultCheck
from ._hooks import AfterToolCallResult
from ._hooks import BeforeToolCallResult
from ._hooks import Conversation
from ._hooks import ToolCallInfo
from ._hooks import maybe_await
from ._state import Decision
from ._state import Deny
from ._state import Edit
from ._state import PendingCall
from ._state import denied_text
from ._tool import Tool
from ._tool import ToolContext
from ._tool import ToolPreview
from ._tool import ToolResult
from ._tool import to_tool_result

log = logging.getLogger("ketch.loop")

BLOCKED_TEXT = "Tool execution was blocked"
SKIPPED_TEXT = "Skipped due to queued user message."
INTERRUPTED_TEXT = "Cancelled due to queued user message."
ABORTED_TEXT = "Tool execution was aborted."


def repeated_call_text(name: str, times: int) -> str:
    """The result text for a call repeating earlier calls' tool and arguments too often."""
    return (
        f'Tool call not run: "{name}" was already called {times} time(s) with these exact arguments '
        "in this run. Use the earlier results, or change the arguments."
    )


def truncated_call_text(name: str) -> str:
    """The result text for a call that was not run because the response hit the output limit."""
    return (
        f'Tool call "{name}" was not executed: the response hit the output token limit, so its '
        "arguments may be truncated. Re-issue the tool call with complete arguments."
    )


class CallOutcome:
    """A finished call: its result, whether it counts as a failure, and its duration;
    ``note`` and ``stop`` are what ``before_tool_call`` said (its note; block and stop).
    ``approval`` is set (to the reason, possibly "") for a call that did not run because
    it needs approval; its ``result`` then means nothing. ``trip`` is the tool guardrail
    that tripped on the call."""

    __slots__ = ("approval", "call", "counts_as_failure", "duration", "note", "result", "stop", "trip")

    def __init__(
        self,
        call: ToolCall,
        result: ToolResult,
        duration: float,
        counts_as_failure: bool,
        note: Any = None,
        stop: bool = False,
    ) -> None:
        self.call = call
        self.result = result
        self.duration = duration
        self.counts_as_failure = counts_as_failure
        self.note = note
        self.stop = stop
        self.approval: str | None = None
        self.trip: GuardrailTrip | None = None


def result_messages(outcomes: list[CallOutcome]) -> list[ToolResultMessage]:
    """The outcomes' results as the tool-result messages the transcript gets, in order."""
    messages = []
    for outcome in outcomes:
        result = outcome.result
        messages.append(
            ToolResultMessage(
                tool_call_id=outcome.call.id,
                tool_name=outcome.call.name,
                content=result.blocks,
                details=result.details,
                is_error=result.is_error,
            )
        )
    return messages


class _Call:
    """What the steps of one call's pipeline share: the call and its tool, the message
    and conversation it came in, its abort signal and where its progress goes."""

    __slots__ = ("assistant", "call", "conversation", "report", "signal", "tool")

    def __init__(
        self,
        call: ToolCall,
        tool: Tool,
        assistant: AssistantMessage,
        conversation: Conversation,
        signal: AbortSignal,
        report: Callable[[Any], Awaitable[None]],
    ) -> None:
        self.call = call
        self.tool = tool
        self.assistant = assistant
        self.conversation = conversation
        self.signal = signal
        self.report = report

    def info(self, args: dict[str, Any]) -> ToolCallInfo:
        """The call with ``args`` as hooks, guardrails and middlewares see it."""
        return ToolCallInfo(self.call, self.tool, args, self.assistant, self.conversation, self.signal)

    def context(self, deps: Any) -> ToolContext[Any]:
        """The :class:`ToolContext` the tool's ``validate``, ``preview`` and ``execute`` get."""
        return ToolContext(
            call_id=self.call.id,
            tool_name=self.tool.name,
            signal=self.signal,
            report=self.report,
            messages=self.conversation.messages,
            assistant_message=self.assistant,
            deps=deps,
        )


class ToolRunner:
    """Runs the calls of one assistant message; lives for one run (holds the breaker)."""

    __slots__ = ("_failures", "_repeats", "_trips", "breaker", "config", "decisions", "guards")

    def __init__(self, config: LoopConfig[Any], decisions: dict[str, Decision] | None = None) -> None:
        self.config = config
        self.breaker = config.max_tool_errors is not None  # whether record() has anything to do
        self.guards: Guardrails | None = None
        self._trips: dict[str, GuardrailTrip] = {}  # call id -> the tool guardrail that tripped
        self._failures: dict[str, int] = {}
        self._repeats: dict[tuple[str, bytes], int] = {}  # (tool, canonical args) -> calls run
        self.decisions = decisions or {}

    def is_sequential(self, call: ToolCall, tools: dict[str, Tool]) -> bool:
        """Whether ``call`` must run alone."""
        if self.config.tool_execution == "sequential":
            return True
        tool = tools.get(call.name)
        if tool is None:
            return False
        try:
            return tool.is_sequential(call.args)
        except Exception:
            return True

    def record(self, outcome: CallOutcome) -> None:
        """Update the consecutive-failure breaker with a finished call."""
        if self.config.max_tool_errors is None:
            return
        name = outcome.call.name
        if outcome.counts_as_failure:
            self._failures[name] = self._failures.get(name, 0) + 1
        elif not outcome.result.is_error:
            self._failures.pop(name, None)

    async def run_call(
        self,
        call: ToolCall,
        tools: dict[str, Tool],
        assistant: AssistantMessage,
        conversation: Conversation,
        signal: AbortSignal,
        report: Callable[[Any], Awaitable[None]],
    ) -> CallOutcome:
        """Run one call through the whole pipeline. Never raises (except cancellation)."""
        started = monotonic()
        tool = tools.get(call.name)
        if tool is None:
            result, failure, verdict = ToolResult.error(f'Tool "{call.name}" not found'), True, None
        else:
            result, failure, verdict = await self._pipeline(_Call(call, tool, assistant, conversation, signal, report))
        duration = monotonic() - started
        if verdict is None:
            outcome = CallOutcome(call, result, duration, failure)
        else:
            outcome = CallOutcome(call, result, duration, failure, verdict.note, verdict.block and verdict.stop)
            if result is _PENDING:
                outcome.approval = verdict.reason or ""
        if self._trips:
            outcome.trip = self._trips.pop(call.id, None)
        return outcome

    async def _guard(self, rails: list[Any], arg: Any, call: ToolCall) -> ToolResult | None:
        """Tool guardrails on ``arg``: the error result replacing the call's (recording a
        trip), or None when they passed."""
        assert self.guards is not None
        verdict = await self.guards.check(rails, arg)
        if verdict is None:
            return None
        if isinstance(verdict, GuardrailTrip):
            self._trips[call.id] = verdict
            return ToolResult.error(verdict.text, details=verdict.info)
        return ToolResult.error(verdict)

    async def _pipeline(self, c: _Call) -> tuple[ToolResult, bool, BeforeToolCallResult | None]:
        """The call's result, whether it counts as a failure, and the ``before_tool_call``
        verdict (None when there was none)."""
        cfg = self.config
        call, tool = c.call, c.tool
        limit = cfg.max_tool_errors
        if limit is not None and self._failures.get(call.name, 0) >= limit:
            return ToolResult.error(f'Tool "{call.name}" disabled after {limit} consecutive errors'), False, None
        if call.parse_error is not None:
            text = malformed_arguments_message(call.name, call.parse_error, call.raw_arguments or "")
            return ToolResult.error(text), True, None
        verdict: BeforeToolCallResult | None = None
        try:
            args = call.args
            if tool.prepare_arguments is not None:
                args = await maybe_await(tool.prepare_arguments(args))
            args, problem = validate_arguments(tool.name, tool.parameters, args)
            if problem is not None:
                return ToolResult.error(problem), True, None
            ctx: ToolContext[Any] | None = None
            if tool.validate is not None:
                ctx = c.context(cfg.deps)
                invalid = await maybe_await(tool.validate(args, ctx))
                if invalid is not None:
                    return ToolResult.error(str(invalid)), True, None
            repeats = cfg.max_repeated_tool_calls
            if repeats is not None:
                key = (tool.name, msgspec.json.encode(args, order="sorted"))
                seen = self._repeats.get(key, 0)
                if seen >= repeats:
                    return ToolResult.error(repeated_call_text(tool.name, seen)), True, None
                self._repeats[key] = seen + 1
            if tool.preview is not None:
                ctx = ctx or c.context(cfg.deps)
                try:
                    shown = await maybe_await(tool.preview(args, ctx))
                except Exception:
                    log.exception("preview of tool %r failed; skipped", tool.name)
                    shown = None
                if shown is not None:
                    await c.report(ToolPreview(preview=shown))
            guards = self.guards
            if guards is not None and guards.tool_call:
                refused = await self._guard(guards.tool_call, c.info(args), call)
                if refused is not None:
                    return refused, False, None
            decision = self.decisions.get(call.id) if self.decisions else None
            if decision is not None:
                if type(decision) is Deny:
                    text = denied_text(decision.reason)
                    stop = BeforeToolCallResult.blocked(text, stop=True) if decision.stop else None
                    return ToolResult.error(text), False, stop
                if type(decision) is Edit:
                    args, problem = validate_arguments(tool.name, tool.parameters, decision.args)
                    if problem is not None:
                        return ToolResult.error(problem), True, None
            elif tool.requires_approval and tool.needs_approval(args):
                return _PENDING, False, BeforeToolCallResult.approval_required()
            if cfg.before_tool_call is not None:
                verdict = await maybe_await(cfg.before_tool_call(c.info(args)))
                if verdict is not None:
                    if verdict.approval:
                        if decision is None:
                            return _PENDING, False, verdict
                    elif verdict.block:
                        blocked = ToolResult.error(verdict.reason or BLOCKED_TEXT)
                        blocked.terminate = verdict.stop
                        return blocked, False, verdict
                    if verdict.args is not None:
                        args = verdict.args
        except Exception as exc:
            return ToolResult.error(exception_text(exc)), True, verdict

        try:
            result = await self._execute(c, args)
            failure = result.is_error
        except TimeoutError:
            timeout = tool.timeout if tool.timeout is not None else cfg.tool_timeout
            return ToolResult.error(f'Tool "{call.name}" timed out after {timeout:g}s'), True, verdict
        except Exception as exc:
            return ToolResult.error(exception_text(exc)), True, verdict

        if cfg.after_tool_call is not None:
            try:
                override: AfterToolCallResult | None = await maybe_await(cfg.after_tool_call(c.info(args), result))
            except Exception as exc:
                return ToolResult.error(exception_text(exc)), True, verdict
            if override is not None:
                result = ToolResult(
                    content=override.content if override.content is not None else result.content,
                    details=result.details if override.details is msgspec.UNSET else override.details,
                    is_error=override.is_error if override.is_error is not None else result.is_error,
                    terminate=override.terminate if override.terminate is not None else result.terminate,
                    usage=result.usage,  # what the tool spent stays spent
                )
        guards = self.guards
        if guards is not None and guards.tool_result:
            check = ToolResultCheck(c.info(args), result)
            replaced = await self._guard(guards.tool_result, check, call)
            if replaced is not None:
                return replaced, False, verdict
        return result, failure, verdict

    async def _execute(self, c: _Call, args: dict[str, Any]) -> ToolResult:
        tool = c.tool
        ctx = c.context(self.config.deps)

        async def innermost(final_args: dict[str, Any]) -> ToolResult:
            return to_tool_result(await tool.execute(final_args, ctx))

        run: Callable[[dict[str, Any]], Awaitable[ToolResult]] = innermost
        middlewares = self.config.middlewares
        if middlewares:
            info = c.info(args)
            for mw in reversed(middlewares):
                run = _wrap(mw, info, run)
        timeout = tool.timeout if tool.timeout is not None else self.config.tool_timeout
        if timeout is None:
            return await run(args)
        async with asyncio.timeout(timeout):
            return await run(args)


def _wrap(
    mw: Any, info: ToolCallInfo, inner: Callable[[dict[str, Any]], Awaitable[ToolResult]]
) -> Callable[[dict[str, Any]], Awaitable[ToolResult]]:
    async def call(args: dict[str, Any]) -> ToolResult:
        current = info if args is info.args else dataclasses.replace(info, args=args)
        return to_tool_result(await mw(current, inner))

    return call


_PENDING = ToolResult.error("awaiting approval")
"""The placeholder result of a call that needs approval (never committed)."""

StopKind = Literal["aborted", "skipped", "interrupted"]


def stopped_result(kind: StopKind) -> ToolResult:
    """The error result for a call that was aborted, skipped, or cancelled by steering."""
    text = {"aborted": ABORTED_TEXT, "skipped": SKIPPED_TEXT, "interrupted": INTERRUPTED_TEXT}[kind]
    return ToolResult.error(text)


# -- the batch scheduler -------------------------------------------------------------------


class BatchResult:
    """What one batch of tool calls produced.

    ``outcomes``: every call's outcome, in call order; ``notes``: the ``tool_call_note``
    events the batch emitted, in order; ``steering``: steering messages taken during the
    batch (``steering_during_tools="interrupt"``); ``aborted``: an abort stopped the batch
    (or came as its only call finished); ``stop``: the run should stop after this batch
    (every result asked to ``terminate``, or a ``before_tool_call`` blocked a call with
    ``stop``). ``pending``: the calls not run because one of them needs approval (in
    call order; ``outcomes`` then holds only the calls that ran). ``tripped``: the first
    (in call order) tool guardrail that tripped; ``denied``: the result text of the first
    call blocked with ``stop`` (the run ends after the batch with ``denied``).
    """

    __slots__ = ("aborted", "denied", "notes", "outcomes", "pending", "steering", "stop", "tripped")

    def __init__(
        self,
        outcomes: list[CallOutcome],
        notes: list[ToolCallNote],
        steering: list[Message],
        aborted: bool,
        pending: list[PendingCall] | None = None,
    ) -> None:
        self.outcomes = outcomes
        self.notes = notes
        self.steering = steering
        self.aborted = aborted
        self.pending = pending
        every = True
        stop = False
        self.tripped: GuardrailTrip | None = None
        self.denied: str | None = None
        for o in outcomes:
            if o.trip is not None and self.tripped is None:
                self.tripped = o.trip
            if o.stop:
                if not stop:
                    self.denied = o.result.text
                stop = True
            elif not o.result.terminate:
                every = False
        self.stop = stop or every or self.tripped is not None


def _noop() -> None:
    return None


def _end_event(outcome: CallOutcome) -> ToolExecutionEnd | ApprovalRequired:
    if outcome.approval is not None:
        call = outcome.call
        return ApprovalRequired(
            tool_call_id=call.id, tool_name=call.name, args=call.args, reason=outcome.approval or None
        )
    result = outcome.result
    return ToolExecutionEnd(
        tool_call_id=outcome.call.id,
        tool_name=outcome.call.name,
        result=result,
        is_error=result.is_error,
        duration=outcome.duration,
    )


async def _no_progress(partial: Any) -> None:
    return None


class _Delivered:
    """An update whose sender waits until the batch's consumer has taken it."""

    __slots__ = ("done", "update")

    def __init__(self, update: ToolExecutionUpdate, done: asyncio.Future[None]) -> None:
        self.update = update
        self.done = done


class _Inbox:
    """What running calls send the batch: a FIFO with one waiting reader."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    def pop(self) -> Any:
        return self._items.popleft()

    def __bool__(self) -> bool:
        return bool(self._items)


class ToolBatch:
    """Schedules the calls of one assistant message and streams their events.

    Iterate :meth:`events`, then read :meth:`result`. Calls start in order (see the
    module docstring); ``tool_execution_end`` events come in completion order, each
    preceded by the call's ``tool_call_note`` when its ``before_tool_call`` gave one.
    Calls of a message cut off by the output limit are not run: each gets an error result.
    """

    __slots__ = (
        "_aborted",
        "_done",
        "_finished",
        "_notes",
        "_outcomes",
        "_paused",
        "_queue",
        "_signals",
        "_steering",
        "_stop_kind",
        "_tasks",
        "_unsafe_running",
        "calls",
        "conversation",
        "message",
        "poll_steering",
        "runner",
        "signal",
        "tools",
    )

    def __init__(
        self,
        runner: ToolRunner,
        tools: dict[str, Tool],
        conversation: Conversation,
        message: AssistantMessage,
        calls: list[ToolCall],
        signal: AbortSignal,
        poll_steering: Callable[[], Awaitable[list[Message]]],
    ) -> None:
        self.runner = runner
        self.tools = tools
        self.conversation = conversation
        self.message = message
        self.calls = calls
        self.signal = signal
        self.poll_steering = poll_steering
        self._outcomes: list[CallOutcome | None] = [None] * len(calls)
        self._notes: list[ToolCallNote] = []
        self._steering: list[Message] = []
        self._aborted = False
        self._paused = False
        self._done = False
        # What calls running in tasks need (set up by _scheduled when it starts tasks).
        self._queue: _Inbox
        self._tasks: dict[int, asyncio.Task[None]]
        self._signals: dict[int, AbortSignal]
        self._stop_kind: dict[int, StopKind]
        self._finished: set[int]
        self._unsafe_running = False

    def result(self) -> BatchResult:
        """What the batch produced; valid once :meth:`events` is exhausted."""
        assert self._done, "the batch has not finished"
        if not self._paused:
            outcomes = [o for o in self._outcomes if o is not None]
            return BatchResult(outcomes, self._notes, self._steering, self._aborted)
        if self._aborted:  # paused calls of an aborted batch end as aborted
            for o in self._outcomes:
                if o is not None and o.approval is not None:
                    o.result = stopped_result("aborted")
                    o.approval = None
            outcomes = [o for o in self._outcomes if o is not None]
            return BatchResult(outcomes, self._notes, self._steering, True)
        outcomes = []
        pending: list[PendingCall] = []
        for call, o in zip(self.calls, self._outcomes, strict=True):
            if o is not None and o.approval is None:
                outcomes.append(o)
            else:
                asked = o is not None
                reason = o.approval if o is not None else None
                pending.append(PendingCall(
                    tool_call_id=call.id, tool_name=call.name, args=call.args,
                    needs_decision=asked, reason=reason or None,
                ))
        return BatchResult(outcomes, self._notes, self._steering, False, pending)

    def events(self) -> AsyncGenerator[AgentEvent, None]:
        """Run the batch, yielding its events (one generator, no extra hand-off per event)."""
        return self._truncated() if self.message.stop_reason == "length" else self._scheduled()

    def _ended(self, i: int, outcome: CallOutcome) -> Iterator[AgentEvent]:
        """Record call ``i``'s outcome; its note (if any) and ``tool_execution_end``."""
        note = self._record(i, outcome)
        if note is not None:
            yield note
        yield _end_event(outcome)

    def _record(self, i: int, outcome: CallOutcome) -> ToolCallNote | None:
        """Record call ``i``'s outcome; its ``tool_call_note`` when ``before_tool_call`` gave one."""
        self._outcomes[i] = outcome
        if outcome.approval is not None:
            self._paused = True
        if outcome.note is None:
            return None
        call = outcome.call
        note = ToolCallNote(tool_call_id=call.id, tool_name=call.name, note=outcome.note)
        self._notes.append(note)
        return note

    async def _truncated(self) -> AsyncGenerator[AgentEvent, None]:
        """Calls cut off by the output limit: each gets an error result without running."""
        for i, call in enumerate(self.calls):
            yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
            outcome = CallOutcome(call, ToolResult.error(truncated_call_text(call.name)), 0.0, False)
            for event in self._ended(i, outcome):
                yield event
        self._done = True

    def _can_start(self, sequential: bool) -> bool:
        """Whether the next call may start beside the running ones."""
        return (
            not sequential
            and not self._unsafe_running
            and len(self._tasks) < self.runner.config.max_tool_concurrency
        )

    async def _scheduled(self) -> AsyncGenerator[AgentEvent, None]:
        calls, n, runner, signal = self.calls, len(self.calls), self.runner, self.signal
        if n == 1 and not signal.aborted:
            call = calls[0]
            tool = self.tools.get(call.name)
            if tool is None or (not tool.reports_progress and tool.preview is None):
                yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
                outcome = await self._call_here(call)
                if runner.breaker:
                    runner.record(outcome)
                note = self._record(0, outcome)
                if note is not None:
                    yield note
                self._done = True
                yield _end_event(outcome)
                return
        self._queue = _Inbox()
        self._tasks = {}
        self._signals = {}
        self._stop_kind = {}
        self._finished = set()
        # Alone, a call runs as it would if it were sequential: no need to ask.
        sequential = [runner.is_sequential(c, self.tools) for c in calls] if n > 1 else [False]
        next_i = 0
        skip_rest = False
        interrupt = runner.config.steering_during_tools == "interrupt"
        waiter = AbortWaiter(signal)
        try:
            while True:
                while (
                    next_i < n
                    and not skip_rest
                    and not self._paused
                    and not signal.aborted
                    and (not self._tasks or self._can_start(sequential[next_i]))
                ):
                    i = next_i
                    next_i += 1
                    call = calls[i]
                    yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
                    self._start(i, sequential[i])
                if not self._tasks:
                    break
                aborted = signal.aborted
                if not aborted:
                    waiter.active = True
                    try:
                        item = await self._queue.get()
                    except asyncio.CancelledError:
                        if not waiter.caused_cancel():
                            raise
                        aborted = True
                    finally:
                        waiter.active = False
                if aborted:
                    async for event in self._abort(next_i):
                        yield event
                    self._done = True
                    return
                # A finished call first: it comes once per call, and a class pattern that
                # does not match costs an isinstance call.
                match item:
                    case (int() as i, CallOutcome() as outcome):
                        self._tasks.pop(i, None)
                        if sequential[i]:
                            self._unsafe_running = False
                        if runner.breaker:
                            runner.record(outcome)
                        note = self._record(i, outcome)
                        if note is not None:
                            yield note
                        yield _end_event(outcome)
                        if interrupt and not skip_rest and not self._paused and (next_i < n or self._tasks):
                            steering = await self.poll_steering()
                            if steering:
                                self._steering = steering
                                skip_rest = True
                                self._interrupt_running()
                    case ToolExecutionUpdate():
                        yield item
                    case _Delivered():
                        yield item.update
                        if not item.done.done():
                            item.done.set_result(None)
            if self._paused and not signal.aborted:
                pass  # the calls not started wait with the paused one
            elif skip_rest:
                for i in range(next_i, n):
                    call = calls[i]
                    yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
                    for event in self._ended(i, CallOutcome(call, stopped_result("skipped"), 0.0, False)):
                        yield event
            elif signal.aborted and next_i < n:
                async for event in self._abort(next_i):
                    yield event
            self._done = True
        finally:
            waiter.close()
            for task in self._tasks.values():
                task.cancel()

    async def _call_here(self, call: ToolCall) -> CallOutcome:
        """Run the batch's only call in the loop's own task (it cannot report progress,
        so nothing has to stream meanwhile). An abort cancels it like a started task."""
        signal = self.signal
        waiter = AbortWaiter(signal)
        started = monotonic()
        waiter.active = True
        try:
            outcome = await self.runner.run_call(
                call, self.tools, self.message, self.conversation, signal, _no_progress
            )
        except asyncio.CancelledError:
            if not waiter.caused_cancel():
                raise
            self._aborted = True
            return CallOutcome(call, stopped_result("aborted"), monotonic() - started, False)
        finally:
            waiter.active = False
            waiter.close()
        if waiter.cancelled:
            self._aborted = True  # the abort came as the call finished (or the call ignored it)
            await take_pending_cancel(waiter.caused_cancel)
        return outcome

    def _start(self, i: int, sequential: bool) -> None:
        call = self.calls[i]
        tool = self.tools.get(call.name)
        if tool is not None and tool.interrupt == "cancel":
            # Its own signal, so steering can cancel this call alone.
            signal = AbortSignal()
            remove = self.signal.add_callback(signal.abort)
            self._signals[i] = signal
        else:
            signal, remove = self.signal, _noop
        if sequential:
            self._unsafe_running = True
        self._tasks[i] = asyncio.create_task(self._call(i, call, signal, remove))

    async def _call(self, i: int, call: ToolCall, signal: AbortSignal, remove: Callable[[], None]) -> None:
        queue = self._queue
        started = monotonic()

        async def report(partial: Any) -> None:
            if i not in self._finished:
                update = ToolExecutionUpdate(tool_call_id=call.id, tool_name=call.name, args=call.args, partial=partial)
                if type(partial) is ToolPreview:
                    # The call goes on (to the permission gate) once the consumer has the preview.
                    delivered = asyncio.get_running_loop().create_future()
                    queue.put(_Delivered(update, delivered))
                    await delivered
                else:
                    queue.put(update)

        try:
            outcome = await self.runner.run_call(call, self.tools, self.message, self.conversation, signal, report)
        except asyncio.CancelledError:
            kind = self._stop_kind.get(i, "aborted")
            outcome = CallOutcome(call, stopped_result(kind), monotonic() - started, False)
        finally:
            self._finished.add(i)
            if remove is not _noop:
                remove()
        queue.put((i, outcome))

    def _interrupt_running(self) -> None:
        for i, task in self._tasks.items():
            tool = self.tools.get(self.calls[i].name)
            if tool is not None and tool.interrupt == "cancel":
                self._stop_kind[i] = "interrupted"
                self._signals[i].abort("interrupted")
                task.cancel()

    async def _abort(self, next_i: int) -> AsyncGenerator[AgentEvent, None]:
        """Cancel running calls, give them a bounded time to stop, close every call."""
        self._aborted = True
        running = dict(self._tasks)
        for i, task in running.items():
            self._stop_kind.setdefault(i, "aborted")
            task.cancel()
        if running:
            await asyncio.wait(running.values(), timeout=self.runner.config.tool_abort_grace)
        while self._queue:
            match self._queue.pop():
                case (int() as i, CallOutcome() as outcome):
                    self._tasks.pop(i, None)
                    for event in self._ended(i, outcome):
                        yield event
                case _:
                    pass  # a progress report that came too late
        for i in list(self._tasks):
            self._tasks.pop(i)
            for event in self._ended(i, CallOutcome(self.calls[i], stopped_result("aborted"), 0.0, False)):
                yield event
        for i in range(next_i, len(self.calls)):
            call = self.calls[i]
            yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
            for event in self._ended(i, CallOutcome(call, stopped_result("aborted"), 0.0, False)):
                yield event
