"""Project trust for the ``ketch`` command: one decision, applied in one place.

A cloned repository is somebody else's code. Every setting the command reads from a
project -- its config files at every level (``.ketch/config.toml``,
``.ketch/config.local.toml``), its agent files (``.ketch/agents/*.md``), its hooks, its
``.mcp.json`` servers, and what comes later (skills, commands, plugins) -- passes
through a :class:`Gate` before it is applied. The gate admits it when the project is
trusted, or when it is on the short list of settings that can only make ketch stricter
(:data:`STRICTER_ONLY`); anything else is left out and listed in :attr:`Gate.ignored`,
which the command prints as one line on stderr saying how to trust the project.

**Trusted** means the user said so (:func:`decide`): ``--trust-project``,
``KETCH_TRUST_PROJECT=1`` (the environment is the user's own), a trust remembered in the
user config directory (``trusted_projects.json``), or a yes to the question an
interactive session asks. A project with nothing to ignore is not thereby trusted.

What the trust covers: the project root's own ``.ketch`` (config files, agent files,
skills, commands), ``.claude`` and ``.agents`` (skills and commands) and ``.mcp.json``, which the sandbox keeps read-only and cannot create and the file tools
ask about; and the config files in sub-folders (``sub/.ketch/config.toml``) the user
trusted by name: those that existed when they answered yes (remembered with the
project). A config file in a sub-folder can be created by a command (the sandbox cannot
keep a new file from appearing at any depth), so one not trusted by name counts as
untrusted, also under ``--trust-project``, until the user says yes to it in an
interactive session (:meth:`Trust.covers`).

The stricter-only list (each a named check of the value against the setting so far):

* ``permissions.deny`` and ``permissions.ask``: always (rules only add checks);
* ``permissions.mode``: only ``default`` (any spelling, normalised first). ``plan`` is
  not stricter from an untrusted project: it runs sandboxed read-only commands without
  asking, and the sandbox does not limit what they read;
* ``tools``: a subset of the tools so far;
* ``max_turns``, ``max_budget_usd``, ``max_tokens``: a limit set or lowered;
* ``thinking``: the level so far or a lower one;
* ``sandbox.enabled = true`` and ``sandbox.network = false``;
* ``memory = false`` (turning memory on needs trust: the memory's notes reach every request).
* ``web_fetch = false`` (turning the web_fetch tool on needs trust: it reaches the network).
* ``web_search = false`` (turning web search on needs trust, and so does a ``[web_search]``
  table: its endpoint and key variable);
* ``hosted_tools``: a subset of the kinds so far.

Everything else needs trust: ``model`` and every ``[providers.*]`` field (a project
may not choose the model, the endpoint or the credentials), ``permissions.allow``,
other modes, ``hooks``, ``sandbox.env_allow``, ``system_prompt``, ``temperature``,
``compaction``, ``context_window``, MCP servers, and an agent file's ``model``,
``thinking`` and a ``permission_mode`` other than ``default``.

A new kind of project file (skills, commands, plugins) plugs in by calling
:meth:`Gate.admit` for each thing it would apply, with a name of its own: a name not in
:data:`STRICTER_ONLY` needs trust, and what is left out joins the same stderr line.

Instruction files (``AGENTS.md``, ``CLAUDE.md``) only tell the model things and are read
in any project; their imports never leave the project, trusted or not (see
:mod:`ketch.cli._instructions`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from ..llm._model import THINKING_LEVELS
from ..permissions import parse_mode

TRUST_ENV = "KETCH_TRUST_PROJECT"
TRUST_FILE = "trusted_projects.json"
HOW_TO_TRUST = f"trust it with --trust-project or {TRUST_ENV}=1"
ROOT_ENTRIES = (".ketch", ".mcp.json", ".claude", ".agents")
"""The project root's entries a trust covers as a whole (the sandbox keeps them read-only;
``.claude`` and ``.agents`` hold the skills and commands other agents share)."""
HOW_TO_TRUST_FILES = "a command could have made them: trust them by answering yes in an interactive ketch session"


# -- the decision ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Trust:
    """Whether the user trusts the project at ``root`` and how they said so (``how``:
    ``flag --trust-project``, ``environment KETCH_TRUST_PROJECT``, ``remembered``,
    ``answered``; None: not trusted). ``known`` are the config files in sub-folders the
    user trusted by name (paths relative to the root)."""

    root: Path
    how: str | None = None
    known: frozenset[str] = frozenset()

    @property
    def trusted(self) -> bool:
        """Whether the user trusts the project at all."""
        return self.how is not None

    def covers(self, path: Path) -> bool:
        """Whether the trust covers the project file at ``path``: the root's own
        ``.ketch`` and ``.mcp.json`` (when trusted at all), a config file in a sub-folder
        when the user trusted it by name."""
        if self.how is None:
            return False
        rel = _relative(path, self.root)
        if rel is None:
            return False
        return rel.split("/", 1)[0] in ROOT_ENTRIES or rel in self.known


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


def _remembered(config_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((config_dir / TRUST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _entries(data: Mapping[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
    trusted = data.get("trusted")
    roots = [t for t in trusted if isinstance(t, str)] if isinstance(trusted, list) else []
    files = data.get("files")
    known: dict[str, list[str]] = {}
    if isinstance(files, dict):
        for root, names in files.items():
            if isinstance(root, str) and isinstance(names, list):
                known[root] = [n for n in names if isinstance(n, str)]
    return roots, known


def decide(root: Path, config_dir: Path, *, flag: bool = False, environ: Mapping[str, str] | None = None) -> Trust:
    """The user's word on the project at ``root``: ``flag`` (``--trust-project``), the
    environment variable, or the trust remembered in ``config_dir``."""
    env = os.environ if environ is None else environ
    roots, known = _entries(_remembered(config_dir))
    names = frozenset(known.get(str(root), ()))
    if flag:
        return Trust(root, "flag --trust-project", names)
    if _truthy(env.get(TRUST_ENV)):
        return Trust(root, f"environment {TRUST_ENV}", names)
    if str(root) in roots:
        return Trust(root, "remembered", names)
    return Trust(root)


def remembered_text(config_dir: Path, root: Path, files: Iterable[Path]) -> str:
    """The new ``trusted_projects.json`` text remembering that the user trusts ``root``
    and its config ``files`` (those in sub-folders are kept by name)."""
    roots, known = _entries(_remembered(config_dir))
    if str(root) not in roots:
        roots.append(str(root))
    names = known.setdefault(str(root), [])
    for path in files:
        rel = _relative(path, root)
        if rel is not None and rel.split("/", 1)[0] not in ROOT_ENTRIES and rel not in names:
            names.append(rel)
    data: dict[str, Any] = {"trusted": roots}
    kept = {r: sorted(n) for r, n in known.items() if n}
    if kept:
        data["files"] = kept
    return json.dumps(data, indent=2) + "\n"


# -- the stricter-only checks ---------------------------------------------------------------------

Check = Callable[[Any, Any], bool]
"""A check of a project's value against the value so far: True when it cannot widen."""


def always(value: Any, current: Any) -> bool:
    """Rules that only add checks (deny, ask)."""
    return True


def default_mode(value: Any, current: Any) -> bool:
    """A permission mode from a project: ``default`` only (normalised first)."""
    try:
        return parse_mode(value) == "default"
    except ValueError:
        return False


def narrows_tools(value: Any, current: Any) -> bool:
    """A tool list that is a subset of the tools so far (None: every built-in tool)."""
    return isinstance(value, list) and (current is None or set(value) <= set(current))


def narrows_kinds(value: Any, current: Any) -> bool:
    """A list of kinds that is a subset of the kinds so far (None: none)."""
    return isinstance(value, list) and set(value) <= set(current or ())


def lowers_limit(value: Any, current: Any) -> bool:
    """A limit set where there was none, or lowered."""
    return isinstance(value, (int, float)) and (current is None or value <= current)


def lowers_thinking(value: Any, current: Any) -> bool:
    """A thinking level at or below the level so far."""
    levels: tuple[str, ...] = THINKING_LEVELS
    return value in levels and current in levels and levels.index(value) <= levels.index(current)


def is_true(value: Any, current: Any) -> bool:
    """A switch that turns a protection on (``sandbox.enabled = true``)."""
    return value is True


def is_false(value: Any, current: Any) -> bool:
    """A switch that turns an opening off (``sandbox.network = false``)."""
    return value is False


STRICTER_ONLY: dict[str, Check] = {
    "permissions.deny": always,
    "permissions.ask": always,
    "permissions.mode": default_mode,
    "tools": narrows_tools,
    "max_turns": lowers_limit,
    "max_budget_usd": lowers_limit,
    "max_tokens": lowers_limit,
    "thinking": lowers_thinking,
    "sandbox.enabled": is_true,
    "sandbox.network": is_false,
    "memory": is_false,
    "web_fetch": is_false,
    "web_search": is_false,
    "hosted_tools": narrows_kinds,
    "agent.permission_mode": default_mode,
}
"""The settings an untrusted project may set, each with its check; every other setting
(and agent field) needs trust."""


def shown(name: str, value: Any) -> str:
    """How an ignored setting is named: ``name = value`` for a short scalar (strings as
    JSON, so control characters are escaped), the name alone otherwise."""
    if isinstance(value, bool):
        return f"{name} = {'true' if value else 'false'}"
    if isinstance(value, (int, float)) or (isinstance(value, str) and len(value) <= 60):
        return f"{name} = {json.dumps(value)}"
    return name


@dataclass(slots=True)
class Gate:
    """Admits a project's settings under a :class:`Trust` and collects what it leaves out."""

    trust: Trust
    ignored: list[str] = field(default_factory=list)

    def admit(self, name: str, value: Any, origin: Path, *, current: Any = None, label: str | None = None) -> bool:
        """Whether the setting ``name`` (a :data:`STRICTER_ONLY` key, or any other name,
        which needs trust) with ``value`` from the project file ``origin`` applies;
        ``current`` is the value so far. A setting left out is listed as ``label`` (default:
        :func:`shown`) with its file."""
        if self.trust.covers(origin):
            return True
        check = STRICTER_ONLY.get(name)
        if check is not None and check(value, current):
            return True
        self.ignored.append(f"{label if label is not None else shown(name, value)} ({origin})")
        return False

    def line(self) -> str | None:
        """The one stderr line about the ignored settings (None when there are none)."""
        if not self.ignored:
            return None
        if not self.trust.trusted:
            return (
                f"ketch: ignored settings of the untrusted project {self.trust.root}: "
                f"{'; '.join(self.ignored)} ({HOW_TO_TRUST})"
            )
        return (
            f"ketch: ignored settings of config files in sub-folders of the project {self.trust.root} "
            f"not trusted by name yet: {'; '.join(self.ignored)} ({HOW_TO_TRUST_FILES})"
        )
