"""One model call of a turn: :class:`ModelCall`.

Before the call: ``transform_context``, the context manager (its compaction events are
passed on), the conversion to model messages, the API key and the output limits; then the
request, and the stream, read in :meth:`ModelCall.events` itself (its chunks are the hot
path: no further hand-off per chunk). A context overflow is compacted away once and the
call made once more. With none of those hooks configured the request is built without
awaiting anything.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import Literal

import msgspec

from ..llm._errors import exception_text
from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolCall
from ..llm._model import Model
from ..llm._model import Request
from ..llm._model import StreamOptions
from ..llm._stream import HostedToolBlock
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
from ._config import LoopConfig
from ._events import AgentEvent
from ._events import CompactionEnd
from ._events import MessageStart
from ._events import MessageUpdate
from ._events import Retry
from ._guardrails import GuardrailTrip
from ._guardrails import reject_message
from ._guardrails import tripped
from ._hooks import ContextRequest
from ._hooks import Projection
from ._hooks import maybe_await
from ._next import NO_EVENTS
from ._next import End
from ._repair import SILENT_ABORT
from ._repair import default_convert_to_llm
from ._repair import repair_messages
from ._runtime import Run
from ._runtime import repairs_for

ContextReason = Literal["request", "overflow"]

# Stream events that only change the partial message (read by the loop; a tool call's
# start and end are also tracked, so an aborted message can drop the call whose arguments
# were cut off).
UPDATE_EVENTS: frozenset[type] = frozenset(
    {TextStart, TextDelta, TextEnd, ThinkingStart, ThinkingDelta, ThinkingEnd, ToolCallDelta, HostedToolBlock}
)


async def llm_messages(messages: list[Message], config: LoopConfig[Any], model: Model) -> list[Message]:
    """``messages`` as a request to ``model`` would carry them: converted
    (``config.convert_to_llm``, else :func:`default_convert_to_llm`), then repaired
    unless the model prepares its messages itself."""
    if config.convert_to_llm is not None:
        llm: list[Message] = await maybe_await(config.convert_to_llm(messages))
    else:
        llm = default_convert_to_llm(messages)
    return repair_messages(llm) if repairs_for(model) else llm


class ModelCall:
    """One model call of a turn, made by the loop, which iterates its stream itself (no
    generator between the model and the run's consumer: the chunks are the hot path)::

        call = ModelCall(run)
        while call.outcome is None:  # once more after an overflow or a parallel guardrail's reject
            if call.prepares:
                async for event in call.prepare(): ...  # the context manager's events
            stream = call.open()
            async for update in stream: ...  # text and thinking chunks: message_update, else call.read(update)
            for event in call.close(): ...
        outcome = call.result()

    :meth:`read` turns the other stream events into ``message_start``, ``message_update``
    and the stream's own ``retry``, and keeps the partial and the final message;
    :meth:`close` yields the message's end, or a ``retry`` before an overflow is compacted
    away, or a parallel guardrail's reject note. The result is the turn's assistant
    message (committed, and counted as a turn), or the :class:`End` of the run when a
    parallel input guardrail tripped (the call is discarded).
    """

    __slots__ = (
        "_failed",
        "_messages",
        "_reason",
        "_stream",
        "error",
        "final",
        "outcome",
        "partial",
        "prepares",
        "run",
        "unfinished",
    )

    def __init__(self, run: Run) -> None:
        self.run = run
        self.outcome: AssistantMessage | End | None = None
        self._reason: ContextReason = "request"
        # What the steps before the stream hand on (set there): the stream, or the message
        # ending the turn without one; what the context manager projected.
        self._stream: AsyncIterator[StreamEvent] | None
        self._failed: AssistantMessage | None
        self._messages: list[Message]
        # What the stream gave (set by open): its partial and final message, what it
        # raised (set by the loop), the indexes of the tool calls still streaming.
        self.partial: AssistantMessage | None
        self.final: AssistantMessage | None
        self.error: Exception | None
        self.unfinished: set[int]
        # Whether something must be awaited before the call (:meth:`prepare`).
        self.prepares = not run.plain or run.gate is not None or run.signal.aborted

    def open(self) -> AsyncIterator[StreamEvent]:
        """The stream to read (through a parallel input guardrail's gate); none when the
        call could not be made."""
        run = self.run
        self.partial = self.final = self.error = None
        self.unfinished = set()
        if not self.prepares:
            # Nothing to await before the call: the request is built here.
            self._stream = None
            try:
                conversation = run.conversation
                messages = conversation.view.build(conversation.messages, run.repair)
                system = conversation.system_prompt if run.plain_system else run.system()
                self._stream = run.model.stream(Request.of(system, messages, run.tool_specs), run.plain_options)
            except Exception as exc:
                self._failed = run.error_message(exception_text(exc))
        stream = self._stream
        gate = run.gate
        if gate is not None:
            if stream is not None:
                return gate.wrap(stream)
            gate.cancel()
            run.gate = None
        return stream if stream is not None else NO_EVENTS

    def read(self, update: StreamEvent) -> AgentEvent | None:
        """The event a stream event other than a text or thinking chunk makes (None for
        none); the reader stops once ``final`` is set. Dispatch on the exact type: a class
        pattern (``case X():``) costs an isinstance call per case tried."""
        if type(update) is ToolCallStart:
            self.unfinished.add(update.index)
        elif type(update) is ToolCallEnd:
            self.unfinished.discard(update.index)
        elif type(update) is StreamStart:
            started = self.partial is None
            self.partial = update.partial
            return MessageStart(message=update.partial) if started else None
        elif type(update) is StreamDone:
            self.final = update.message
            return None
        elif type(update) is StreamError:
            self.final = update.error
            return None
        elif type(update) is Retry:
            if update.discard_partial:
                self.partial = None
                self.unfinished.clear()
            return update
        elif type(update) not in UPDATE_EVENTS:
            return None  # an event this loop does not know
        partial = self.partial
        return None if partial is None else MessageUpdate(message=partial, event=update)

    def close(self) -> Iterable[AgentEvent]:
        """End the call: the events that close it (each message committed as its events
        are handed out). ``outcome`` is set unless the call is made once more."""
        run = self.run
        if self._stream is None:  # the call could not be made
            message = self._failed
            assert message is not None
            if message.stop_reason == "aborted" and run.signal.reason == SILENT_ABORT:
                message.error_kind = SILENT_ABORT
            self.outcome = message
            return run.commit(message)
        gate = run.gate
        if gate is not None:
            run.gate = None
            stopped = gate.outcome if self.error is None else None
            if isinstance(stopped, GuardrailTrip):  # the call is discarded
                self.outcome = tripped(stopped)
                return ()
            if stopped is not None:  # a reject: discard the call, tell the model, call again
                return self._again(run.commit(reject_message(stopped)))
        message = self.final
        if message is None or self.error is not None or message.stop_reason == "aborted":
            message = self._ended()
        if (
            message.stop_reason == "error"
            and message.error_kind == "context_overflow"
            and self._reason == "request"
            and run.cfg.context_manager is not None
        ):
            self._reason = "overflow"  # compact once, call once more
            text = message.error_message or "context overflow"
            retry = Retry(
                attempt=1,
                max_attempts=2,
                delay=0.0,
                error_kind="context_overflow",
                error_message=text,
                discard_partial=True,
            )
            return self._again((retry,))
        self.outcome = message
        if self.partial is message:
            return (run.commit(message)[1],)
        return self._unstreamed(message)

    def _unstreamed(self, message: AssistantMessage) -> Iterator[AgentEvent]:
        """The events of a message that did not stream: its start, then (committed) its end."""
        yield MessageStart(message=message)
        yield self.run.commit(message)[1]

    def _again(self, events: Iterable[AgentEvent]) -> Iterator[AgentEvent]:
        """``events``, then the call is made once more (whether it needs preparing is
        decided once the consumer has them)."""
        yield from events
        run = self.run
        self.prepares = not run.plain or run.gate is not None or run.signal.aborted

    def result(self) -> AssistantMessage | End:
        """The call's outcome, once :meth:`close` is exhausted with one: the assistant
        message (counted as a turn here, after its events), or the run's end."""
        outcome = self.outcome
        assert outcome is not None, "the model call has not finished"
        if type(outcome) is AssistantMessage:
            run = self.run
            run.summary.turns += 1
            run.summary.usage.add(outcome.usage)
            if run.phase is not None:
                run.phase._set("turn_finished")
        return outcome

    async def prepare(self) -> AsyncGenerator[AgentEvent, None]:
        """Before the call: transform and manage the context (yielding the context
        manager's events), then request the stream (kept in ``_stream``), or keep the
        message ending the turn without one in ``_failed`` (aborted before the call, or
        the request could not be made)."""
        run = self.run
        cfg = run.cfg
        self._stream = None
        if run.signal.aborted:
            # Aborted before the call: end the turn as the model would, without calling it.
            m = run.model
            self._failed = MessageBuilder(provider=m.provider, api=m.api, model=m.id).aborted().error
            return
        try:
            messages = run.conversation.messages
            if cfg.transform_context is not None:
                messages = await maybe_await(cfg.transform_context(messages, run.signal))
            if cfg.context_manager is not None:
                async for event in self._manage_context(self._reason, messages):
                    yield event
                messages = self._messages
            request, options = await self._request(messages)
            if run.gate is not None:
                options = msgspec.structs.replace(options, signal=run.gate.signal)
            self._stream = run.model.stream(request, options)
        except Exception as exc:
            self._failed = run.error_message(exception_text(exc))

    async def _manage_context(self, reason: ContextReason, messages: list[Message]) -> AsyncGenerator[AgentEvent, None]:
        """Run the context manager, yielding its events; the messages to send are kept in ``_messages``."""
        run = self.run
        cm = run.cfg.context_manager
        assert cm is not None
        conversation = run.conversation
        request = ContextRequest(reason, run.model, run.signal, conversation.system_prompt)
        projection: Projection | None = None
        async for item in cm.manage(messages, request):
            match item:
                case Projection():
                    projection = item
                case CompactionEnd():
                    # The summary call is part of what the run used (and of its budget).
                    usage = run.summary.usage
                    usage.add(item.usage)
                    if not item.usage.cost.total:  # a manager that reports only the cost
                        usage.cost.total += item.cost
                    yield item
                case _:
                    yield item
        if projection is None:
            self._messages = messages
            return
        if projection.commit is not None:
            conversation.messages[:] = projection.commit
        self._messages = conversation.messages if projection.messages is projection.commit else projection.messages

    async def _request(self, messages: list[Message]) -> tuple[Request, StreamOptions]:
        """The request for ``messages``: converted, repaired, with this turn's options and key."""
        run = self.run
        cfg = run.cfg
        conversation = run.conversation
        if cfg.convert_to_llm is None and messages is conversation.messages:
            llm = conversation.view.build(messages, run.repair)
        else:
            llm = await llm_messages(messages, cfg, run.model)
        options = run.options
        api_key = await maybe_await(cfg.get_api_key(run.model.provider)) if cfg.get_api_key is not None else None
        cap = options.max_tokens
        if cfg.usage_limits is not None:
            from ._limits import max_tokens  # loaded with a run's usage limits

            cap = max_tokens(run, options)
        options = msgspec.structs.replace(
            options, thinking=run.thinking, signal=run.signal, api_key=api_key or options.api_key, max_tokens=cap
        )
        return Request.of(run.system(), llm, run.tool_specs), options

    def _ended(self) -> AssistantMessage:
        """The message the stream ended with: its terminal message, or an error message
        (keeping partial content) when it raised or stopped without one; an aborted one
        without the calls still streaming."""
        final, partial, error = self.final, self.partial, self.error
        if error is not None:
            final = partial or self.run.error_message("")
            final.stop_reason = "error"
            final.error_message = exception_text(error)
            final.error_kind = final.error_kind or "unknown"
        elif final is None:
            final = partial or self.run.error_message("")
            final.stop_reason = "error"
            final.error_message = "stream ended without a terminal event"
            final.error_kind = "network"
        if final.stop_reason == "aborted":
            if self.unfinished and final is partial:
                _drop_unfinished_calls(final, self.unfinished)
            if self.run.signal.reason == SILENT_ABORT:
                final.error_kind = SILENT_ABORT  # no interruption note for the model
        return final


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
