"""The stateless loop: :func:`run_loop`, :func:`continue_loop`, :func:`resume_loop`.

Read :meth:`_Run.events` top to bottom, the loop's skeleton: each turn commits what is
queued, makes one model call (:class:`~._call.ModelCall`, its stream iterated right
there), runs the turn's tool step (:func:`~._turn.tool_step`: one
:class:`~._execute.ToolBatch`, or what stands in for it), emits ``turn_end``, then asks
the run's checks what comes next (:meth:`~._controls.Checks.next`: after the turn, then,
when the model would stop, at the stop). Each step returns what it produced and what
comes next (:mod:`._next`); the state the steps share is the run (:class:`~._runtime.Run`).
Every run ends with exactly one ``agent_end``; no model, tool or hook failure escapes it.

Where each event comes from:

- ``agent_start``, ``turn_start``, ``turn_end``: :meth:`_Run.events`; ``agent_end``:
  :meth:`~._runtime.Run.ending`;
- ``message_start`` / ``message_end`` of the prompts, queued and injected messages, tool
  results and an escaped error: :meth:`~._runtime.Run.commit` (queued messages:
  :meth:`~._runtime.Run.commit_pending`), emitted by :meth:`_Run.events`;
- the assistant message's ``message_start`` and ``message_update``, the stream's own
  ``retry``: :meth:`_Run.events` iterating the stream, with :meth:`~._call.ModelCall.read`;
- the assistant message's ``message_end``, the overflow ``retry``, a parallel input
  guardrail's reject note: :meth:`~._call.ModelCall.close`; ``compaction_*``: the context
  manager, through :meth:`~._call.ModelCall.prepare`;
- ``tool_execution_*``, ``tool_call_note``, ``approval_required``: the batch
  (:meth:`~._execute.ToolBatch.events`), or a refusal over the tool-call limit
  (:meth:`~._limits.Refusal.events`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Sequence
from typing import Any

from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import UserMessage
from ..llm._messages import monotonic
from ..llm._model import Model
from ..llm._signal import AbortSignal
from ..llm._stream import is_closable
from ._call import UPDATE_EVENTS
from ._call import ModelCall
from ._call import llm_messages as llm_messages
from ._config import LoopConfig
from ._controls import Checks
from ._events import AgentEvent
from ._events import AgentStart
from ._events import MessageUpdate
from ._events import RunResult
from ._events import TurnEnd
from ._events import TurnStart
from ._hooks import Conversation
from ._next import Continue
from ._next import End
from ._next import Pause
from ._runtime import Resume
from ._runtime import Run
from ._state import Decision
from ._state import RunState
from ._state import config_fingerprint
from ._tool import Tool
from ._turn import resumed_step
from ._turn import tool_step


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
    """Continue from the current transcript without new prompts: after a tool result or a
    user message (e.g. after a retryable error), or from an assistant message with the
    queued messages as the prompts (the steering messages, else the follow-ups).

    Raises ``ValueError`` at once when the transcript is empty, or ends with an assistant
    message and ``config`` has no queue to take from; a run from an assistant message
    whose queues turn out empty ends with an error saying so.
    """
    if not conversation.messages:
        raise ValueError("Cannot continue: no messages in context")
    last = conversation.messages[-1]
    from_queues = isinstance(last, AssistantMessage)
    if from_queues and config.get_steering_messages is None and config.get_follow_up_messages is None:
        raise ValueError("Cannot continue from message role: assistant")
    run = _Run(conversation, config, signal)
    return RunStream(run, run.events(None if from_queues else []))


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
    run = _Run(conversation, config, signal, Resume(state, decisions))
    return RunStream(run, run.events([]))


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


class _Run(Run):
    """One run: its state (:class:`~._runtime.Run`) and the loop itself, :meth:`events`."""

    async def events(self, given: list[Message] | None) -> AsyncGenerator[AgentEvent, None]:
        """The loop: every event of the run, ending with exactly one ``agent_end``.
        ``given`` are the prompts; None takes them from the queues (:meth:`Run.queued_prompts`).

        A ``return`` ends the run; the ``finally`` clause reports an escaped exception as
        an error message and emits ``agent_end`` (a cancelled run re-raises after it),
        unless the consumer closed the stream.
        """
        started = monotonic()
        ending = True
        failure: Exception | None = None
        event: AgentEvent
        if self.phase is not None:
            self.phase._set("starting", 0)
        yield AgentStart()
        try:
            checks = Checks(self)
            resumed = self.resumed
            prompts = given if given is not None else await self.queued_prompts()
            notes: Sequence[Message] = ()
            if resumed is None:
                # -- before the first call: a usage limit or an input guardrail may end the run at once
                match await checks.admit(prompts):
                    case End() as refused:  # nothing is sent; the prompts are kept
                        for prompt in prompts:
                            for event in self.commit_queued(prompt):
                                yield event
                        self.end(refused)
                        return
                    case Continue(notes):  # an input guardrail's reject: its note follows the prompts
                        pass
            if self.phase is not None:
                self.phase._set("llm_in_flight", self.turn)
            yield TurnStart(turn=self.turn)
            for prompt in (*prompts, *notes):
                for event in self.commit_queued(prompt):  # (a prompt may come from a queue)
                    yield event
            initial_poll = resumed is None and given is not None
            pending: Sequence[Message] = await self.poll_steering() if initial_poll else ()
            while True:
                if resumed is None:
                    # -- the turn's queued messages, then one model call
                    if pending or self.conversation.pending_context:
                        for event in self.commit_pending(pending):
                            yield event
                    call = ModelCall(self)  # its stream is iterated here: no generator in between
                    while call.outcome is None:  # once more after an overflow, or a parallel guardrail's reject
                        if call.prepares:
                            async for event in call.prepare():  # the context manager's
                                yield event
                        stream = call.open()
                        try:
                            async for update in stream:
                                if type(update) in UPDATE_EVENTS:  # the bulk of a stream: one lookup
                                    if call.partial is not None:
                                        yield MessageUpdate(message=call.partial, event=update)
                                elif (read := call.read(update)) is not None:
                                    yield read
                                elif call.final is not None:
                                    break
                        except Exception as exc:
                            call.error = exc
                        finally:
                            if is_closable(stream):
                                await stream.aclose()
                        for event in call.close():
                            yield event
                    answer = call.result()
                    if type(answer) is End:  # a parallel input guardrail tripped: the call is discarded
                        self.end(answer)
                        return
                    message = answer
                    tools = tool_step(self, message, message.tool_calls, None)
                else:  # a resumed run: the paused turn goes on with its calls still to run
                    message, tools = resumed.message, resumed_step(self, resumed)
                    resumed = None
                # -- the tool calls: a batch, the output tool's answer, or a refusal over the tool-call limit
                async for event in tools.events():
                    yield event
                turn = tools.result()
                if type(turn) is Pause:  # waiting for approval: no turn_end (the turn goes on on resume)
                    self.end(turn)
                    return
                for result in turn.results:
                    start, end = self.commit(result)
                    yield start
                    yield end
                window = None if turn.failed else self.usage()
                yield TurnEnd(turn=self.turn, message=message, tool_results=turn.results, context=window)
                # -- what comes next: the checks after the turn, then (the model would stop) at the stop
                nxt = await checks.next(turn)
                if type(nxt) is not Continue:  # (per turn: no isinstance call, no class pattern)
                    self.end(nxt)
                    return
                pending = nxt.pending
                self.turn += 1
                if self.phase is not None:
                    self.phase._set("llm_in_flight", self.turn)
                yield TurnStart(turn=self.turn)
        except GeneratorExit:
            ending = False
            raise
        except asyncio.CancelledError:
            self.end(End("aborted", "run cancelled"))
            raise
        except Exception as exc:
            failure = exc
        finally:
            self.drop_gate()
            if ending:  # an escaped exception's error message, then agent_end
                for event in self.ending(started, failure):
                    yield event
