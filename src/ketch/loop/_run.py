"""The stateless loop: :func:`run_loop` and :func:`continue_loop`.

Read :meth:`_Run.events` top to bottom: each turn commits what is queued, makes one
model call (transform, context manager, conversion, API key, then the stream, read
inline), runs the assistant message's tool calls as one :class:`~.execute.ToolBatch`,
emits ``turn_end``, lets ``prepare_next_turn`` change what comes next, checks the stop
controls and polls steering. When the model stops without tool calls and nothing is
queued, follow-ups are polled, then ``on_stop`` decides. Each step hands what it
produced to the next as a value. Every run ends with exactly one ``agent_end``; no
model, tool or hook failure escapes it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import NamedTuple

import msgspec

from ..llm._errors import exception_text
from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ..llm._messages import Usage
from ..llm._messages import UserMessage
from ..llm._messages import monotonic
from ..llm._model import Model
from ..llm._model import PreparesMessages
from ..llm._model import Request
from ..llm._model import StreamOptions
from ..llm._model import ToolSpec
from ..llm._signal import AbortSignal
from ..llm._stream import MessageBuilder
from ..llm._stream import StreamDone
from ..llm._stream import StreamError
from ..llm._stream import StreamEvent
from ..llm._stream import StreamStart
from ..llm._stream import TextDelta
from ..llm._stream import TextEnd
from ..llm._stream import TextStart
from ..llm._stream import ThinkingDelta
from ..llm._stream import ThinkingEnd
from ..llm._stream import ThinkingStart
from ..llm._stream import ToolCallDelta
from ..llm._stream import ToolCallEnd
from ..llm._stream import ToolCallStart
from ..llm._stream import is_closable
from ..llm._tokens import ContextUsage
from ..llm._tokens import estimate_message_tokens
from ._config import ContextRequest
from ._config import Conversation
from ._config import LoopConfig
from ._config import Projection
from ._config import StopInfo
from ._config import TurnInfo
from ._config import UsageLimits
from ._events import AgentEnd
from ._events import AgentEvent
from ._events import AgentStart
from ._events import CompactionEnd
from ._events import EndReason
from ._events import MessageEnd
from ._events import MessageStart
from ._events import MessageUpdate
from ._events import Retry
from ._events import RunResult
from ._events import RunSummary
from ._events import ToolCallNote
from ._events import ToolExecutionEnd
from ._events import ToolExecutionStart
from ._events import TurnEnd
from ._events import TurnStart
from ._execute import BatchResult
from ._execute import CallOutcome
from ._execute import ToolBatch
from ._execute import ToolRunner
from ._execute import maybe_await
from ._execute import stopped_result
from ._guardrails import Guardrails
from ._guardrails import GuardrailTrip
from ._guardrails import InputCheck
from ._guardrails import InputGate
from ._guardrails import OutputCheck
from ._guardrails import reject_message
from ._repair import SILENT_ABORT
from ._repair import default_convert_to_llm
from ._repair import repair_messages
from ._state import Decision
from ._state import PendingCall
from ._state import RunState
from ._state import config_fingerprint
from ._tool import Tool
from ._tool import ToolResult

if TYPE_CHECKING:
    from ._output import OutputRun

log = logging.getLogger("ketch.loop")


ContextReason = Literal["request", "overflow"]

# Stream events that only change the partial message; a tool call's start and end are
# also tracked, so an aborted message can drop the call whose arguments were cut off.
_UPDATE_EVENTS: frozenset[type] = frozenset(
    {TextStart, TextDelta, TextEnd, ThinkingStart, ThinkingDelta, ThinkingEnd, ToolCallDelta}
)


class _Opened(NamedTuple):
    """The start of one model call: its ``stream``, or (``stream`` None) the assistant
    message that ends the turn without one (aborted before the call, or the request
    could not be made)."""

    stream: AsyncIterator[StreamEvent] | None
    failed: AssistantMessage | None = None


async def _stops(predicate: Any, info: TurnInfo) -> bool:
    """A ``stop_when`` predicate's answer; one that raises means "do not stop" (logged)."""
    try:
        return bool(await maybe_await(predicate(info)))
    except Exception:
        log.exception("stop_when predicate %r failed; not stopping", predicate)
        return False


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

    def stream_output(self) -> AsyncIterator[Any]:
        """Iterate the run, yielding validated partial values of its ``output_type`` as the
        answer's JSON streams, each different from the one before; the last one is
        :attr:`RunResult.output` when the run ended with an accepted answer. Use instead of
        iterating the events; ``await result()`` afterwards. Raises ``ValueError`` for a
        run without ``output_type``."""
        output = self._run.output
        if output is None:
            raise ValueError("stream_output() needs a run with an output_type")
        from ._output import PartialOutput
        from ._output import stream_partials

        async def final() -> Any:
            await self.result()
            return output.value

        return stream_partials(self._gen, PartialOutput(output), final)

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._run.signal

    @property
    def messages(self) -> list[Message]:
        """The messages the run has committed so far, in order (at the end, the same list
        as :attr:`RunResult.messages`); also valid for a run closed before its end."""
        return self._run.new_messages

    @property
    def uncommitted(self) -> list[Message]:
        """The queued messages the run took and has not committed, in the order taken
        (at the end, :attr:`RunResult.uncommitted`); also valid for a run closed before
        its end."""
        return self._run.uncommitted


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


async def llm_messages(messages: list[Message], config: LoopConfig[Any], model: Model) -> list[Message]:
    """``messages`` as a request to ``model`` would carry them: converted
    (``config.convert_to_llm``, else :func:`default_convert_to_llm`), then repaired
    unless the model prepares its messages itself."""
    if config.convert_to_llm is not None:
        llm: list[Message] = await maybe_await(config.convert_to_llm(messages))
    else:
        llm = default_convert_to_llm(messages)
    return repair_messages(llm) if _repairs_for(model) else llm


def resume_loop(
    state: RunState,
    conversation: Conversation,
    config: LoopConfig[Any],
    signal: AbortSignal | None = None,
    *,
    decisions: dict[str, Decision] | None = None,
) -> RunStream:
    """Continue a run paused for approval (``end_reason == "approval_required"``).

    ``decisions`` maps the id of every paused call that asked for approval to
    :func:`approve`, :func:`deny` or :func:`edit`. ``conversation.messages`` is set to the
    state's transcript; the system prompt, tools and model must be those the run paused
    with. Raises ``ValueError`` at once for a missing or unknown decision or another
    configuration.
    """
    decisions = dict(decisions or {})
    check_resume(state, decisions, config.model, conversation.system_prompt, conversation.tools)
    conversation.messages[:] = state.messages
    run = _Run(conversation, config, signal)
    run.runner.decisions = decisions
    run.resumed = state
    run.summary.turns = state.turns
    run.summary.usage.add(state.usage)
    if state.run_messages:
        run.new_messages.extend(state.messages[-state.run_messages:])
    return RunStream(run, run.events(None))


def check_resume(
    state: RunState, decisions: dict[str, Decision], model: Model, system_prompt: str, tools: Sequence[Tool]
) -> None:
    """Raise ``ValueError`` unless ``state`` can resume with these decisions and this configuration."""
    state.message  # noqa: B018  (raises when the transcript does not end as a paused one)
    ids = {p.tool_call_id: p for p in state.pending}
    for call_id in decisions:
        if call_id not in ids:
            raise ValueError(f"Unknown call id {call_id!r} in decisions; the paused calls are {sorted(ids)}")
    for p in state.pending:
        if p.needs_decision and p.tool_call_id not in decisions:
            raise ValueError(
                f"No decision for paused call {p.tool_call_id!r} ({p.tool_name}); "
                f"pass decisions={{{p.tool_call_id!r}: approve() | deny(reason) | edit(args)}}"
            )
    now = config_fingerprint(model, system_prompt, tools)
    if state.fingerprint and now != state.fingerprint:
        raise ValueError(
            f"This RunState was paused with another model, system prompt or tools (fingerprint "
            f"{state.fingerprint}, now {now}); resume it with the configuration it paused with"
        )


class _Run:
    """State of one run. Only :meth:`events` is used from outside.

    What the run accumulates lives here (the committed ``new_messages``, the ``notes``,
    the ``summary``, the queued messages taken but not yet committed); what one step
    produces for the next is passed as a value.
    """

    def __init__(self, conversation: Conversation, config: LoopConfig[Any], signal: AbortSignal | None) -> None:
        self.conversation = conversation
        self.cfg = config
        self.signal = signal if signal is not None else AbortSignal()
        self.model = config.model
        self.repair = _repairs_for(self.model)
        self.thinking = config.thinking
        self.new_messages: list[Message] = []
        self.uncommitted: list[Message] = []
        self.notes: list[ToolCallNote] = []
        self.summary = RunSummary()
        self.result: RunResult | None = None
        self.runner = ToolRunner(config)
        self.turn = 0
        self.resumed: RunState | None = None  # set by resume_loop
        self.state: RunState | None = None  # set when the run pauses for approval
        self.options = config.options
        self.output: OutputRun | None = None  # typed output (LoopConfig.output_type)
        if config.output_type is not None:
            from ._output import OutputRun  # imported with the first typed-output run

            self.output = OutputRun(
                config.output_type,
                config.output_mode,
                config.output_retries,
                config.output_validators,
                config.model,
                [t.name for t in conversation.tools],
            )
            self.options = self.output.options(config.options)
        self.guards = Guardrails.of(config.guardrails)
        self.runner.guards = self.guards
        self.gate: InputGate | None = None  # parallel input guardrails of the first call
        self._set_tools(conversation.tools)

    def _set_tools(self, tools: Sequence[Tool]) -> None:
        self.conversation.tools = tools
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.tool_specs: list[ToolSpec] = [t.spec for t in tools]
        if self.output is not None:
            self.tool_specs = self.output.tool_specs(self.tool_specs)

    def _end(self, reason: EndReason, error: str | None = None) -> None:
        self.summary.end_reason = reason
        self.summary.error = error

    def _trip(self, trip: GuardrailTrip) -> None:
        self.summary.guardrail = trip
        self._end("guardrail", trip.text)

    async def _guard_output(self, message: AssistantMessage) -> list[Message] | None:
        """The output guardrails on the answer the run would end with: what to send back
        (empty when they pass, else the reject message), or None when one tripped (the run
        ended)."""
        assert self.guards is not None
        output = self.output.output if self.output is not None else None
        check = OutputCheck(message, self.conversation, self.cfg.deps, output)
        verdict = await self.guards.check(self.guards.output, check)
        if verdict is None:
            return []
        if self.output is not None:
            self.output.discard()
        if isinstance(verdict, GuardrailTrip):
            self._trip(verdict)
            return None
        return [reject_message(verdict)]

    def _commit(self, message: Message) -> None:
        self.conversation.messages.append(message)
        self.new_messages.append(message)

    def _commit_pending(self, message: Message) -> None:
        """Commit a message about to start a turn; a queued one is no longer uncommitted."""
        self._commit(message)
        taken = self.uncommitted
        for i, m in enumerate(taken):
            if m is message:
                del taken[i]
                break

    async def events(self, prompts: list[Message] | None) -> AsyncGenerator[AgentEvent, None]:
        """The loop itself: all events of the run, ending with exactly one ``agent_end``.

        A ``return`` ends the run; the ``finally`` clause reports an escaped exception as
        an error message and emits ``agent_end`` (a cancelled run re-raises after it), unless
        the consumer closed the stream.
        """
        started = monotonic()
        ending = True
        failure: Exception | None = None
        phase = self.cfg.phase
        if phase is not None:
            phase._set("starting", 0)
        yield AgentStart()
        try:
            cfg = self.cfg
            signal = self.signal
            resumed = self.resumed
            self.turn = resumed.turn if resumed is not None else 1
            if cfg.usage_limits is not None and resumed is None:
                reached = self._limit_reached(cfg.usage_limits, prompts or ())
                if reached is not None:  # no turn: the prompts are committed, nothing is sent
                    for prompt in prompts or ():
                        self._commit(prompt)
                        yield MessageStart(message=prompt)
                        yield MessageEnd(message=prompt)
                    self._end("usage_limit", reached)
                    return
            rejected: str | None = None
            guards = self.guards
            if guards is not None and prompts and (guards.input or guards.parallel):
                check = InputCheck(prompts, self.conversation, cfg.deps)
                verdict = await guards.check(guards.input, check)
                if isinstance(verdict, GuardrailTrip):  # nothing is sent; the prompts are kept
                    for prompt in prompts:
                        self._commit(prompt)
                        yield MessageStart(message=prompt)
                        yield MessageEnd(message=prompt)
                    self._trip(verdict)
                    return
                rejected = verdict
                if guards.parallel:
                    self.gate = InputGate(guards, check, signal)
            if phase is not None:
                phase._set("llm_in_flight", self.turn)
            yield TurnStart(turn=self.turn)
            for prompt in prompts or ():
                self._commit(prompt)
                yield MessageStart(message=prompt)
                yield MessageEnd(message=prompt)
            if rejected is not None:
                note = reject_message(rejected)
                self._commit(note)
                yield MessageStart(message=note)
                yield MessageEnd(message=note)
            pending: list[Message] = (
                [] if cfg.skip_initial_steering_poll or resumed is not None else await self._poll_steering()
            )
            recoveries = 0
            first = True
            while True:
                while True:
                    if resumed is not None:
                        # The paused turn goes on: its calls still to run, after those that ran.
                        message, prior = resumed.message, resumed.completed
                        waiting = {p.tool_call_id for p in resumed.pending}
                        calls = [c for c in message.tool_calls if c.id in waiting]
                        resumed = None
                        first = False
                    else:
                        if not first:
                            stop = self._stop_before_call()
                            if stop is not None:
                                self._end(stop, self.summary.error)  # set for a usage limit
                                return
                            self.turn += 1
                            if phase is not None:
                                phase._set("llm_in_flight", self.turn)
                            yield TurnStart(turn=self.turn)
                        first = False
                        for queued in pending:
                            if signal.aborted:
                                break  # the rest stays uncommitted: its owner puts it back
                            self._commit_pending(queued)
                            yield MessageStart(message=queued)
                            yield MessageEnd(message=queued)
                        pending = []
                        added = self.conversation.pending_context
                        if added and not signal.aborted:
                            for context in added:
                                self._commit(context)
                                yield MessageStart(message=context)
                                yield MessageEnd(message=context)
                            added.clear()

                        # -- one model call; on a context overflow, compact once and call once more
                        reason: ContextReason = "request"
                        while True:
                            if (
                                cfg.transform_context is None
                                and cfg.context_manager is None
                                and cfg.convert_to_llm is None
                                and cfg.get_api_key is None
                                and cfg.usage_limits is None
                                and self.gate is None
                                and not signal.aborted
                            ):
                                # Nothing to await before the call: no generator, no hand-off.
                                failed: AssistantMessage | None = None
                                try:
                                    stream = self.model.stream(*self._plain_request())
                                except Exception as exc:
                                    stream, failed = None, self._error_message(exception_text(exc))
                            else:
                                opened = _Opened(None)
                                async for item in self._open(reason):
                                    match item:
                                        case _Opened():
                                            opened = item
                                        case _:
                                            yield item
                                stream, failed = opened
                            gate = self.gate
                            if gate is not None:
                                if stream is not None:
                                    stream = gate.wrap(stream)
                                else:
                                    gate.cancel()
                                    self.gate = gate = None
                            if stream is None:
                                assert failed is not None
                                message = failed
                                if message.stop_reason == "aborted" and signal.reason == SILENT_ABORT:
                                    message.error_kind = SILENT_ABORT
                                self._commit(message)
                                yield MessageStart(message=message)
                                yield MessageEnd(message=message)
                                break
                            # The stream, read inline (its chunks are the hot path).
                            final: AssistantMessage | None = None
                            partial: AssistantMessage | None = None
                            broke: Exception | None = None
                            unfinished: set[int] = set()  # indexes of tool calls still streaming
                            try:
                                async for update in stream:
                                    # Dispatch on the exact type: a class pattern (``case X():``)
                                    # costs an isinstance call per case tried, on every chunk.
                                    kind = type(update)
                                    if kind in _UPDATE_EVENTS:  # the bulk of a stream: one lookup
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
                                    elif kind is Retry:
                                        assert type(update) is Retry
                                        if update.discard_partial:
                                            partial = None
                                            unfinished.clear()
                                        yield update
                            except Exception as exc:
                                broke = exc
                            finally:
                                if is_closable(stream):
                                    await stream.aclose()
                            if gate is not None:
                                self.gate = None
                                stopped = gate.outcome if broke is None else None
                                if isinstance(stopped, GuardrailTrip):  # the call is discarded
                                    self._trip(stopped)
                                    return
                                if stopped is not None:  # a reject: discard the call, tell the model, call again
                                    note = reject_message(stopped)
                                    self._commit(note)
                                    yield MessageStart(message=note)
                                    yield MessageEnd(message=note)
                                    continue
                            message = self._stream_result(final, partial, broke)
                            if message.stop_reason == "aborted":
                                if unfinished and message is partial:
                                    _drop_unfinished_calls(message, unfinished)
                                if signal.reason == SILENT_ABORT:
                                    message.error_kind = SILENT_ABORT  # no interruption note for the model
                            if self._compact_and_retry(message, reason):
                                reason = "overflow"
                                yield Retry(
                                    attempt=1,
                                    max_attempts=2,
                                    delay=0.0,
                                    error_kind="context_overflow",
                                    error_message=message.error_message or "context overflow",
                                    discard_partial=True,
                                )
                                continue
                            if partial is not message:
                                yield MessageStart(message=message)
                            self._commit(message)
                            yield MessageEnd(message=message)
                            break

                        self.summary.turns += 1
                        self.summary.usage.add(message.usage)
                        if phase is not None:
                            phase._set("turn_finished")
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
                        prior = None
                        if calls and self.output is not None and self.output.tool_name is not None:
                            answer = await self.output.check_calls(message)
                            if answer is not None:  # the response called the output tool
                                for result in answer.results:
                                    self._commit(result)
                                    yield MessageStart(message=result)
                                    yield MessageEnd(message=result)
                                yield TurnEnd(
                                    turn=self.turn, message=message, tool_results=answer.results, context=self._usage()
                                )
                                if answer.end == ("stop", None) and self.guards is not None and self.guards.output:
                                    retry = await self._guard_output(message)
                                    if retry is None:
                                        return
                                    if retry:
                                        pending = retry
                                        continue
                                if answer.end is not None:
                                    self._end(*answer.end)
                                    return
                                pending = await self._poll_steering()
                                continue

                    # -- the message's tool calls, as one batch
                    results: list[ToolResultMessage] = []
                    batch: BatchResult | None = None
                    limits = cfg.usage_limits
                    if (
                        calls
                        and limits is not None
                        and limits.tool_calls is not None
                        and self.summary.tool_calls + len(calls) > limits.tool_calls
                    ):
                        # Not run: each call gets an error result, and the run ends.
                        text = tool_limit_text(limits.tool_calls, self.summary.tool_calls, len(calls))
                        refused = [CallOutcome(c, ToolResult.error(text), 0.0, False) for c in calls]
                        for outcome in refused:
                            call = outcome.call
                            yield ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.args)
                            yield ToolExecutionEnd(
                                tool_call_id=call.id,
                                tool_name=call.name,
                                result=outcome.result,
                                is_error=True,
                                duration=0.0,
                            )
                        for result in self._commit_outcomes(refused):
                            results.append(result)
                            yield MessageStart(message=result)
                            yield MessageEnd(message=result)
                        yield TurnEnd(turn=self.turn, message=message, tool_results=results, context=self._usage())
                        self._end("usage_limit", text)
                        return
                    if calls:
                        if phase is not None:
                            phase._set("tool_executing")
                        tools = ToolBatch(
                            self.runner, self.tools, self.conversation, message, calls, signal, self._poll_steering
                        )
                        async for event in tools.events():
                            yield event
                        batch = tools.result()
                        self.notes.extend(batch.notes)
                        self._add_tool_usage(batch.outcomes)
                        if prior or batch.pending is not None:  # a resumed or a pausing batch
                            done = [_result_message(o) for o in batch.outcomes]
                            if prior:
                                done = _in_call_order(message, prior + done)
                            if batch.pending is not None:
                                self._pause(message, batch.pending, done)
                                return
                            committed = self._commit_results(done)
                        else:
                            committed = self._commit_outcomes(batch.outcomes)
                        for result in committed:
                            results.append(result)
                            yield MessageStart(message=result)
                            yield MessageEnd(message=result)
                    yield TurnEnd(turn=self.turn, message=message, tool_results=results, context=self._usage())
                    if (batch is not None and batch.aborted) or signal.aborted:
                        self._end("aborted", "aborted")
                        return
                    if batch is not None and batch.tripped is not None:
                        self._trip(batch.tripped)
                        return
                    if batch is not None and batch.denied is not None:
                        self._end("denied", batch.denied)
                        return

                    if cfg.prepare_next_turn is not None or cfg.stop_when:
                        info = TurnInfo(
                            self.turn, message, results, self.conversation, self.new_messages, self.summary.usage
                        )
                        if cfg.prepare_next_turn is not None:
                            await self._prepare_next_turn(info)
                        for predicate in cfg.stop_when:
                            if await _stops(predicate, info):
                                self._end("stop")
                                return

                    # -- what comes next: steering, more tool turns, a length recovery
                    pending = (batch.steering if batch is not None else None) or await self._poll_steering()
                    if batch is not None and not batch.stop:
                        continue
                    if message.stop_reason == "length" and not calls and recoveries < cfg.length_recoveries:
                        recoveries += 1
                        pending.append(UserMessage(content=cfg.length_recovery_prompt))
                        continue
                    if pending:
                        continue
                    break

                # -- the model would stop: follow-ups, then on_stop
                if signal.aborted:
                    self._end("aborted", "aborted")
                    return
                follow_ups = await self._poll(cfg.get_follow_up_messages)
                if follow_ups:
                    pending = follow_ups
                    continue
                if self.output is not None and not message.tool_calls:
                    answer = await self.output.check_text(message)
                    if answer.end is not None:
                        self._end(*answer.end)
                        return
                    if answer.retry is not None:
                        pending = [answer.retry]
                        continue
                if guards is not None and guards.output and not message.tool_calls:
                    retry = await self._guard_output(message)
                    if retry is None:
                        return
                    if retry:
                        pending = retry
                        continue
                if cfg.on_stop is not None and not message.tool_calls:
                    decision = await maybe_await(cfg.on_stop(StopInfo(self.turn, message, self.conversation)))
                    if decision is not None and decision.action == "escalate":
                        self._end("stop_guard", decision.reason or "on_stop escalated")
                        return
                    injected = decision.injected() if decision is not None else None
                    if injected is not None:
                        pending = [injected]
                        continue
                self._end("stop_sequence" if message.stop_reason == "stop_sequence" else "stop")
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
            if self.gate is not None:
                self.gate.cancel()
                self.gate = None
            if ending:
                if failure is not None:
                    error = self._error_message(exception_text(failure))
                    self._commit(error)
                    yield MessageStart(message=error)
                    yield MessageEnd(message=error)
                    self._end("error", error.error_message)
                yield self._agent_end(started)

    def _agent_end(self, started: float) -> AgentEnd:
        self.summary.duration = monotonic() - started
        if self.cfg.phase is not None:
            self.cfg.phase._set("idle")
        self.result = RunResult(
            messages=self.new_messages,
            summary=self.summary,
            tool_call_notes=self.notes,
            uncommitted=list(self.uncommitted),
            state=self.state,
            output=self.output.output if self.output is not None else None,
        )
        return AgentEnd(messages=self.new_messages, summary=self.summary, state=self.state)

    def _error_message(self, text: str, kind: str = "unknown") -> AssistantMessage:
        m = self.model
        return AssistantMessage(
            provider=m.provider, api=m.api, model=m.id, stop_reason="error", error_message=text, error_kind=kind
        )

    def _usage(self) -> ContextUsage:
        return self.conversation.meter.measure(self.conversation.messages, self.model.context_window)

    def _stop_before_call(self) -> EndReason | None:
        cfg = self.cfg
        if self.signal.aborted:
            return "aborted"
        if cfg.max_turns is not None and self.summary.turns >= cfg.max_turns:
            return "max_turns"
        if cfg.max_budget_usd is not None and self.summary.usage.cost.total >= cfg.max_budget_usd:
            return "max_budget"
        if cfg.usage_limits is not None:
            reached = self._limit_reached(cfg.usage_limits, ())
            if reached is not None:
                self.summary.error = reached
                return "usage_limit"
        return None

    def _limit_reached(self, limits: UsageLimits, prompts: Sequence[Message]) -> str | None:
        """The usage limit the next model call would pass (its message), or None.
        ``prompts`` are messages about to be committed before it."""
        summary = self.summary
        used = summary.usage
        if limits.requests is not None and summary.turns >= limits.requests:
            return f"Usage limit reached: {summary.turns} requests, the limit (requests) is {limits.requests}"
        if limits.output_tokens is not None and used.output >= limits.output_tokens:
            return (
                f"Usage limit reached: {used.output:,} output tokens, the limit (output_tokens) is "
                f"{limits.output_tokens:,}"
            )
        if limits.total_tokens is None and limits.input_tokens is None and limits.request_input_tokens is None:
            return None
        conversation = self.conversation
        predicted = conversation.meter.measure(conversation.messages, self.model.context_window).tokens
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

    def _max_tokens(self, options: StreamOptions) -> int | None:
        """The request's ``max_tokens`` under the output limits."""
        limits = self.cfg.usage_limits
        cap = options.max_tokens
        if limits is None:
            return cap
        for limit in (
            limits.request_output_tokens,
            None if limits.output_tokens is None else limits.output_tokens - self.summary.usage.output,
        ):
            if limit is not None:
                cap = limit if cap is None else min(cap, limit)
        return cap

    async def _poll(self, getter: Any) -> list[Message]:
        """Take queued messages from ``getter`` (recorded as uncommitted until committed);
        none once the run is aborted (an aborted run leaves its queues alone)."""
        if getter is None or self.signal.aborted:
            return []
        got = getter()
        if inspect.isawaitable(got):
            got = await got
        if not got:
            return []
        taken = list(got)
        self.uncommitted.extend(taken)
        return taken

    async def _poll_steering(self) -> list[Message]:
        return await self._poll(self.cfg.get_steering_messages)

    async def _prepare_next_turn(self, info: TurnInfo) -> None:
        assert self.cfg.prepare_next_turn is not None
        nxt = await maybe_await(self.cfg.prepare_next_turn(info))
        if nxt is None:
            return
        if nxt.model is not None:
            self.model = nxt.model
            self.repair = _repairs_for(nxt.model)
        if nxt.thinking is not None:
            self.thinking = nxt.thinking
        if nxt.tools is not None:
            self._set_tools(nxt.tools)
        if nxt.system_prompt is not None:
            self.conversation.system_prompt = nxt.system_prompt
        if nxt.messages is not None:
            self.conversation.messages[:] = nxt.messages

    # -- one model call -----------------------------------------------------------------
    async def _open(self, reason: ContextReason) -> AsyncGenerator[AgentEvent | _Opened, None]:
        """Start one model call: transform and manage the context (yielding the context
        manager's events), then request the stream. Ends by yielding the :class:`_Opened`
        call: its stream, or the message ending the turn when the run was aborted before
        the call or the request could not be made. (With nothing to run before the call,
        :meth:`events` makes it inline.)"""
        if self.signal.aborted:
            # Aborted before the call: end the turn as the model would, without calling it.
            m = self.model
            yield _Opened(None, MessageBuilder(provider=m.provider, api=m.api, model=m.id).aborted().error)
            return
        try:
            messages = self.conversation.messages
            if self.cfg.transform_context is not None:
                messages = await maybe_await(self.cfg.transform_context(messages, self.signal))
            if self.cfg.context_manager is not None:
                async for item in self._manage_context(reason, messages):
                    match item:
                        case list():
                            messages = item
                        case _:
                            yield item
            request, options = await self._request(messages)
            if self.gate is not None:
                options = msgspec.structs.replace(options, signal=self.gate.signal)
            opened = _Opened(self.model.stream(request, options))
        except Exception as exc:
            opened = _Opened(None, self._error_message(exception_text(exc)))
        yield opened

    async def _manage_context(self, reason: ContextReason, messages: list[Message]) -> AsyncGenerator[Any, None]:
        """Run the context manager; yields its events, then the messages to send (a list)."""
        cm = self.cfg.context_manager
        assert cm is not None
        conversation = self.conversation
        request = ContextRequest(reason, self.model, self.signal, conversation.system_prompt)
        projection: Projection | None = None
        async for item in cm.manage(messages, request):
            match item:
                case Projection():
                    projection = item
                case CompactionEnd():
                    # The summary call is part of what the run used (and of its budget).
                    usage = self.summary.usage
                    usage.add(item.usage)
                    if not item.usage.cost.total:  # a manager that reports only the cost
                        usage.cost.total += item.cost
                    yield item
                case _:
                    yield item
        if projection is None:
            yield messages
            return
        if projection.commit is not None:
            conversation.messages[:] = projection.commit
        yield conversation.messages if projection.messages is projection.commit else projection.messages

    async def _request(self, messages: list[Message]) -> tuple[Request, StreamOptions]:
        """The request for ``messages``: converted, repaired, with this turn's options and key."""
        cfg = self.cfg
        conversation = self.conversation
        if cfg.convert_to_llm is None and messages is conversation.messages:
            llm = conversation.view.build(messages, self.repair)
        else:
            llm = await llm_messages(messages, cfg, self.model)
        options = self.options
        api_key = await maybe_await(cfg.get_api_key(self.model.provider)) if cfg.get_api_key is not None else None
        options = msgspec.structs.replace(
            options,
            thinking=self.thinking,
            signal=self.signal,
            api_key=api_key or options.api_key,
            max_tokens=self._max_tokens(options),
        )
        system = conversation.system_prompt if self.output is None else self.output.system_prompt(conversation.system_prompt)
        return Request.of(system, llm, self.tool_specs), options

    def _plain_request(self) -> tuple[Request, StreamOptions]:
        """:meth:`_request` for the transcript itself when no ``convert_to_llm`` and no
        ``get_api_key`` are configured."""
        conversation = self.conversation
        options = msgspec.structs.replace(self.options, thinking=self.thinking, signal=self.signal)
        messages = conversation.view.build(conversation.messages, self.repair)
        system = conversation.system_prompt if self.output is None else self.output.system_prompt(conversation.system_prompt)
        return Request.of(system, messages, self.tool_specs), options

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

    # -- tool results -------------------------------------------------------------------
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

    def _add_tool_usage(self, outcomes: list[CallOutcome]) -> None:
        """Add what the batch's tools spent on models (``ToolResult.usage``) to the run's
        usage, itemised in ``summary.tool_usage``."""
        for outcome in outcomes:
            spent = outcome.result.usage
            if not spent:
                continue
            items = self.summary.tool_usage
            for key, usage in spent.items():
                self.summary.usage.add(usage)
                item = items.get(key)
                if item is None:
                    items[key] = item = Usage()
                item.add(usage)

    def _commit_outcomes(self, outcomes: list[CallOutcome]) -> Iterator[ToolResultMessage]:
        """The result messages of a batch's outcomes, in call order, each committed as it
        is handed out."""
        self.summary.tool_calls += len(outcomes)
        for outcome in outcomes:
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

    def _commit_results(self, results: list[ToolResultMessage]) -> Iterator[ToolResultMessage]:
        """A batch's result messages, in call order, each committed as it is handed out."""
        self.summary.tool_calls += len(results)
        for message in results:
            if message.is_error:
                self.summary.tool_errors += 1
            self._commit(message)
            yield message

    def _pause(self, message: AssistantMessage, pending: list[PendingCall], done: list[ToolResultMessage]) -> None:
        """End the run waiting for approval of ``message``'s ``pending`` calls."""
        conversation = self.conversation
        self.state = RunState(
            messages=list(conversation.messages),
            pending=pending,
            completed=done,
            run_messages=len(self.new_messages),
            turn=self.turn,
            turns=self.summary.turns,
            usage=msgspec.structs.replace(self.summary.usage, cost=msgspec.structs.replace(self.summary.usage.cost)),
            fingerprint=config_fingerprint(self.model, conversation.system_prompt, conversation.tools),
        )
        self._end("approval_required")


def tool_limit_text(limit: int, used: int, asked: int) -> str:
    """The result text of calls not run because they would pass the tool-call limit."""
    return (
        f"Usage limit: {asked} tool call(s) not run; {used} of the run's {limit} allowed tool calls "
        "(tool_calls) were used already"
    )


def _repairs_for(model: Model) -> bool:
    """Whether the loop pairs tool calls and results for ``model`` (it does unless the
    model prepares its messages itself)."""
    return not (isinstance(model, PreparesMessages) and model.prepares_messages)


def _result_message(outcome: CallOutcome) -> ToolResultMessage:
    result = outcome.result
    return ToolResultMessage(
        tool_call_id=outcome.call.id,
        tool_name=outcome.call.name,
        content=result.blocks,
        details=result.details,
        is_error=result.is_error,
    )


def _in_call_order(message: AssistantMessage, results: list[ToolResultMessage]) -> list[ToolResultMessage]:
    order = {c.id: i for i, c in enumerate(message.tool_calls)}
    return sorted(results, key=lambda r: order.get(r.tool_call_id, len(order)))


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
