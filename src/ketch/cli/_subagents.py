"""Subagents and background tasks in the ``ketch`` command.

Agent files are read from ``<user config dir>/agents/*.md`` and the project's
``.ketch/agents/*.md`` (a project agent replaces a user agent of the same name). A
project agent's fields pass the trust gate (:mod:`ketch.cli._trust`): in an untrusted
project its ``model``, its ``thinking`` and a ``permission_mode`` other than ``default``
(the spelling normalised first: ``accept-edits``, ``acceptEdits``) are left out (the
agent keeps the parent's), and the command says so with the other ignored settings. A
bad agent file is a configuration error (one line naming the file and the value; exit
code 2).

With at least one agent, the agent gets the ``subagent`` tool, the ``task_*`` tools on
one :class:`ketch.tasks.TaskRegistry`, and ``bash`` takes ``background: true``; finished
background work is delivered to the agent (steering while it runs, a follow-up when
idle). Subagent events are shown nested and collapsed: one dim line per tool call of a
subagent and one when it ends (:func:`subagent_line`); ``-o stream-json`` writes them as
``tool_execution_update`` lines whose ``partial`` is ``{"type": "subagent_event", "path":
..., "event": {...}}`` (the inner event slimmed like a top-level one).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from ..subagents import MODES
from ..subagents import SUBAGENT_TOOLS
from ..subagents import SubagentEvent
from ..subagents import Subagents
from ..subagents import SubagentSpec
from ..subagents import load_agents
from ..tasks import TaskRegistry
from ..tasks import notify_agent
from ._config import ConfigError
from ._config import Settings
from ._dirs import config_dir
from ._plugins import plugin_directories
from ._project import PROJECT_AGENTS
from ._project import gated_agent
from ._trust import Gate
from ._trust import Trust

AGENTS_DIR = "agents"


def agent_directories(settings: Settings, environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """Where agent files are read from, in order: the user's, the enabled plugins', then the project's."""
    dirs = [(config_dir(environ) / AGENTS_DIR, "user"), *plugin_directories("agents", environ)]
    if settings.project_root is not None:
        dirs.append((settings.project_root / PROJECT_AGENTS, "project"))
    return dirs


def load_cli_agents(settings: Settings, environ: Mapping[str, str] | None = None) -> list[SubagentSpec]:
    """The agents of the user's and the project's agent directories (sorted by name);
    :class:`ConfigError` for the first bad file."""
    found: dict[str, SubagentSpec] = {}
    trust = settings.trust if settings.trust is not None else Trust(settings.project_root or Path.cwd())
    for directory, kind in agent_directories(settings, environ):
        specs, errors = load_agents([directory])
        if errors:
            raise ConfigError(errors[0])
        for spec in specs:
            if kind == "project":
                # the same gate as the settings' (whose ignored lines were shown already)
                spec = gated_agent(spec, Path(spec.source or directory), Gate(trust))
            found[spec.name] = spec
    return [found[n] for n in sorted(found)]


def attach_subagents(agent: Any, settings: Settings, environ: Mapping[str, str] | None = None) -> Subagents | None:
    """Give ``agent`` the subagents of the agent files, the task tools and background
    bash (see the module docstring); None (and nothing changed) when there are no agents."""
    specs = load_cli_agents(settings, environ)
    if not specs:
        return None
    from ..tools import BashTool

    registry = TaskRegistry()
    for tool in agent.tools:
        if isinstance(tool, BashTool):
            tool.enable_background(registry)
    # The embedded 135M model gets the single mode only: its grammar then requires both
    # `agent` and `task` (with every mode optional it stops after `agent`).
    modes = ("single",) if agent.model.provider == "local" else MODES
    subagents = Subagents(specs, tasks=registry, modes=modes).attach(agent)
    notify_agent(registry, agent, kinds=frozenset({"shell"}))
    return subagents


def added_tool_names(settings: Settings, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The names of the tools :func:`attach_subagents` adds (none without agent files)."""
    if not load_cli_agents(settings, environ):
        return ()
    return SUBAGENT_TOOLS


# -- display ---------------------------------------------------------------------------------


def _depth(path: str) -> int:
    return path.count("/")


def subagent_line(partial: Any, call_line: Callable[[str, Any], str]) -> str | None:
    """The collapsed line shown for a subagent event, or None for events not shown: a
    tool call of the subagent (``  ↳ main/helper#1 → read notes.txt``) and its end
    (``  ↳ main/helper#1 done: 2 turns, 1 tool call``, or the reason it did not finish)."""
    if not isinstance(partial, SubagentEvent):
        return None
    event = partial.event
    indent = "  " * _depth(partial.path)
    if event.type == "tool_execution_start":
        return f"{indent}↳ {partial.path} {call_line(event.tool_name, event.args)}"
    if event.type == "agent_end":
        s = event.summary
        calls = f"{s.tool_calls} tool call{'s' if s.tool_calls != 1 else ''}"
        head = "done" if s.end_reason == "stop" else f"ended ({s.end_reason}{': ' + s.error if s.error else ''})"
        return f"{indent}↳ {partial.path} {head}: {s.turns} turn{'s' if s.turns != 1 else ''}, {calls}"
    return None


class _Nested(msgspec.Struct, kw_only=True, tag="subagent_event", tag_field="type"):
    path: str
    event: Any


class _NestedUpdate(msgspec.Struct, kw_only=True, tag="tool_execution_update", tag_field="type"):
    tool_call_id: str
    tool_name: str
    partial: _Nested


def encode_nested(event: Any, encode: Callable[[Any], Any]) -> Any:
    """A ``tool_execution_update`` carrying a subagent event, with the inner event
    encoded by ``encode`` (slimmed like a top-level event; the call's arguments are not
    repeated), or None for any other event."""
    partial = getattr(event, "partial", None)
    if not isinstance(partial, SubagentEvent):
        return None
    return _NestedUpdate(
        tool_call_id=event.tool_call_id,
        tool_name=event.tool_name,
        partial=_Nested(path=partial.path, event=encode(partial.event)),
    )
