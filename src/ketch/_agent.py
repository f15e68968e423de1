"""The stateful :class:`Agent`: transcript, queues, subscribers, phase, abort.

An agent holds a system prompt, a model, tools and a transcript, and runs the loop
from :mod:`ketch.loop` on them. Listeners see every event after the agent's own state
was updated, awaited one after another in registration order. Steering messages
reach the model at the next turn; follow-ups when it would otherwise stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import Literal
from typing import Protocol
from typing import TypeAlias
from typing import Unpack

from .llm._messages import AssistantMessage
from .llm._messages import Cost
from .llm._messages import ImageContent
from .llm._messages import Message
from .llm._messages import TextContent
from .llm._messages import Usage
from .llm._messages import UserContent
from .llm._messages import UserMessage
from .llm._model import Model
from .llm._model import ThinkingLevel
from .llm._model import ToolSpec
from .llm._signal import AbortSignal
from .llm._tokens import ContextUsage
from .loop._config import AgentOptions
from .loop._config import LoopConfig
from .loop._events import AgentEvent
from .loop._events import MessageUpdate
from .loop._events import RunResult
from .loop._hooks import ContextRequest
from .loop._hooks import Conversation
from .loop._hooks import Projection
from .loop._options import check_options
from .loop._phase import Phase
from .loop._phase import PhaseKind
from .loop._run import RunStream
from .loop._run import check_resume
from .loop._run import continue_loop
from .loop._run import llm_messages
from .loop._run import resume_loop
from .loop._run import run_loop
from .loop._state import Decision
from .loop._state import RunState
from .loop._tool import Deps
from .loop._tool import Tool

if TYPE_CHECKING:
    import os

    from .loop._output import OutputRun
    from .loop._output import OutputStream
    from .loop._output import OutputValidator
    from .skills import Skill

log = logging.getLogger("ketch._agent")

QueueMode: TypeAlias = Literal["one_at_a_time", "all"]
AGENT_PARAMETERS = (
    "model", "system_prompt", "tools", "skills", "messages", "steering_mode", "follow_up_mode", "session"
)
"""The :class:`Agent`'s own parameters; its other keywords are the agent options
(:class:`~ketch.loop.AgentOptions`)."""
_UNSET: Any = object()
Listener: TypeAlias = Callable[[AgentEvent], "Awaitable[None] | None"]


@dataclasses.dataclass(frozen=True, slots=True)
class AgentState:
    """A snapshot of the agent's state."""

    messages: tuple[Message, ...]
    streaming_message: AssistantMessage | None
    pending_tool_calls: frozenset[str]
    is_running: bool
    error: str | None
    usage: Usage
    phase: Phase
    context: ContextUsage


class MessageQueue:
    """A FIFO of queued messages drained one at a time or all at once.

    The queue remembers what a run took from it until the run settles: messages the run
    did not commit (it was aborted or stopped first) go back to the front. :meth:`clear`
    drops both the queued messages and that record, so nothing cleared comes back.
    """

    __slots__ = ("_items", "_taken", "mode")

    def __init__(self, mode: QueueMode = "one_at_a_time") -> None:
        self.mode: QueueMode = mode
        self._items: deque[Message] = deque()
        self._taken: list[Message] = []

    def push(self, message: Message) -> None:
        """Queue a message at the back."""
        self._items.append(message)

    def push_front(self, messages: Sequence[Message]) -> None:
        """Put messages back at the front, keeping their order."""
        self._items.extendleft(reversed(messages))

    def drain(self) -> list[Message]:
        """Take the oldest message (``one_at_a_time``) or all of them (``all``)."""
        if not self._items:
            return []
        if self.mode == "all":
            items = list(self._items)
            self._items.clear()
        else:
            items = [self._items.popleft()]
        self._taken.extend(items)
        return items

    def peek(self) -> list[Message]:
        """The queued messages, oldest first, without removing them."""
        return list(self._items)

    def clear(self) -> None:
        """Drop every queued message, and those a running run took but has not committed."""
        self._items.clear()
        self._taken.clear()

    def _settle(self, uncommitted: dict[int, int]) -> None:
        """Put back what the run took and did not commit (``uncommitted`` counts them by
        identity); forget the rest."""
        taken, self._taken = self._taken, []
        back: list[Message] = []
        for m in taken:
            left = uncommitted.get(id(m), 0)
            if left:
                uncommitted[id(m)] = left - 1
                back.append(m)
        if back:
            self.push_front(back)

    def __len__(self) -> int:
        return len(self._items)


class AgentSession(Protocol):
    """What ``Agent(session=...)`` takes: an object that attaches itself to the agent.

    ``attach`` is called once, at the end of ``Agent.__init__``: it may restore the
    transcript (``agent.messages = ...``), subscribe to the agent's events to persist
    them, and add tool middlewares to ``agent.config``. :class:`ketch.sessions.Session`
    implements it.
    """

    def attach(self, agent: Agent[Any]) -> None:
        """Bind this session to ``agent``."""
        ...


def _user_message(text: str, images: Sequence[ImageContent] | None) -> UserMessage:
    content: list[UserContent] = [TextContent(text=text)]
    if images:
        content.extend(images)
    return UserMessage(content=content)


def _as_messages(
    input: str | Message | Sequence[Message], images: Sequence[ImageContent] | None
) -> list[Message]:
    if isinstance(input, str):
        return [_user_message(input, images)]
    if images:
        raise ValueError("images= can only be combined with a text prompt")
    if isinstance(input, Message):
        return [input]
    messages = list(input)
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"prompt() takes text, a message or a list of messages, got {type(m).__name__}")
    return messages


def _negated(usage: Usage) -> Usage:
    c = usage.cost
    return Usage(
        input=-usage.input,
        output=-usage.output,
        cache_read=-usage.cache_read,
        cache_write=-usage.cache_write,
        total_tokens=-usage.total_tokens,
        cost=Cost(input=-c.input, output=-c.output, cache_read=-c.cache_read, cache_write=-c.cache_write, total=-c.total),
    )


def _resolve(model: Model | str) -> Model:
    if isinstance(model, str):
        from .llm._resolve import get_model

        return get_model(model)
    return model


class Agent(Generic[Deps]):
    """A stateful agent around the stateless loop.

    ``model`` is a :class:`~ketch.llm.Model` or a ``"provider:model"`` string;
    ``system_prompt``, ``tools`` and ``messages`` (the transcript to start from) are the
    agent's; ``steering_mode`` and ``follow_up_mode`` say how its queues are drained;
    ``session`` persists the transcript as it is committed (see :mod:`ketch.sessions`).
    ``skills`` are Agent Skills (:mod:`ketch.skills`): :class:`~ketch.skills.Skill`
    objects and folder paths (a folder holding a ``SKILL.md``, or a folder of such
    folders); they join the first :class:`~ketch.skills.Skills` capability of the
    ``capabilities`` option, or become one appended to it (a bad ``SKILL.md`` raises
    :class:`~ketch.skills.SkillError`; a name given twice, ``ValueError``).
    Every other keyword is an agent option (:class:`~ketch.loop.AgentOptions`: stop
    controls, hooks, tool execution settings, typed output), a
    :class:`~ketch.loop.LoopConfig` field of the same name and default, kept on
    :attr:`config`; an unknown one is a ``TypeError`` naming it and the allowed ones.
    ``deps`` is your own object, handed to every tool as ``ctx.deps`` (``Agent[MyDeps]``).
    """

    def __init__(
        self,
        model: Model | str,
        *,
        system_prompt: str = "",
        tools: Iterable[Tool] = (),
        skills: Iterable[Skill | str | os.PathLike[str]] = (),
        messages: Iterable[Message] = (),
        steering_mode: QueueMode = "one_at_a_time",
        follow_up_mode: QueueMode = "one_at_a_time",
        session: AgentSession | None = None,
        **options: Unpack[AgentOptions[Deps]],
    ) -> None:
        check_options(options, "Agent()", AGENT_PARAMETERS)
        given: dict[str, Any] = dict(options)
        if given.get("options", _UNSET) is None:  # None meant the default before there were AgentOptions
            del given["options"]
        if "output_validators" in given:
            given["output_validators"] = tuple(given["output_validators"])
        skills = list(skills)
        if skills:  # sugar for capabilities=[..., Skills(...)]
            from .skills._skill import with_skills

            given["capabilities"] = with_skills(given.get("capabilities", ()), skills)
        self.config: LoopConfig[Deps] = LoopConfig(model=_resolve(model), **given)
        if "output_type" in given or "output_mode" in given or "output_retries" in given:
            from .loop._output import check_output_config

            cfg = self.config
            check_output_config(cfg.output_type, cfg.output_mode, cfg.output_retries)
        self.system_prompt = system_prompt
        self.tools: list[Tool] = list(tools)
        self._messages: list[Message] = list(messages)
        self._context = Conversation(messages=self._messages)
        self.steering = MessageQueue(steering_mode)
        self.follow_ups = MessageQueue(follow_up_mode)
        self._listeners: list[Listener] = []
        self._running = False
        self._signal: AbortSignal | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._streaming: AssistantMessage | None = None
        self._pending: frozenset[str] = frozenset()
        self._error: str | None = None
        self._usage = Usage()
        self._phase = Phase("idle", 0)
        self._background: asyncio.Task[RunResult] | None = None
        self._paused: RunState | None = None  # the state of the last run, when it paused
        self.session = session
        """The session given to the constructor (it persists the agent's transcript), or None."""
        if session is not None:
            session.attach(self)

    @property
    def deps(self) -> Deps:
        """Your object handed to tools as ``ctx.deps`` (``None`` when not given)."""
        return self.config.deps

    # -- configuration ------------------------------------------------------------------
    @property
    def model(self) -> Model:
        """The model used by the next run."""
        return self.config.model

    @model.setter
    def model(self, model: Model | str) -> None:
        self.config.model = _resolve(model)

    @property
    def thinking(self) -> ThinkingLevel:
        """The thinking level of the next run."""
        return self.config.thinking

    @thinking.setter
    def thinking(self, level: ThinkingLevel) -> None:
        self.config.thinking = level

    @property
    def messages(self) -> list[Message]:
        """The live transcript. Runs append to it as messages commit."""
        return self._messages

    @messages.setter
    def messages(self, messages: Iterable[Message]) -> None:
        if self._running:
            raise RuntimeError("Cannot replace messages while the agent is running; abort() or wait_for_idle() first")
        self._messages = list(messages)

    # -- observing ------------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every event; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):  # already unsubscribed
                self._listeners.remove(listener)

        return unsubscribe

    @property
    def is_running(self) -> bool:
        """True while a run is in progress."""
        return self._running

    @property
    def phase(self) -> Phase:
        """The current phase and turn, read atomically."""
        return self._phase

    @property
    def state(self) -> AgentState:
        """A snapshot of the agent's state."""
        return AgentState(
            messages=tuple(self._messages),
            streaming_message=self._streaming,
            pending_tool_calls=self._pending,
            is_running=self._running,
            error=self._error,
            usage=self._usage,
            phase=self._phase,
            context=self.context_usage(),
        )

    def context_usage(self) -> ContextUsage:
        """How full the model's context window is with the current transcript."""
        window = self.model.context_window
        context = self._context
        if context.messages is not self._messages:
            context = self._context = Conversation(messages=self._messages, pending_context=context.pending_context)
        return context.meter.measure(self._messages, window)

    # -- queues -----------------------------------------------------------------------------
    def steer(self, message: str | Message) -> None:
        """Queue a message for the model's next turn (also before a run starts)."""
        self.steering.push(UserMessage(content=message) if isinstance(message, str) else message)

    def follow_up(self, message: str | Message) -> None:
        """Queue a message to run when the agent would otherwise stop."""
        self.follow_ups.push(UserMessage(content=message) if isinstance(message, str) else message)

    def clear_queues(self) -> None:
        """Drop every queued message, including ones taken by a run being aborted."""
        self.steering.clear()
        self.follow_ups.clear()

    def add_context(self, context: str | Message) -> None:
        """Add ``context`` to the next request (also during a run): committed to the
        transcript before the next model call, a string as a user message (see
        :meth:`ketch.loop.Conversation.add_context`)."""
        self._context.pending_context.append(UserMessage(content=context) if isinstance(context, str) else context)

    def has_queued_messages(self) -> bool:
        """True when steering or follow-up messages are queued."""
        return bool(self.steering) or bool(self.follow_ups)

    def _settle_queues(self, uncommitted: Sequence[Message]) -> None:
        """Put the queued messages the run took but did not commit back at the front of
        their queue, in order. ``uncommitted`` is the loop's report of them
        (:attr:`~ketch.loop.RunStream.uncommitted`); a message whose queue was cleared
        meanwhile stays dropped."""
        counts: dict[int, int] = {}
        for m in uncommitted:
            counts[id(m)] = counts.get(id(m), 0) + 1
        self.steering._settle(counts)
        self.follow_ups._settle(counts)

    # -- running ----------------------------------------------------------------------------
    def stream(
        self, input: str | Message | Sequence[Message], *, images: Sequence[ImageContent] | None = None
    ) -> AgentStream:
        """Run the agent on a new prompt as an async iterator of its events, as
        :func:`ketch.loop.run_loop` gives them: ``async for event in agent.stream(...)``
        yields every event up to ``agent_end`` (after the agent's state and its
        subscribers saw it); ``await stream.result()`` is what :meth:`prompt` returns.
        Raises ``RuntimeError`` at once when the agent is running."""
        if self._running:
            raise RuntimeError(
                "Agent is already running. Use steer() or follow_up() to queue messages, or wait_for_idle()."
            )
        messages = _as_messages(input, images)
        self._running = True  # from now: the run starts with the stream's task
        self._idle.clear()
        return AgentStream(self, self._run(lambda cfg, ctx, sig: run_loop(messages, ctx, cfg, sig)))

    async def prompt(
        self, input: str | Message | Sequence[Message], *, images: Sequence[ImageContent] | None = None
    ) -> RunResult:
        """Run the agent on a new prompt and return the result (never raises for model or
        tool failures; see :meth:`RunResult.raise_for_error`)."""
        if self._running:
            raise RuntimeError(
                "Agent is already running. Use steer() or follow_up() to queue messages, or wait_for_idle()."
            )
        messages = _as_messages(input, images)
        return await self._run(lambda cfg, ctx, sig: run_loop(messages, ctx, cfg, sig))

    async def continue_loop(self) -> RunResult:
        """Continue from the transcript, as :func:`ketch.loop.continue_loop` does: after a
        tool result or user message, or from an assistant message with the queued steering
        messages, else the follow-ups, as the prompts. Raises ``ValueError`` at once when
        there is nothing to continue from."""
        if self._running:
            raise RuntimeError("Agent is already running. Wait for completion before continuing.")
        if not self._messages:
            raise ValueError("Cannot continue: no messages in context")
        if isinstance(self._messages[-1], AssistantMessage) and not self.has_queued_messages():
            raise ValueError("Cannot continue from message role: assistant")
        return await self._run(lambda cfg, ctx, sig: continue_loop(ctx, cfg, sig))

    async def resume(self, state: RunState, *, decisions: Mapping[str, Decision] | None = None) -> RunResult:
        """Continue a run that paused for approval (``end_reason == "approval_required"``),
        in this agent or a new one in another process, as if it had never paused.

        ``decisions`` maps the id of each paused call that asked for approval
        (``state.awaiting``) to :func:`~ketch.approve`, :func:`~ketch.deny` or
        :func:`~ketch.edit`. The transcript becomes the state's; its queued messages are
        queued again when this agent's queues are empty. Raises ``ValueError`` (changing
        nothing) for a missing or unknown decision, or when the model, system prompt or
        tools differ from those the run paused with.
        """
        if self._running:
            raise RuntimeError("Agent is already running. Wait for completion before resuming.")
        chosen = dict(decisions or {})
        check_resume(state, chosen, self.model, self.system_prompt, self.tools)
        if state is self._paused:
            # The resumed run's usage includes the paused part, which this agent counted.
            self._usage.add(_negated(state.usage))
        self._paused = None
        if not self.steering and not self.follow_ups:
            for m in state.steering:
                self.steering.push(m)
            for m in state.follow_ups:
                self.follow_ups.push(m)
        return await self._run(lambda cfg, ctx, sig: resume_loop(state, ctx, cfg, sig, decisions=chosen))

    async def inject(self, message: str | Message) -> Literal["steered", "resumed", "queued"]:
        """Deliver ``message`` the best way now: steer a running agent, resume an idle one
        whose transcript ends with an assistant message (in the background; use
        :meth:`wait_for_idle`), else queue it as a follow-up."""
        msg = UserMessage(content=message) if isinstance(message, str) else message
        if self._running:
            self.steering.push(msg)
            return "steered"
        if self._messages and isinstance(self._messages[-1], AssistantMessage):
            self._idle.clear()
            self._background = asyncio.create_task(self.prompt(msg))
            return "resumed"
        self.follow_ups.push(msg)
        return "queued"

    async def compact(self, instructions: str | None = None) -> bool:
        """Summarise older history now with the configured ``context_manager``.

        Listeners receive the compaction events. Returns True when the transcript was
        rewritten. Raises ``RuntimeError`` while running or without a context manager.
        The capabilities' context-manager wrappers apply as in a run (tool search keeps
        its activations).
        """
        manager = self.config.context_manager
        if manager is None:
            raise RuntimeError("compact() needs a context manager: Agent(..., context_manager=Compactor())")
        if self._running:
            raise RuntimeError("Agent is already running. Wait for completion before compacting.")
        if self.config.capabilities:
            from .loop._compose import compose  # loaded with capabilities

            manager = compose(self.config, self.tools).config.context_manager
            assert manager is not None
        self._running = True
        self._idle.clear()
        signal = AbortSignal()
        self._signal = signal
        committed = False
        try:
            request = ContextRequest("manual", self.model, signal, self.system_prompt, instructions)
            async for item in manager.manage(self._messages, request):
                if isinstance(item, Projection):
                    if item.commit is not None:
                        self._messages[:] = item.commit
                        committed = True
                    continue
                await self._notify(item)
        finally:
            self._running = False
            self._signal = None
            self._idle.set()
        return committed

    async def build_llm_messages(self) -> list[Message]:
        """Exactly the messages the next request would send for the current transcript
        (``transform_context``, then ``convert_to_llm`` or the default conversion, then the
        repair pass when the model needs it), for side requests that must share the
        request's cache prefix. The context manager is not run: it may compact, which
        changes the transcript. Context added with :meth:`add_context` and not yet sent
        is included at the end, where the next run commits it. The list is a new one;
        the messages are shared."""
        messages = self._messages
        pending = self._context.pending_context
        if pending and self._context.messages is self._messages:
            messages = [*messages, *pending]
        transform = self.config.transform_context
        if transform is not None:
            out = transform(messages, AbortSignal())
            messages = await out if inspect.isawaitable(out) else out
        return list(await llm_messages(messages, self.config, self.model))

    def build_llm_tools(self) -> list[ToolSpec]:
        """The tool definitions the next request would send (name, description, schema)."""
        specs = [t.spec for t in self.tools]
        output = self._output_run()
        return specs if output is None else output.tool_specs(specs)

    # -- typed output -------------------------------------------------------------------
    def output_validator(self, fn: OutputValidator) -> OutputValidator:
        """Decorator: add ``fn`` to the output validators (``config.output_validators``).

        ``fn(output)`` is called, sync or async, with each answer that matches
        ``output_type``; raising or returning :class:`~ketch.RejectOutput` sends its
        message back to the model (see ``output_retries``)."""
        self.config.output_validators = (*self.config.output_validators, fn)
        return fn

    def stream_output(
        self, input: str | Message | Sequence[Message], *, images: Sequence[ImageContent] | None = None
    ) -> OutputStream:
        """Run on a new prompt like :meth:`prompt`, as an :class:`~ketch.loop.OutputStream`:
        ``async for partial in agent.stream_output(...)`` yields validated partial values
        of ``output_type`` while the answer streams, ending with ``RunResult.output``;
        ``await stream.result()`` returns the result. Raises ``ValueError`` without an
        ``output_type``."""
        output = self._output_run()
        if output is None:
            raise ValueError("stream_output() needs an agent with an output_type")
        from .loop._output import OutputStream
        from .loop._output import PartialOutput

        return OutputStream(lambda: self.prompt(input, images=images), self.subscribe, self.abort, PartialOutput(output))

    def _output_run(self) -> OutputRun | None:
        cfg = self.config
        if cfg.output_type is None:
            return None
        from .loop._output import OutputRun

        return OutputRun(
            cfg.output_type,
            cfg.output_mode,
            cfg.output_retries,
            cfg.output_validators,
            self.model,
            [t.name for t in self.tools],
        )

    def abort(self) -> None:
        """Abort the current run (no effect when idle)."""
        if self._signal is not None:
            self._signal.abort()

    def abort_silent(self) -> None:
        """Abort the current run like :meth:`abort`, but the model is not told: no
        ``[Request interrupted by user]`` note follows the aborted response in later
        requests (its ``error_kind`` is ``"silent"``). For cancelling work the user did
        not ask to stop (a superseded side request, a timeout of the application's own)."""
        if self._signal is not None:
            self._signal.abort("silent")

    async def wait_for_idle(self) -> None:
        """Wait until no run is in progress (listeners of ``agent_end`` included)."""
        await self._idle.wait()

    def reset(self) -> None:
        """Clear the transcript, queues, error and usage totals."""
        if self._running:
            raise RuntimeError("Agent is already running. Wait for completion before resetting.")
        self._messages = []
        self.clear_queues()
        self._error = None
        self._usage = Usage()
        self._streaming = None
        self._pending = frozenset()
        self._phase = Phase("idle", 0)

    def prompt_sync(
        self, input: str | Message | Sequence[Message], *, images: Sequence[ImageContent] | None = None
    ) -> RunResult:
        """:meth:`prompt` for scripts without an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.prompt(input, images=images))
        raise RuntimeError("prompt_sync() cannot be used inside a running event loop; use 'await agent.prompt()'")

    async def _run(self, start: Callable[[LoopConfig[Any], Conversation, AbortSignal], RunStream]) -> RunResult:
        self._running = True
        self._idle.clear()
        signal = AbortSignal()
        self._signal = signal
        self._error = None
        self._streaming = None
        self._pending = frozenset()
        self._phase = Phase("starting", 0)
        config = dataclasses.replace(
            self.config,
            get_steering_messages=self.steering.drain,
            get_follow_up_messages=self.follow_ups.drain,
        )
        context = self._context
        if context.messages is not self._messages:
            context = self._context = Conversation(messages=self._messages, pending_context=context.pending_context)
        context.system_prompt = self.system_prompt
        context.tools = list(self.tools)
        result: RunResult | None = None
        stream: RunStream | None = None
        try:
            stream = start(config, context, signal)
            async for event in stream:
                # Most events are updates, which change the streaming message in place.
                if type(event) is not MessageUpdate:
                    self._reduce(event)
                if self._listeners:
                    await self._notify(event)
            result = await stream.result()
            return result
        finally:
            if result is None and stream is not None:
                await stream.aclose()
            self._settle_queues(stream.uncommitted if stream is not None else ())
            self._running = False
            self._signal = None
            self._streaming = None
            self._pending = frozenset()
            turn = self._phase.turn
            if result is None:
                self._phase = Phase("aborted", turn)
            else:
                reason = result.end_reason
                self._usage.add(result.usage)
                kind: PhaseKind = (
                    reason if reason == "aborted" or reason == "error" or reason == "approval_required" else "done"
                )
                if reason == "output_invalid":
                    kind = "error"
                self._phase = Phase(kind, turn)
                self._paused = result.state
            self._idle.set()

    async def _notify(self, event: AgentEvent) -> None:
        for listener in list(self._listeners):
            try:
                out = listener(event)
                if out is not None and inspect.isawaitable(out):  # most listeners return None
                    await out
            except Exception:
                log.exception("Agent listener failed on %s event", event.type)

    def _reduce(self, event: AgentEvent) -> None:
        match event.type:
            case "message_update":  # the bulk of a run's events
                self._streaming = event.message
            case "message_start":
                message = event.message
                if type(message) is AssistantMessage:
                    self._streaming = message
                    self._phase = Phase("llm_in_flight", self._phase.turn)
            case "message_end":
                message = event.message
                if type(message) is AssistantMessage:
                    self._streaming = None
                    self._phase = Phase("turn_finished", self._phase.turn)
                    if message.error_message and message.stop_reason == "error":
                        self._error = message.error_message
            case "turn_start":
                self._phase = Phase("llm_in_flight", event.turn)
            case "tool_execution_start":
                self._pending = self._pending | {event.tool_call_id}
                self._phase = Phase("tool_executing", self._phase.turn)
            case "tool_execution_end" | "approval_required":
                self._pending = self._pending - {event.tool_call_id}
            case "retry":
                if event.discard_partial:
                    self._streaming = None
            case "agent_end":
                self._streaming = None
                state = event.state
                if state is not None:  # a pause: the queued messages travel with the state
                    state.steering = self.steering.peek()
                    state.follow_ups = self.follow_ups.peek()
                summary = event.summary
                if summary.error and summary.end_reason != "aborted":
                    self._error = summary.error
                self._phase = Phase("idle", self._phase.turn)

    def __repr__(self) -> str:
        return f"Agent(model={self.model.id!r}, messages={len(self._messages)}, running={self._running})"


class AgentStream:
    """One run of an :class:`Agent` as an async iterator of its events, and its result
    (:meth:`Agent.stream`). Iterate it once; ``aclose()`` (or leaving an ``async with``)
    aborts a run still going."""

    __slots__ = ("_agent", "_events", "_task", "_unsubscribe")

    def __init__(self, agent: Agent[Any], run: Awaitable[RunResult]) -> None:
        self._agent = agent
        self._events: asyncio.Queue[AgentEvent] = asyncio.Queue()
        self._unsubscribe = agent.subscribe(self._events.put_nowait)
        self._task: asyncio.Task[RunResult] = asyncio.ensure_future(run)
        self._task.add_done_callback(lambda _: self._unsubscribe())

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[AgentEvent]:
        while True:
            if self._events.empty() and self._task.done():
                self._task.result()  # a run that raised (misuse) raises here
                return
            getter = asyncio.ensure_future(self._events.get())
            await asyncio.wait({getter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            event = getter.result()
            yield event
            if event.type == "agent_end":
                return

    async def result(self) -> RunResult:
        """The run's result, once it has ended (the events not iterated are dropped)."""
        return await self._task

    async def aclose(self) -> None:
        """Abort the run if it is still going, and wait for its end."""
        if not self._task.done():
            self._agent.abort()
        with contextlib.suppress(Exception):
            await self._task

    async def __aenter__(self) -> AgentStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
