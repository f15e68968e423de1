"""Agent options by name: checking keywords against :class:`~ketch.loop.AgentOptions`,
LoopConfig's defaults, and what a child agent takes from its parent (:data:`INHERITANCE`).

A child agent is a subagent (:mod:`ketch.subagents`) or a teammate spawned from another
agent (:meth:`ketch.teams.Team.spawn`). Both build it with :func:`derived_options`, so
what a child inherits is decided here, once, per option.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Literal
from typing import NamedTuple
from typing import TypeAlias

import msgspec

from ._config import AgentOptions
from ._config import LoopConfig

OPTION_NAMES: tuple[str, ...] = tuple(AgentOptions.__annotations__)
"""The agent options (:class:`~ketch.loop.AgentOptions`' keys), in declaration order."""

_OPTIONS = frozenset(OPTION_NAMES)
_FIELDS = {f.name: f for f in dataclasses.fields(LoopConfig)}


def loop_default(name: str) -> Any:
    """LoopConfig's default of the field ``name`` (the one place defaults are declared)."""
    f = _FIELDS[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise KeyError(f"LoopConfig.{name} has no default")


def check_options(given: Iterable[str], where: str, own: Iterable[str] = ()) -> None:
    """Raise a one-line ``TypeError`` for the first name in ``given`` that is neither an
    agent option nor one of ``own`` (the caller's own keywords), naming the closest
    allowed name and every allowed one."""
    own = tuple(own)
    for key in given:
        if key in _OPTIONS or key in own:
            continue
        import difflib

        allowed = [*own, *OPTION_NAMES]
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"{where} got an unexpected keyword argument {key!r}{hint}; allowed: {', '.join(allowed)}")


Inheritance: TypeAlias = Literal["inherit", "reset", "override"]
"""What a child agent gets for an option: ``inherit`` the parent's value; ``reset``
LoopConfig's default (the parent's value is about the parent's own task);
``override`` what the child's own definition says (a :class:`~ketch.subagents.SubagentSpec`
field, a keyword of :meth:`~ketch.teams.Team.spawn`), else LoopConfig's default.
Whatever the rule, a value the child's definition gives wins."""


class Rule(NamedTuple):
    """One row of :data:`INHERITANCE`: the rule and why."""

    rule: Inheritance
    why: str


INHERITANCE: dict[str, Rule] = {
    "thinking": Rule("inherit", "the parent's reasoning effort, unless the child's definition sets one"),
    "options": Rule(
        "inherit",
        "request options (temperature, max_tokens, extra...) carry over; the per-conversation ones "
        "(tool_choice, response_format, session_id, cache_key) are cleared",
    ),
    "max_turns": Rule("override", "a turn limit is about one task: the child's own, or none"),
    "max_budget_usd": Rule(
        "inherit",
        "a child run may spend at most the parent's budget; the parent's run counts what its "
        "children spent and ends when the sum reaches its budget",
    ),
    "usage_limits": Rule("inherit", "the same per-run and per-request limits bound every run the parent starts"),
    "stop_when": Rule("reset", "the predicates say when the parent's task is done, not the child's"),
    "on_stop": Rule("reset", "it judges the parent's task (a 'keep going until...' hook would drive the child)"),
    "length_recoveries": Rule("inherit", "how a cut answer is resumed does not depend on the task"),
    "length_recovery_prompt": Rule("inherit", "as length_recoveries"),
    "tool_execution": Rule("inherit", "tools shared with the parent keep their scheduling"),
    "max_tool_concurrency": Rule("inherit", "as tool_execution"),
    "steering_during_tools": Rule("inherit", "as tool_execution"),
    "max_tool_errors": Rule("inherit", "the same breaker on the same tools"),
    "max_repeated_tool_calls": Rule("inherit", "as max_tool_errors"),
    "tool_timeout": Rule("inherit", "the same tools, the same timeout"),
    "tool_abort_grace": Rule("inherit", "as tool_timeout"),
    "transform_context": Rule("inherit", "how messages are shaped for the model (redaction, pruning) applies to every transcript"),
    "convert_to_llm": Rule("inherit", "as transform_context: the child's transcript holds the same message types"),
    "get_api_key": Rule("inherit", "the child calls the same providers"),
    "before_tool_call": Rule(
        "inherit",
        "the permission gate: a child must not be a way around it (a subagent's permission_mode "
        "replaces it with a copy of the parent's engine in that mode)",
    ),
    "after_tool_call": Rule("inherit", "as before_tool_call"),
    "middlewares": Rule("inherit", "tool middlewares (telemetry, checkpoints) wrap every call of the tools"),
    "prepare_next_turn": Rule("reset", "it swaps the parent's model, tools or prompt between the parent's turns"),
    "context_manager": Rule(
        "reset",
        "a context manager keeps state about one transcript (a Compactor's token meter); "
        "the child's definition may give it its own",
    ),
    "guardrails": Rule("inherit", "input, output and tool guardrails: a child must not be a way around them"),
    "capabilities": Rule(
        "inherit", "what the parent was given (tools, instructions, hooks, checks): a child must not be a way around them"
    ),
    "deps": Rule("inherit", "the application's object, for the same tools"),
    "output_type": Rule("override", "the answer's type is the child's own (the parent's is about the parent's answer)"),
    "output_mode": Rule("override", "as output_type"),
    "output_retries": Rule("override", "as output_type"),
    "output_validators": Rule("override", "as output_type"),
}
"""What a child agent (subagent, spawned teammate) takes from its parent, per agent
option. ``tests/loop/test_options.py`` fails when an agent option has no row."""

_PER_CONVERSATION = {"tool_choice": None, "response_format": None, "session_id": None, "cache_key": None}


def derived_options(
    parent: LoopConfig[Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    where: str = "derived_options()",
    own: Iterable[str] = (),
) -> dict[str, Any]:
    """The options of a child of an agent whose config is ``parent``, as
    :data:`INHERITANCE` says, with ``overrides`` (the child's own definition) on top.
    Raises a one-line ``TypeError`` for an override that is not an agent option, naming
    ``where`` it was given and the allowed names (``own``: the caller's other keywords)."""
    overrides = overrides or {}
    check_options(overrides, where, own)
    out: dict[str, Any] = {}
    for name, (rule, _) in INHERITANCE.items():
        if rule != "inherit":
            continue
        value = getattr(parent, name)
        if name == "options":
            value = msgspec.structs.replace(value, **_PER_CONVERSATION)
        out[name] = value
    out.update(overrides)
    return out
