"""The stateless loop: :func:`run_loop` and :func:`continue_loop`.

Read :meth:`_Run.events` top to bottom: each turn transforms and converts the transcript,
resolves the API key, streams the assistant message, runs its tool calls, emits
``turn_end``, lets ``prepare_next_turn`` change what comes next, checks the stop
controls and polls steering. When the model stops without tool calls and nothing is
queued, follow-ups are polled, then ``on_stop`` decides. Every run ends with exactly one
``agent_end``; no model, tool or hook failure escapes it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import Any, Literal

import msgspec

from ..llm.errors import exception_text
from ..llm.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from ..llm.model import Context, StreamOptions, ToolSpec
from ..llm.signal import AbortSignal, AbortWaiter, take_pending_cancel
from ..llm.stream import (
    StreamDone,
    StreamError,
    StreamEvent,
    StreamRetry,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..llm.tokens import ContextUsage
from .config import ContextRequest, Conversation, LoopConfig, Projection, StopInfo, TurnInfo
from .events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    CompactionEnd,
    EndReason,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    Retry,
    RunResult,
    RunSummary,
    ToolCallNote,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from .execute import CallOutcome, StopKind, ToolRunner, stopped_result, truncated_call_text
from .repair import default_convert_to_llm, repair_messages
from .tool import Tool, ToolResult

__all__ = ["DEFAULT_WINDOW", "RunStream", "continue_loop", "run_loop"]

# Block events that only change the partial message; a tool call's start and end are
# also tracked, so an aborted message can drop the call whose arguments were cut off.
_UPDATE_EVENTS: frozenset[type] = frozenset(
    {TextStart, TextDelta, TextEnd, ThinkingStart, ThinkingDelta, ThinkingEnd, ToolCallDelta}
)

ABORTED_REQUEST_TEXT = "Request was aborted"

DEFAULT_WINDOW = 128_000
"""Context window assumed for models that do not say (``model.info.context_window``)."""


ContextReason = Literal["request", "overflow"]


def _retry(event: StreamRetry) -> Retry:
    return Retry(
        attempt=event.attempt,
        max_attempts=event.max_attempts,
        delay=event.delay,
        error_kind=event.error_kind,
        error_message=event.error_message,
        discard_partial=event.discard_partial,
    )


async def _maybe(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class RunStream:
    """The events of one run, as an async iterator, and its result.

    ``async for event in stream`` yields every event up to ``agent_end``;
    ``await stream.result()`` finishes the run if needed and returns the
    :class:`RunResult`. A stream can be iterated once.
    """

    __slots__ = ("_gen", "_run")

    def __init__(self, run: _Run, gen: AsyncGenerator[AgentEvent, None]) -> None:
        self._run = run
        self._gen = gen

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self._gen

    async def result(self) -> RunResult:
        """Drain the remaining events and return the run's result."""
        async for _ in self._gen:
            pass
        result = self._run.result
        assert result is not None
        return result

    async def aclose(self) -> None:
        """Stop the run early (running tools are cancelled)."""
        await self._gen.aclose()

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._run.signal

    @property
    def messages(self) -> list[Message]:
        """The messages the run has committed so far, in order (at the end, the same list
        as :attr:`RunResult.messages`); also valid for a run closed before its end."""
        return self._run.new_messages


def _as_messages(prompts: str | Message | Sequence[Message]) -> list[Message]:
    if isinstance(prompts, str):
        return [UserMessage(content=prompts)]
    if isinstance(prompts, Message):
        return [prompts]
    return list(prompts)


def run_loop(
    prompts: str | Message | Sequence[Message],
    conversation: Conversation,
    config: LoopConfig[Any],
    signal: AbortSignal | None = None,
) -> RunStream:
    """Start a run with new prompt messages. ``conversation.messages`` is appended to in place."""
    run = _Run(conversation, config, signal)
    return RunStream(run, run.events(_as_messages(prompts)))


def continue_loop(conversation: Conversation, config: LoopConfig[Any], signal: AbortSignal | None = None) -> RunStream:
    """Continue from the current transcript without new prompts (e.g. after a retryable error).

    Raises ``ValueError`` at once when the transcript is empty or ends with an assistant
    message.
    """
    if not conversation.messages:
        raise ValueError("Cannot continue: no messages in context")
    last = conversation.messages[-1]
    if isinstance(last, AssistantMessage):
        raise ValueError("Cannot continue from message role: assistant")
    run = _Run(conversation, config, signal)
    return RunStream(run, run.events(None))


class _Run:
    """State of one run. Only :meth:`events` is used from outside."""

    def __init__(self, conversation: Conversation, config: LoopConfig[Any], signal: AbortSignal | None) -> None:
        self.ctx = conversation
        self.cfg = config
        self.signal = signal if signal is not None else AbortSignal()
        self.model = config.model
        self.thinking = config.thinking
        self.new_messages: list[Message] = []
        self.notes: list[ToolCallNote] = []
        self.summary = RunSummary()
        self.result: RunResult | None = None
        self.runner = ToolRunner(config)
        self.turn = 0
        self._set_tools(conversation.tools)
        self.assistant: AssistantMessage | None = None
        self.stream: AsyncIterator[StreamEvent] | None = None
        self.batch: list[CallOutcome] = []
        self.outcomes: list[CallOutcome | None] = []
        self.batch_steering: list[Message] = []
        self.batch_aborted = False

    def _set_tools(self, tools: Sequence[Tool]) -> None:
        self.ctx.tools = tools
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.tool_specs: list[ToolSpec] = [t.spec for t in tools]

    def _end(self, reason: EndReason, error: str | None = None) -> None:
        self.summary.end_reason = reason
        self.summary.error = error

    def _commit(self, message: Message) -> None:
        self.ctx.messages.append(message)
        self.new_messages.append(message)

    async def events(self, prompts: list[Message] | None) -> AsyncGenerator[AgentEvent, None]:
        """The loop itself: all events of the run, ending with exactly one ``agent_end``.

        A ``return`` ends the run; the ``finally`` clause reports an escaped exception as
        an error message and emits ``agent_end`` (a cancelled run re-raises after it), unless
        the consumer closed the stream.
        """
        started = time.monotonic()
        ending = True
        failure: Exception | None = None
        yield AgentStart()
        try:
            cfg = self.cfg
            self.turn = 1
            yield TurnStart(turn=1)
            for prompt in prompts or ():
                self._commit(prompt)
                yield MessageStart(message=prompt)
                yield MessageEnd(message=prompt)
            pending: list[Message] = [] if cfg.skip_initial_steering_poll else await self._poll_steering()
            recoveries = 0
            first = True
            while True:
                while True:
                    if not first:
                        stop = self._stop_before_call()
                        if stop is not None:
                            self._end(stop)
                            return
                        self.turn += 1
                        yield TurnStart(turn=self.turn)
                    first = False
                    for queued in pending:
                        if self.signal.aborted:
                            break  # the rest stays uncommitted: its owner puts it back
                        self._commit(queued)
                        yield MessageStart(message=queued)
                        yield MessageEnd(message=queued)
                    pending = []

                    # One model call; on a context overflow, compact once and call once more.
                    reason: ContextReason = "request"
                    while True:
                        if (
                            cfg.transform_context is None
                            and cfg.context_manager is None
                            and cfg.convert_to_llm is None
                            and cfg.get_api_key is None
                            and not self.signal.aborted
                        ):
                            # Nothing to run before the call: no async generator needed.
                            self.stream = None
                            try:
                                self.stream = self.model.stream(*self._plain_request())
                            except Exception as exc:
                                failed = self._request_failed(exc)
                                yield MessageStart(message=failed)
                                yield MessageEnd(message=failed)
                        else:
                            async for event in self._open_stream(reason):
                                yield event
                        stream = self.stream
                        if stream is None:
                            break
                        final: AssistantMessage | None = None
                        partial: AssistantMessage | None = None
                        broke: Exception | None = None
                        unfinished: set[int] = set()  # indexes of tool calls still streaming
                        try:
                            async for update in stream:
                                kind = type(update)
                                if kind in _UPDATE_EVENTS:
                                    if partial is not None:
                                        yield MessageUpdate(message=partial, event=update)
                                elif kind is ToolCallStart:
                                    unfinished.add(update.index)  # type: ignore[union-attr]
                                    if partial is not None:
                                        yield MessageUpdate(message=partial, event=update)
                                elif kind is ToolCallEnd:
                                    unfinished.discard(update.index)  # type: ignore[union-attr]
                                    if partial is not None:
                                        yield MessageUpdate(message=partial, event=update)
                                elif kind is StreamStart:
                                    if partial is None:
                                        yield MessageStart(message=update.partial)  # type: ignore[union-attr]
                                    partial = update.partial  # type: ignore[union-attr]
                                elif kind is StreamDone:
                                    final = update.message  # type: ignore[union-attr]
                                    break
                                elif kind is StreamError:
                                    final = update.error  # type: ignore[union-attr]
                                    break
                                elif kind is StreamRetry:
                                    assert type(update) is StreamRetry
                                    if update.discard_partial:
                                        partial = None
                                        unfinished.clear()
                                    yield _retry(update)
                        except Exception as exc:
                            broke = exc
                        finally:
                            aclose = getattr(stream, "aclose", None)
                            if aclose is not None:
                                await aclose()
                        final = self._stream_result(final, partial, broke)
                        if unfinished and final is partial and final.stop_reason == "aborted":
                            _drop_unfinished_calls(final, unfinished)
                        if self._compact_and_retry(final, reason):
                            reason = "overflow"
                            yield Retry(
                                attempt=1,
                                max_attempts=2,
                                delay=0.0,
                                error_kind="context_overflow",
                                error_message=final.error_message or "context overflow",
                                discard_partial=True,
                            )
                            continue
                        if partial is not final:
                            yield MessageStart(message=final)
                        self._commit(final)
                        self.assistant = final
                        yield MessageEnd(message=final)
                        break
                    message = self.assistant
                    assert message is not None
                    self.summary.turns += 1
                    self.summary.usage.add(message.usage)
                    if message.stop_reason == "error" or message.stop_reason == "aborted":
                        closed: list[ToolResultMessage] = []
                        if message.stop_reason == "aborted":
                            for result in self._close_aborted_calls(message):
                                closed.append(result)
                                yield MessageStart(message=result)
                                yield MessageEnd(message=result)
                        yield TurnEnd(turn=self.turn, message=message, tool_results=closed)
                        self._end(message.stop_reason, message.error_message)
                        return

                    calls = message.tool_calls
                    results: list[ToolResultMessage] = []
                    terminate = False
                    steering: list[Message] = []
                    if calls:
                        async for event in self._tool_batch(message, calls):
                            if type(event) is ToolExecutionEnd:
                                note = self._note_event(event.tool_call_id)
                                if note is not None:
                                    self.notes.append(note)
                                    yield note
                            yield event
                        for result in self._commit_results(len(calls)):
                            results.append(result)
                            yield MessageStart(message=result)
                            yield MessageEnd(message=result)
                        terminate = all(o.result.terminate for o in self.batch) or any(o.stop for o in self.batch)
                        steering = self.batch_steering
                    yield TurnEnd(turn=self.turn, message=message, tool_results=results, context=self._usage())
                    if self.batch_aborted or self.signal.aborted:
                        self._end("aborted", "aborted")
                        return

                    if cfg.prepare_next_turn is not None or cfg.stop_when:
                        info = TurnInfo(self.turn, message, results, self.ctx, self.new_messages, self.summary.usage)
                        if cfg.prepare_next_turn is not None:
                            await self._prepare_next_turn(info)
                        for predicate in cfg.stop_when:
                            if await _maybe(predicate(info)):
                                self._end("stop")
                                return

                    pending = steering or await self._poll_steering()
                    if calls and not terminate:
                        continue
                    if message.stop_reason == "length" and not calls and recoveries < cfg.length_recoveries:
                        recoveries += 1
                        pending.append(UserMessage(content=cfg.length_recovery_prompt))
                        continue
                    if pending:
                        continue
                    break

                if self.signal.aborted:
                    self._end("aborted", "aborted")
                    return
                follow_ups = await self._poll(cfg.get_follow_up_messages)
                if follow_ups:
                    pending = follow_ups
                    continue
                if cfg.on_stop is not None and not message.tool_calls:
                    decision = await _maybe(cfg.on_stop(StopInfo(self.turn, message, self.ctx)))
                    if decision is not None and decision.action == "escalate":
                        self._end("stop_guard", decision.reason or "on_stop escalated")
                        return
                    injected = decision.injected() if decision is not None else None
                    if injected is not None:
                        pending = [injected]
                        continue
                self._end("stop")
                return
        except GeneratorExit:
            ending = False
            raise
        except asyncio.CancelledError:
            self._end("aborted", "run cancelled")
            raise
        except Exception as exc:
            failure = exc
        finally:
            if ending:
                if failure is not None:
                    error = self._error_message(exception_text(failure))
                    self._commit(error)
                    yield MessageStart(message=error)
                    yield MessageEnd(message=error)
                    self._end("error", error.error_message)
                yield self._agent_end(started)

    def _agent_end(self, started: float) -> AgentEnd:
        self.summary.duration = time.monotonic() - started
        self.result = RunResult(messages=self.new_messages, summary=self.summary, tool_call_notes=self.notes)
        return AgentEnd(messages=self.new_messages, summary=self.summary)

    def _error_message(self, text: str, kind: str = "unknown") -> AssistantMessage:
        m = self.model
        return AssistantMessage(
            provider=m.provider, api=m.api, model=m.id, stop_reason="error", error_message=text, error_kind=kind
        )

    def _usage(self) -> ContextUsage:
        info = getattr(self.model, "info", None)
        window = getattr(info, "context_window", None) or DEFAULT_WINDOW
        return self.ctx.meter.measure(self.ctx.messages, window)

    def _stop_before_call(self) -> EndReason | None:
        cfg = self.cfg
        if self.signal.aborted:
            return "aborted"
        if cfg.max_turns is not None and self.summary.turns >= cfg.max_turns:
            return "max_turns"
        if cfg.max_budget_usd is not None and self.summary.usage.cost.total >= cfg.max_budget_usd:
            return "max_budget"
        return None

    async def _poll(self, getter: Any) -> list[Message]:
        """Take queued messages from ``getter``; none once the run is aborted (an aborted
        run leaves its queues alone)."""
        if getter is None or self.signal.aborted:
            return []
        got = getter()
        if inspect.isawaitable(got):
            got = await got
        return list(got) if got else []

    async def _poll_steering(self) -> list[Message]:
        return await self._poll(self.cfg.get_steering_messages)

    async def _prepare_next_turn(self, info: TurnInfo) -> None:
        assert self.cfg.prepare_next_turn is not None
        nxt = await _maybe(self.cfg.prepare_next_turn(info))
        if nxt is None:
            return
        if nxt.model is not None:
            self.model = nxt.model
        if nxt.thinking is not None:
            self.thinking = nxt.thinking
        if nxt.tools is not None:
            self._set_tools(nxt.tools)
        if nxt.system_prompt is not None:
            self.ctx.system_prompt = nxt.system_prompt
        if nxt.messages is not None:
            self.ctx.messages[:] = nxt.messages

    # -- one model call -----------------------------------------------------------------
    async def _manage_context(self, reason: ContextReason, messages: list[Message]) -> AsyncGenerator[Any, None]:
        """Run the context manager; yields its events, then the messages to send (a list)."""
        cm = self.cfg.context_manager
        assert cm is not None
        request = ContextRequest(reason, self.model, self.signal, self.ctx.system_prompt)
        projection: Projection | None = None
        async for item in cm.manage(messages, request):
            if type(item) is Projection:
                projection = item
            else:
                if type(item) is CompactionEnd:
                    # The summary call is part of what the run used (and of its budget).
                    usage = self.summary.usage
                    usage.add(item.usage)
                    if not item.usage.cost.total:  # a manager that reports only the cost
                        usage.cost.total += item.cost
                yield item
        if projection is None:
            yield messages
            return
        if projection.commit is not None:
            self.ctx.messages[:] = projection.commit
        yield self.ctx.messages if projection.messages is projection.commit else projection.messages

    async def _request(self, messages: list[Message]) -> tuple[Context, StreamOptions]:
        """The request for ``messages``: converted, repaired, with this turn's options and key."""
        cfg = self.cfg
        if cfg.convert_to_llm is not None:
            llm = repair_messages(await _maybe(cfg.convert_to_llm(messages)))
        elif messages is self.ctx.messages:
            llm = self.ctx.view.build(messages)
        else:
            llm = repair_messages(default_convert_to_llm(messages))
        options = cfg.options
        api_key = await _maybe(cfg.get_api_key(self.model.provider)) if cfg.get_api_key is not None else None
        options = msgspec.structs.replace(
            options, thinking=self.thinking, signal=self.signal, api_key=api_key or options.api_key
        )
        return Context(system_prompt=self.ctx.system_prompt, messages=llm, tools=self.tool_specs), options

    def _plain_request(self) -> tuple[Context, StreamOptions]:
        """:meth:`_request` for the transcript itself when no ``convert_to_llm`` and no
        ``get_api_key`` are configured."""
        options = msgspec.structs.replace(self.cfg.options, thinking=self.thinking, signal=self.signal)
        messages = self.ctx.view.build(self.ctx.messages)
        return Context(system_prompt=self.ctx.system_prompt, messages=messages, tools=self.tool_specs), options

    def _request_failed(self, exc: Exception) -> AssistantMessage:
        """Commit an error message for a model call that could not start, as the turn's
        assistant message."""
        failed = self._error_message(exception_text(exc))
        self._commit(failed)
        self.assistant = failed
        return failed

    async def _open_stream(self, reason: ContextReason) -> AsyncGenerator[AgentEvent, None]:
        """Start one model call: transform and manage the context (yielding the context
        manager's events), then request the stream into ``self.stream``. A failure here
        commits an error message as the turn's assistant message and leaves
        ``self.stream`` None."""
        self.stream = None
        if self.signal.aborted:
            # Aborted before the call: end the turn as the model would, without calling it.
            m = self.model
            aborted = AssistantMessage(
                provider=m.provider, api=m.api, model=m.id, stop_reason="aborted", error_message=ABORTED_REQUEST_TEXT
            )
            self._commit(aborted)
            self.assistant = aborted
            yield MessageStart(message=aborted)
            yield MessageEnd(message=aborted)
            return
        try:
            messages = self.ctx.messages
            if self.cfg.transform_context is not None:
                messages = await _maybe(self.cfg.transform_context(messages, self.signal))
            if self.cfg.context_manager is not None:
                async for item in self._manage_context(reason, messages):
                    if isinstance(item, list):
                        messages = item
                    else:
                        yield item
            self.stream = self.model.stream(*await self._request(messages))
        except Exception as exc:
            failed = self._request_failed(exc)
            yield MessageStart(message=failed)
            yield MessageEnd(message=failed)

    def _stream_result(
        self, final: AssistantMessage | None, partial: AssistantMessage | None, error: Exception | None
    ) -> AssistantMessage:
        """The message a model stream ended with: its terminal message, or an error
        message (keeping partial content) when it raised or stopped without one."""
        if error is not None:
            final = partial or self._error_message("")
            final.stop_reason = "error"
            final.error_message = exception_text(error)
            final.error_kind = final.error_kind or "unknown"
        elif final is None:
            final = partial or self._error_message("")
            final.stop_reason = "error"
            final.error_message = "stream ended without a terminal event"
            final.error_kind = "network"
        return final

    def _compact_and_retry(self, final: AssistantMessage, reason: ContextReason) -> bool:
        """Whether a context overflow should be compacted away and the call made once more."""
        return (
            final.error_kind == "context_overflow"
            and reason == "request"
            and self.cfg.context_manager is not None
            and final.stop_reason == "error"
        )

    # -- one batch of tool calls ----------------------------------------------------------
    def _tool_batch(self, message: AssistantMessage, calls: list[ToolCall]) -> AsyncIterator[AgentEvent]:
        """The events of running the calls of ``message``; their outcomes fill ``self.outcomes``."""
        self.outcomes = [None] * len(calls)
        self.batch_steering = []
        self.batch_aborted = False
        if message.stop_reason == "length":
            return self._truncated_calls(calls)
        return _Batch(self, message, calls, self.outcomes).run()

    async def _truncated_calls(self, calls: list[ToolCall]) -> AsyncGenerator[AgentEvent, None]:
        """Calls cut off by the output limit: each gets an error result without running."""
        for i, call in enumerate(calls):
            yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
            outcome = CallOutcome(call, ToolResult.error(truncated_call_text(call.name)), 0.0, False)
            self.outcomes[i] = outcome
            yield self._end_event(outcome)

    def _close_aborted_calls(self, message: AssistantMessage) -> Iterator[ToolResultMessage]:
        """Error results for the complete tool calls of an aborted message (none of them
        ran), committed in call order as they are handed out, so the transcript pairs
        every call with a result for any provider."""
        calls = message.tool_calls
        if not calls:
            return
        self.summary.tool_calls += len(calls)
        self.summary.tool_errors += len(calls)
        for call in calls:
            stopped = stopped_result("aborted")
            result = ToolResultMessage(
                tool_call_id=call.id, tool_name=call.name, content=stopped.blocks, is_error=True
            )
            self._commit(result)
            yield result

    def _commit_results(self, n: int) -> Iterator[ToolResultMessage]:
        """The result messages of the batch's ``n`` calls, in call order, each committed
        as it is handed out."""
        done = [o for o in self.outcomes if o is not None]
        self.batch = done
        self.summary.tool_calls += n
        for outcome in done:
            result = outcome.result
            if result.is_error:
                self.summary.tool_errors += 1
            message = ToolResultMessage(
                tool_call_id=outcome.call.id,
                tool_name=outcome.call.name,
                content=result.blocks,
                details=result.details,
                is_error=result.is_error,
            )
            self._commit(message)
            yield message

    def _note_event(self, call_id: str) -> ToolCallNote | None:
        """The ``tool_call_note`` of a finished call, when its ``before_tool_call`` gave one."""
        for outcome in self.outcomes:
            if outcome is not None and outcome.call.id == call_id and outcome.note is not None:
                return ToolCallNote(tool_call_id=call_id, tool_name=outcome.call.name, note=outcome.note)
        return None

    @staticmethod
    def _end_event(outcome: CallOutcome) -> ToolExecutionEnd:
        return ToolExecutionEnd(
            tool_call_id=outcome.call.id,
            tool_name=outcome.call.name,
            result=outcome.result,
            is_error=outcome.result.is_error,
            duration=outcome.duration,
        )


def _drop_unfinished_calls(message: AssistantMessage, unfinished: set[int]) -> None:
    """Remove the tool calls whose arguments were still streaming when the response was
    aborted (a ``toolcall_start`` without its ``toolcall_end``).

    Such a call never was a complete request: its arguments are a cut-off JSON fragment
    (kept as ``raw_arguments``, which the OpenAI adapters replay verbatim as the call's
    arguments, invalid JSON a strict server may refuse), and a provider may not even have
    sent its id yet. Keeping it with a result would record an action the model never finished
    asking for. OpenAI Chat streams end every call only when the response finishes, so
    there an abort drops every call of the response.
    """
    message.content = [
        b for i, b in enumerate(message.content) if not (i in unfinished and type(b) is ToolCall)
    ]


def _noop() -> None:
    return None


async def _no_progress(partial: Any) -> None:
    return None


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


class _Batch:
    """Schedules the calls of one assistant message and streams their events."""

    def __init__(
        self, run: _Run, message: AssistantMessage, calls: list[ToolCall], outcomes: list[CallOutcome | None]
    ) -> None:
        self.run_ = run
        self.message = message
        self.calls = calls
        self.outcomes = outcomes
        self.queue = _Inbox()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.signals: dict[int, AbortSignal] = {}
        self.stop_kind: dict[int, StopKind] = {}
        self.finished: set[int] = set()
        self.unsafe_running = False

    def _can_start(self, sequential: bool) -> bool:
        if not self.tasks:
            return True
        return not sequential and not self.unsafe_running and len(self.tasks) < self.run_.cfg.max_tool_concurrency

    async def run(self) -> AsyncGenerator[AgentEvent, None]:
        run, calls, n = self.run_, self.calls, len(self.calls)
        runner = run.runner
        if n == 1 and not run.signal.aborted:
            call = calls[0]
            tool = run.tools.get(call.name)
            if tool is None or not tool.reports_progress:
                yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
                outcome = await self._call_here(call)
                self.outcomes[0] = outcome
                runner.record(outcome)
                yield run._end_event(outcome)
                return
        sequential = [runner.is_sequential(c, run.tools) for c in calls]
        next_i = 0
        skip_rest = False
        interrupt = run.cfg.steering_during_tools == "interrupt"
        waiter = AbortWaiter(run.signal)
        try:
            while True:
                while next_i < n and not skip_rest and not run.signal.aborted and self._can_start(sequential[next_i]):
                    i = next_i
                    next_i += 1
                    call = calls[i]
                    yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
                    self._start(i, sequential[i])
                if not self.tasks:
                    break
                aborted = run.signal.aborted
                if not aborted:
                    waiter.active = True
                    try:
                        item = await self.queue.get()
                    except asyncio.CancelledError:
                        if not waiter.caused_cancel():
                            raise
                        aborted = True
                    finally:
                        waiter.active = False
                if aborted:
                    async for event in self._abort(next_i):
                        yield event
                    return
                if type(item) is ToolExecutionUpdate:
                    yield item
                    continue
                i, outcome = item
                self.tasks.pop(i, None)
                if sequential[i]:
                    self.unsafe_running = False
                self.outcomes[i] = outcome
                runner.record(outcome)
                yield run._end_event(outcome)
                if interrupt and not skip_rest and (next_i < n or self.tasks):
                    steering = await run._poll_steering()
                    if steering:
                        run.batch_steering = steering
                        skip_rest = True
                        self._interrupt_running()
            if skip_rest:
                for i in range(next_i, n):
                    call = calls[i]
                    yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
                    outcome = CallOutcome(call, stopped_result("skipped"), 0.0, False)
                    self.outcomes[i] = outcome
                    yield run._end_event(outcome)
            elif run.signal.aborted and next_i < n:
                async for event in self._abort(next_i):
                    yield event
        finally:
            waiter.close()
            for task in self.tasks.values():
                task.cancel()

    async def _call_here(self, call: ToolCall) -> CallOutcome:
        """Run the batch's only call in the loop's own task (it cannot report progress,
        so nothing has to stream meanwhile). An abort cancels it like a started task."""
        run = self.run_
        waiter = AbortWaiter(run.signal)
        started = time.monotonic()
        waiter.active = True
        try:
            outcome = await run.runner.run_call(call, run.tools, self.message, run.ctx, run.signal, _no_progress)
        except asyncio.CancelledError:
            if not waiter.caused_cancel():
                raise
            run.batch_aborted = True
            return CallOutcome(call, stopped_result("aborted"), time.monotonic() - started, False)
        finally:
            waiter.active = False
            waiter.close()
        if waiter.cancelled:
            run.batch_aborted = True  # the abort came as the call finished (or the call ignored it)
            await take_pending_cancel(waiter.caused_cancel)
        return outcome

    def _start(self, i: int, sequential: bool) -> None:
        run = self.run_
        call = self.calls[i]
        tool = run.tools.get(call.name)
        if tool is not None and tool.interrupt == "cancel":
            # Its own signal, so steering can cancel this call alone.
            signal = AbortSignal()
            remove = run.signal.add_callback(signal.abort)
            self.signals[i] = signal
        else:
            signal, remove = run.signal, _noop
        if sequential:
            self.unsafe_running = True
        self.tasks[i] = asyncio.create_task(self._call(i, call, signal, remove))

    async def _call(self, i: int, call: ToolCall, signal: AbortSignal, remove: Any) -> None:
        run = self.run_
        queue = self.queue
        started = time.monotonic()

        async def report(partial: Any) -> None:
            if i not in self.finished:
                queue.put(
                    ToolExecutionUpdate(tool_call_id=call.id, tool_name=call.name, args=call.arguments, partial=partial)
                )

        try:
            outcome = await run.runner.run_call(call, run.tools, self.message, run.ctx, signal, report)
        except asyncio.CancelledError:
            kind = self.stop_kind.get(i, "aborted")
            outcome = CallOutcome(call, stopped_result(kind), time.monotonic() - started, False)
        finally:
            self.finished.add(i)
            remove()
        queue.put((i, outcome))

    def _interrupt_running(self) -> None:
        run = self.run_
        for i, task in self.tasks.items():
            tool = run.tools.get(self.calls[i].name)
            if tool is not None and tool.interrupt == "cancel":
                self.stop_kind[i] = "interrupted"
                self.signals[i].abort("interrupted")
                task.cancel()

    async def _abort(self, next_i: int) -> AsyncGenerator[AgentEvent, None]:
        """Cancel running calls, give them a bounded time to stop, close every call."""
        run = self.run_
        run.batch_aborted = True
        running = dict(self.tasks)
        for i, task in running.items():
            self.stop_kind.setdefault(i, "aborted")
            task.cancel()
        if running:
            await asyncio.wait(running.values(), timeout=run.cfg.tool_abort_grace)
        while self.queue:
            item = self.queue.pop()
            if type(item) is ToolExecutionUpdate:
                continue
            i, outcome = item
            self.tasks.pop(i, None)
            self.outcomes[i] = outcome
            yield run._end_event(outcome)
        for i in list(self.tasks):
            self.tasks.pop(i)
            outcome = CallOutcome(self.calls[i], stopped_result("aborted"), 0.0, False)
            self.outcomes[i] = outcome
            yield run._end_event(outcome)
        for i in range(next_i, len(self.calls)):
            call = self.calls[i]
            yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
            outcome = CallOutcome(call, stopped_result("aborted"), 0.0, False)
            self.outcomes[i] = outcome
            yield run._end_event(outcome)
