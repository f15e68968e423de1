"""Folding an agent's capabilities into a run: :func:`compose`.

Each run asks every capability of its configuration for its
:class:`~ketch.loop.Contribution` and folds them into the run's configuration, tools,
system prompt and checks (see :mod:`ketch.loop._capability`). Loaded with the first run
that has capabilities.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import msgspec

from ..llm._messages import Message
from ..llm._model import HostedTool
from ._capability import AfterTurnCheck
from ._capability import Capability
from ._capability import Contribution
from ._capability import StopCheck
from ._capability import ToolsView
from ._config import LoopConfig
from ._hooks import NextTurn
from ._hooks import TurnInfo
from ._hooks import maybe_await
from ._tool import Tool

__all__ = ["Composed", "compose"]


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
