"""One run's state (:class:`Run`), and what every step of the loop does with it.

A :class:`Run` holds what the run accumulates (the committed ``new_messages``, the
``notes``, the ``summary``, the queued messages taken but not yet committed) and what a
turn may change (the model, thinking level, tools). Its helpers commit a message and
return its two events (:meth:`Run.commit`), poll the queues, turn tool outcomes into
result messages, and record how the run ended (:meth:`Run.end`). What one step produces
for the next is passed as a value (see :mod:`ketch.loop._next`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import msgspec

from ..llm._errors import exception_text
from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolResultMessage
from ..llm._messages import Usage
from ..llm._messages import monotonic
from ..llm._model import Model
from ..llm._model import PreparesMessages
from ..llm._model import SystemBlock
from ..llm._model import SystemPrompt
from ..llm._model import ToolSpec
from ..llm._signal import AbortSignal
from ..llm._tokens import ContextUsage
from ._config import LoopConfig
from ._events import AgentEnd
from ._events import AgentEvent
from ._events import MessageEnd
from ._events import MessageStart
from ._events import RunResult
from ._events import RunSummary
from ._events import ToolCallNote
from ._execute import CallOutcome
from ._execute import ToolRunner
from ._execute import stopped_result
from ._guardrails import Guardrails
from ._guardrails import InputGate
from ._hooks import Conversation
from ._hooks import NextTurn
from ._next import End
from ._next import Pause
from ._state import Decision
from ._state import PendingCall
from ._state import RunState
from ._state import config_fingerprint
from ._tool import Tool

if TYPE_CHECKING:
    from ._output import OutputRun


class Resume(msgspec.Struct, frozen=True):
    """A paused run to go on with: its ``state`` and the ``decisions`` on its calls."""

    state: RunState
    decisions: dict[str, Decision]


def with_section(system: str, section: str) -> str:
    """``system`` with ``section`` as its last block (a :class:`SystemPrompt` keeps its
    blocks and their cache markers)."""
    if not system:
        return section
    blocks = system.blocks if isinstance(system, SystemPrompt) else (SystemBlock(system),)
    return SystemPrompt([*blocks, SystemBlock(section)])


def repairs_for(model: Model) -> bool:
    """Whether the loop pairs tool calls and results for ``model`` (it does unless the
    model prepares its messages itself)."""
    return not (isinstance(model, PreparesMessages) and model.prepares_messages)


class Run:
    """State of one run, shared by its steps and checks (see the module docstring)."""

    def __init__(
        self,
        conversation: Conversation,
        config: LoopConfig[Any],
        signal: AbortSignal | None,
        resume: Resume | None = None,
    ) -> None:
        self.conversation = conversation
        # What the capabilities add to this run (LoopConfig.capabilities): folded into the
        # config, its tools and the system prompt's last section; their checks go to Checks.
        self.added_tools: tuple[Tool, ...] = ()
        self.instructions = ""
        self.added_checks: tuple[tuple[Any, ...], tuple[Any, ...]] = ((), ())
        self.view: Callable[[Sequence[Tool], Sequence[Message]], Sequence[Tool]] | None = None
        if config.capabilities:
            from ._compose import compose  # loaded with the first run that has capabilities

            composed = compose(config, conversation.tools)
            config = composed.config
            self.added_tools, self.instructions = composed.tools, composed.instructions
            self.added_checks = (composed.after_turn, composed.at_stop)
            self.view = composed.view
        self.cfg = config
        self.signal = signal if signal is not None else AbortSignal()
        self.phase = config.phase
        self.model = config.model
        self.repair = repairs_for(self.model)
        self.thinking = config.thinking
        self.new_messages: list[Message] = []
        self.uncommitted: list[Message] = []
        self.notes: list[ToolCallNote] = []
        self.summary = RunSummary()
        self.result: RunResult | None = None
        self.state: RunState | None = None  # set when the run pauses for approval
        self.runner = ToolRunner(config)
        self.turn = 1
        self.resumed: RunState | None = None
        if resume is not None:
            state = self.resumed = resume.state
            self.runner.decisions = resume.decisions
            self.turn = state.turn
            self.summary.turns = state.turns
            self.summary.usage.add(state.usage)
            if state.run_messages:
                self.new_messages.extend(state.messages[-state.run_messages:])
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
                [t.name for t in (*conversation.tools, *self.added_tools)],
            )
            self.options = self.output.options(config.options)
        # The options of a request built without hooks (kept: they change with the thinking level only).
        self.plain_options = msgspec.structs.replace(self.options, thinking=self.thinking, signal=self.signal)
        self.guards = Guardrails.of(config.guardrails)
        self.runner.guards = self.guards
        self.gate: InputGate | None = None  # parallel input guardrails of the first call
        # Nothing to await before a model call (the hooks that could run there are unset).
        self.plain = (
            config.transform_context is None
            and config.context_manager is None
            and config.convert_to_llm is None
            and config.get_api_key is None
            and config.usage_limits is None
        )
        self.plain_system = not self.instructions and self.output is None  # the request's is the conversation's
        self.set_tools(conversation.tools)

    def set_tools(self, tools: Sequence[Tool]) -> None:
        """The run's tools from now on: ``tools`` (the conversation's) and those its
        capabilities added, as their tools view shows them for the transcript now."""
        self.conversation.tools = tools
        if self.added_tools:
            tools = [*tools, *self.added_tools]
        if self.view is not None:
            tools = self.view(tools, self.conversation.messages)
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.tool_specs: list[ToolSpec] = [t.spec for t in tools]
        if self.output is not None:
            self.tool_specs = self.output.tool_specs(self.tool_specs)

    def system(self) -> str:
        """The system prompt of this turn's request: the conversation's, the capabilities'
        instructions after it, and typed output's instructions when it has any."""
        system = self.conversation.system_prompt
        if self.instructions:
            system = with_section(system, self.instructions)
        return system if self.output is None else self.output.system_prompt(system)

    def keep_gate(self, gate: InputGate) -> None:
        """Hold the parallel input guardrails the first model call goes through."""
        self.gate = gate

    def apply(self, nxt: NextTurn) -> None:
        """Take ``prepare_next_turn``'s replacements for the next turn."""
        if nxt.model is not None:
            self.model = nxt.model
            self.repair = repairs_for(nxt.model)
        if nxt.thinking is not None:
            self.thinking = nxt.thinking
            self.plain_options = msgspec.structs.replace(self.options, thinking=nxt.thinking, signal=self.signal)
        if nxt.tools is not None:
            self.set_tools(nxt.tools)
        if nxt.system_prompt is not None:
            self.conversation.system_prompt = nxt.system_prompt
        if nxt.messages is not None:
            self.conversation.messages[:] = nxt.messages

    # -- messages --------------------------------------------------------------------------
    def commit(self, message: Message) -> tuple[MessageStart, MessageEnd]:
        """Commit ``message`` to the transcript and the run; its ``message_start`` and
        ``message_end``, for the caller to emit."""
        self.conversation.messages.append(message)
        self.new_messages.append(message)
        return MessageStart(message=message), MessageEnd(message=message)

    def commit_queued(self, message: Message) -> tuple[MessageStart, MessageEnd]:
        """:meth:`commit` a queued message (no longer uncommitted); a capability's tools
        view sees it (a prompt may change the tools of the call it starts)."""
        taken = self.uncommitted
        for i, m in enumerate(taken):
            if m is message:
                del taken[i]
                break
        events = self.commit(message)
        if self.view is not None:
            self.set_tools(self.conversation.tools)
        return events

    def commit_pending(self, pending: Sequence[Message]) -> Iterator[AgentEvent]:
        """Commit what goes before the next call, each message as its events are handed
        out: the queued ``pending`` messages, stopping at an abort (the rest stays
        uncommitted: its owner puts it back), then :meth:`Conversation.add_context`'s."""
        for queued in pending:
            if self.signal.aborted:
                break
            yield from self.commit_queued(queued)
        context = self.conversation.pending_context
        if context and not self.signal.aborted:
            for added in context:
                yield from self.commit(added)
            context.clear()

    async def poll(self, getter: Any) -> list[Message]:
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

    async def poll_steering(self) -> list[Message]:
        return await self.poll(self.cfg.get_steering_messages)

    async def queued_prompts(self) -> list[Message]:
        """The prompts of a run continuing from an assistant message: the queued steering
        messages, else the follow-ups; ``ValueError`` when none is queued."""
        taken = await self.poll_steering() or await self.poll(self.cfg.get_follow_up_messages)
        if not taken:
            raise ValueError("Cannot continue from message role: assistant: no steering or follow-up message is queued")
        return taken

    def error_message(self, text: str, kind: str = "unknown") -> AssistantMessage:
        """An assistant message ending the turn with an error."""
        m = self.model
        return AssistantMessage(
            provider=m.provider, api=m.api, model=m.id, stop_reason="error", error_message=text, error_kind=kind
        )

    def usage(self) -> ContextUsage:
        """How full the model's context window is now."""
        return self.conversation.meter.measure(self.conversation.messages, self.model.context_window)

    # -- tool results ------------------------------------------------------------------------
    def count_results(self, results: list[ToolResultMessage]) -> list[ToolResultMessage]:
        """``results`` (a batch's, in call order), counted in the summary."""
        summary = self.summary
        summary.tool_calls += len(results)
        for message in results:
            if message.is_error:
                summary.tool_errors += 1
        return results

    def aborted_results(self, message: AssistantMessage) -> list[ToolResultMessage]:
        """Error results for the complete tool calls of an aborted message (none of them
        ran), so the transcript pairs every call with a result for any provider; none for
        a message that did not abort."""
        if message.stop_reason != "aborted" or not message.tool_calls:
            return []
        stopped = stopped_result("aborted")
        return self.count_results([
            ToolResultMessage(tool_call_id=c.id, tool_name=c.name, content=stopped.blocks, is_error=True)
            for c in message.tool_calls
        ])

    def add_tool_usage(self, outcomes: list[CallOutcome]) -> None:
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

    def pause(self, message: AssistantMessage, pending: list[PendingCall], done: list[ToolResultMessage]) -> Pause:
        """Wait for approval of ``message``'s ``pending`` calls (``done``: the results of those that ran)."""
        conversation = self.conversation
        usage = self.summary.usage
        return Pause(
            RunState(
                messages=list(conversation.messages),
                pending=pending,
                completed=done,
                run_messages=len(self.new_messages),
                turn=self.turn,
                turns=self.summary.turns,
                usage=msgspec.structs.replace(usage, cost=msgspec.structs.replace(usage.cost)),
                fingerprint=config_fingerprint(self.model, conversation.system_prompt, conversation.tools),
            )
        )

    # -- the end -----------------------------------------------------------------------------
    def end(self, how: End | Pause) -> None:
        """Record how the run ended."""
        summary = self.summary
        match how:
            case End(reason, error, guardrail):
                summary.end_reason = reason
                summary.error = error
                if guardrail is not None:
                    summary.guardrail = guardrail
            case Pause(state):
                self.state = state
                summary.end_reason = "approval_required"
                summary.error = None

    def drop_gate(self) -> None:
        """Stop the parallel input guardrails if the run ends without needing them."""
        if self.gate is not None:
            self.gate.cancel()
            self.gate = None

    def ending(self, started: float, failure: Exception | None) -> Iterator[AgentEvent]:
        """The run's last events: the error message of an exception that escaped it
        (committed as handed out), then ``agent_end``."""
        if failure is not None:
            error = self.error_message(exception_text(failure))
            yield from self.commit(error)
            self.end(End("error", error.error_message))
        yield self.agent_end(started)

    def agent_end(self, started: float) -> AgentEnd:
        """The run's result (kept for :meth:`RunStream.result`) and its ``agent_end``."""
        self.summary.duration = monotonic() - started
        if self.phase is not None:
            self.phase._set("idle")
        self.result = RunResult(
            messages=self.new_messages,
            summary=self.summary,
            tool_call_notes=self.notes,
            uncommitted=list(self.uncommitted),
            state=self.state,
            output=self.output.output if self.output is not None else None,
        )
        return AgentEnd(messages=self.new_messages, summary=self.summary, state=self.state)
