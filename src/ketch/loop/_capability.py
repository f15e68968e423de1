"""The capability seam: optional behaviour an agent is given as one value.

A :class:`Capability` bundles what a feature adds to an agent: tools, a section of the
system prompt, model settings, tool hooks, guardrails, and checks that decide what comes
after a turn or when the model would stop. Give capabilities to an agent
(``Agent(model, capabilities=[...])``) or a loop (``LoopConfig.capabilities``); each run
asks every capability for its :class:`Contribution` once, at its start, so a capability
may keep per-run state in what it returns.

Nothing in the loop knows any capability: :func:`compose` folds their contributions into
the run's configuration (its tool hooks, middlewares and guardrails), its tools, its
system prompt and its options, and the run's ordered checks take their checks
(:class:`~ketch.loop._controls.Checks`): a new feature lands as a capability, never as a
new branch in the loop or a new field of its configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import TypeAlias

import msgspec

from ..llm._messages import Message
from ..llm._model import HostedTool
from ..llm._model import StreamOptions
from ._config import AfterToolCallResult
from ._config import BeforeToolCallResult
from ._config import ContextManager
from ._config import LoopConfig
from ._config import MaybeAwaitable
from ._config import Middleware
from ._config import NextTurn
from ._config import StopInfo
from ._config import ToolCallInfo
from ._config import TurnInfo
from ._execute import maybe_await
from ._guardrails import Guardrail
from ._next import Continue
from ._next import End
from ._tool import Tool
from ._tool import ToolResult

__all__ = ["AfterTurnCheck", "Capability", "Contribution", "StopCheck", "ToolsView", "compose"]

AfterTurnCheck: TypeAlias = Callable[[TurnInfo], MaybeAwaitable[Continue | End | None]]
"""A check after each turn's tool results: :class:`~ketch.loop.Continue` (another call,
after committing its messages), :class:`~ketch.loop.End` (the run ends), or None (no
opinion). Asked after ``prepare_next_turn`` and ``stop_when``."""

StopCheck: TypeAlias = Callable[[StopInfo], MaybeAwaitable[Continue | End | None]]
"""A check when the model would end the run (no tool calls, nothing queued): continue
with messages, end (with another reason), or None. Asked after the built-in ones (length
recovery, queued messages, follow-ups, typed output, output guardrails), before
``on_stop``."""

ToolsView: TypeAlias = Callable[[Sequence[Tool], Sequence[Message]], Sequence[Tool]]
"""Which of the run's tools (the agent's, then the capabilities') the model is sent and
may call, given the transcript: asked at the run's start, after each prompt or queued
message is committed, and after every turn (so a prompt or a turn's tool results can
change the next call's tools). Tool search defers most tools
this way (:class:`ketch.tools.ToolSearch`)."""

_OPTION_FIELDS = frozenset(StreamOptions.__struct_fields__) - {"signal", "api_key", "headers", "hosted_tools"}


class Contribution(msgspec.Struct, frozen=True, kw_only=True):
    """What a capability adds to one run; every part is optional.

    ``tools`` join the agent's (a name already taken is an error naming both);
    ``instructions`` is a section appended to the system prompt of the run's requests
    (the agent's own prompt is not changed); ``options`` sets model settings
    (:class:`~ketch.llm.StreamOptions` field names: ``temperature``, ``max_tokens``, ...);
    ``before_tool_call`` and ``after_tool_call`` run after the agent's own (the first
    answer that is not None wins), ``middlewares`` wrap inside the agent's, ``guardrails``
    join the agent's, ``after_turn`` and ``at_stop`` are checks (:data:`AfterTurnCheck`,
    :data:`StopCheck`), asked in order. ``tools_view`` chooses the tools each model call
    is sent (:data:`ToolsView`; several apply in order), and ``wrap_context_manager``
    wraps the agent's context manager, when it has one (e.g. to keep what a compaction
    would drop); ``next_turn`` hooks are asked after each turn,
    after the agent's own ``prepare_next_turn``, and their replacements
    (:class:`~ketch.loop.NextTurn`: model, thinking, ...) apply from the next turn (a
    later hook's value for a field wins); ``hosted_tools`` are tools the provider runs
    itself (:class:`~ketch.llm.HostedTool`), joining the run's
    ``StreamOptions.hosted_tools`` (a kind asked for twice is an error naming both).
    """

    tools: Sequence[Tool] = ()
    instructions: str | None = None
    options: Mapping[str, Any] = msgspec.field(default_factory=dict)
    before_tool_call: Callable[[ToolCallInfo], MaybeAwaitable[BeforeToolCallResult | None]] | None = None
    after_tool_call: Callable[[ToolCallInfo, ToolResult], MaybeAwaitable[AfterToolCallResult | None]] | None = None
    middlewares: Sequence[Middleware] = ()
    guardrails: Sequence[Guardrail] = ()
    after_turn: Sequence[AfterTurnCheck] = ()
    at_stop: Sequence[StopCheck] = ()
    tools_view: ToolsView | None = None
    wrap_context_manager: Callable[[ContextManager], ContextManager] | None = None
    next_turn: Sequence[Callable[[TurnInfo], MaybeAwaitable[NextTurn | None]]] = ()
    hosted_tools: Sequence[HostedTool] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - _OPTION_FIELDS)
        if unknown:
            raise ValueError(
                f"Contribution.options: unknown model setting {unknown[0]!r}; "
                f"allowed: {', '.join(sorted(_OPTION_FIELDS))}"
            )


class Capability:
    """Optional behaviour given to an agent as one value (see the module docstring).

    Subclass it and override :meth:`contribute`; ``name`` (default: the class name) is
    how errors and listings name it. A capability that only adds tools or instructions
    can be built without subclassing: ``Capability.of(tools=[...], instructions="...")``.
    """

    name: str = ""

    def contribute(self) -> Contribution:
        """What this capability adds to a run starting now (called once per run)."""
        return Contribution()

    @staticmethod
    def of(name: str = "capability", **parts: Any) -> Capability:
        """A capability contributing ``parts`` (the fields of :class:`Contribution`) to every run."""
        return _Fixed(name, Contribution(**parts))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.label!r})"

    @property
    def label(self) -> str:
        """``name``, or the class name when it has none."""
        return self.name or type(self).__name__


class _Fixed(Capability):
    __slots__ = ("_contribution", "name")

    def __init__(self, name: str, contribution: Contribution) -> None:
        self.name = name
        self._contribution = contribution

    def contribute(self) -> Contribution:
        return self._contribution


class Composed(msgspec.Struct, frozen=True):
    """A run's configuration with its capabilities folded in (see :func:`compose`)."""

    config: LoopConfig[Any]
    tools: tuple[Tool, ...]
    instructions: str
    after_turn: tuple[AfterTurnCheck, ...]
    at_stop: tuple[StopCheck, ...]
    view: ToolsView | None = None


def compose(config: LoopConfig[Any], tools: Sequence[Tool]) -> Composed:
    """Ask each of ``config.capabilities`` for its contribution and fold them in:
    ``config`` with the hooks, middlewares, guardrails and options composed, the tools
    the capabilities add (``tools`` are the agent's own, for the clash check), the
    instructions to append to the system prompt, and their checks. Raises
    ``ValueError`` for a tool name given twice or a bad contribution."""
    parts: list[tuple[Capability, Contribution]] = []
    for capability in config.capabilities:
        if not isinstance(capability, Capability):
            raise TypeError(f"capabilities must be Capability objects, got {type(capability).__name__}")
        contribution = capability.contribute()
        if not isinstance(contribution, Contribution):
            raise TypeError(
                f"capability {capability.label!r}: contribute() must return a Contribution, "
                f"got {type(contribution).__name__}"
            )
        parts.append((capability, contribution))
    owners = {t.name: "the agent" for t in tools}
    added: list[Tool] = []
    sections: list[str] = []
    befores = [config.before_tool_call] if config.before_tool_call is not None else []
    afters = [config.after_tool_call] if config.after_tool_call is not None else []
    middlewares = list(config.middlewares)
    guardrails = list(config.guardrails)
    options: dict[str, Any] = {}
    after_turn: list[AfterTurnCheck] = []
    at_stop: list[StopCheck] = []
    views: list[ToolsView] = []
    context_manager = config.context_manager
    next_turn = [config.prepare_next_turn] if config.prepare_next_turn is not None else []
    hosted = list(config.options.hosted_tools or ())
    hosted_owners = {h.kind: "the agent's options" for h in hosted}
    for capability, c in parts:
        for h in c.hosted_tools:
            if not isinstance(h, HostedTool):
                raise TypeError(f"capability {capability.label!r}: hosted_tools must be HostedTool objects")
            _claim(hosted_owners, h.kind, capability, "asks for the hosted tool {!r}, which {} already asks for")
            hosted.append(h)
        for tool in c.tools:
            _claim(owners, tool.name, capability, "adds a tool named {!r}, which {} already has")
            added.append(tool)
        if c.instructions:
            sections.append(c.instructions.strip())
        options.update(c.options)
        if c.before_tool_call is not None:
            befores.append(c.before_tool_call)
        if c.after_tool_call is not None:
            afters.append(c.after_tool_call)
        middlewares.extend(c.middlewares)
        guardrails.extend(c.guardrails)
        after_turn.extend(c.after_turn)
        at_stop.extend(c.at_stop)
        if c.tools_view is not None:
            views.append(c.tools_view)
        if c.wrap_context_manager is not None and context_manager is not None:
            context_manager = c.wrap_context_manager(context_manager)
        next_turn.extend(c.next_turn)
    changes: dict[str, Any] = {}
    if context_manager is not config.context_manager:
        changes["context_manager"] = context_manager
    if len(next_turn) > 1 or (next_turn and config.prepare_next_turn is None):
        changes["prepare_next_turn"] = _merged_next_turn(next_turn)
    if len(befores) > 1:
        changes["before_tool_call"] = _first_answer(befores)
    elif befores:
        changes["before_tool_call"] = befores[0]
    if len(afters) > 1:
        changes["after_tool_call"] = _first_answer(afters)
    elif afters:
        changes["after_tool_call"] = afters[0]
    if len(middlewares) != len(config.middlewares):
        changes["middlewares"] = tuple(middlewares)
    if len(guardrails) != len(config.guardrails):
        changes["guardrails"] = tuple(guardrails)
    if len(hosted) != len(config.options.hosted_tools or ()):
        options["hosted_tools"] = tuple(hosted)
    if options:
        changes["options"] = msgspec.structs.replace(config.options, **options)
    changes["capabilities"] = ()  # folded in: composing the result again adds nothing
    return Composed(
        config=dataclasses.replace(config, **changes),
        tools=tuple(added),
        instructions="\n\n".join(sections),
        after_turn=tuple(after_turn),
        at_stop=tuple(at_stop),
        view=views[0] if len(views) == 1 else _in_turn(views) if views else None,
    )


def _in_turn(views: Sequence[ToolsView]) -> ToolsView:
    """One view applying ``views`` in order."""

    def view(tools: Sequence[Tool], messages: Sequence[Message]) -> Sequence[Tool]:
        for v in views:
            tools = v(tools, messages)
        return tools

    return view


def _merged_next_turn(hooks: Sequence[Callable[..., Any]]) -> Callable[[TurnInfo], Any]:
    """One ``prepare_next_turn`` asking every hook in order; a later answer's field wins."""

    async def merged(info: TurnInfo) -> NextTurn | None:
        fields: dict[str, Any] = {}
        for hook in hooks:
            answer = await maybe_await(hook(info))
            if answer is not None:
                fields.update({k: v for k, v in msgspec.structs.asdict(answer).items() if v is not None})
        return NextTurn(**fields) if fields else None

    return merged


def _claim(owners: dict[str, str], key: str, capability: Capability, clash: str) -> None:
    """Record ``capability`` as the owner of ``key``; a key already owned is a
    ``ValueError`` naming both (``clash``: the message after the capability's name)."""
    if key in owners:
        raise ValueError(f"capability {capability.label!r} " + clash.format(key, owners[key]))
    owners[key] = f"capability {capability.label!r}"


def _first_answer(hooks: Sequence[Callable[..., Any]]) -> Callable[..., Any]:
    """One hook asking ``hooks`` in order; the first answer that is not None wins."""

    async def composed(*args: Any) -> Any:
        for hook in hooks:
            answer = await maybe_await(hook(*args))
            if answer is not None:
                return answer
        return None

    return composed
