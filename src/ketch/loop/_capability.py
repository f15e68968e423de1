"""The capability seam: optional behaviour an agent is given as one value.

A :class:`Capability` bundles what a feature adds to an agent: tools, a section of the
system prompt, model settings, tool hooks, guardrails, and checks that decide what comes
after a turn or when the model would stop. Give capabilities to an agent
(``Agent(model, capabilities=[...])``) or a loop (``LoopConfig.capabilities``); each run
asks every capability for its :class:`Contribution` once, at its start, so a capability
may keep per-run state in what it returns.

Nothing in the loop knows any capability: :func:`~ketch.loop._compose.compose` folds their contributions into
the run's configuration (its tool hooks, middlewares and guardrails), its tools, its
system prompt and its options, and the run's ordered checks take their checks
(:class:`~ketch.loop._controls.Checks`): a new feature lands as a capability, never as a
new branch in the loop or a new field of its configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import TypeAlias

import msgspec

from ..llm._messages import Message
from ..llm._model import HostedTool
from ..llm._model import StreamOptions
from ._guardrails import Guardrail
from ._hooks import AfterToolCallResult
from ._hooks import BeforeToolCallResult
from ._hooks import ContextManager
from ._hooks import MaybeAwaitable
from ._hooks import Middleware
from ._hooks import NextTurn
from ._hooks import StopInfo
from ._hooks import ToolCallInfo
from ._hooks import TurnInfo
from ._next import Continue
from ._next import End
from ._tool import Tool
from ._tool import ToolResult

__all__ = ["AfterTurnCheck", "Capability", "Contribution", "StopCheck", "ToolsView"]

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
