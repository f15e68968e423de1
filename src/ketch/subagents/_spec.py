"""Subagent definitions: :class:`SubagentSpec`, and loading them from Markdown agent files."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import get_args

from ..llm import Model
from ..llm import ThinkingLevel
from ..loop import Tool
from ..permissions import parse_mode

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_THINKING: tuple[ThinkingLevel, ...] = get_args(ThinkingLevel)
ISOLATIONS: tuple[str | None, ...] = (None, "worktree")
"""What a subagent's or teammate's ``isolation`` may be: None (the parent's workspace) or ``"worktree"``."""
_MODE_NAMES = {"acceptEdits": "accept_edits", "bypassPermissions": "bypass", "dontAsk": "bypass"}


class SubagentFileError(ValueError):
    """An agent file is not valid; the message is one line naming the file and the value."""


@dataclasses.dataclass(frozen=True, slots=True)
class SubagentSpec:
    """A subagent the ``subagent`` tool can start.

    ``model`` is a :class:`~ketch.llm.Model`, a ``"provider:model"`` string, or None to
    use the parent's. ``tools`` are names of the parent's tools (a subset) and/or
    :class:`~ketch.loop.Tool` objects of its own; None gives it the parent's tools except
    ``subagent`` and the ``task_*`` tools (name ``"subagent"`` to let it delegate in
    turn, up to the depth limit). ``thinking`` and ``permission_mode`` default to the
    parent's; ``permission_mode`` needs the parent's ``before_tool_call`` to be a
    :class:`ketch.permissions.PermissionEngine`'s (else ``Subagents.attach`` raises a
    ValueError, and a later call of this agent fails with that message). ``source`` is the file it was loaded
    from, if any. ``output_type`` (a dataclass, TypedDict, msgspec Struct or pydantic
    model) asks the subagent for structured output (``response_format``); its answer is
    parsed and validated, kept as :attr:`SubagentRun.output` and passed to the parent as
    JSON (an answer that does not validate is a failure naming the problem).
    ``isolation="worktree"`` runs each of its runs in a new git worktree of the parent's
    workspace, on its own branch (:mod:`ketch.worktrees`): its file tools and bash work
    there, so parallel writers never touch the same files; the result names the worktree.
    """

    name: str
    description: str
    system_prompt: str = ""
    model: Model | str | None = None
    tools: Sequence[str | Tool] | None = None
    max_turns: int | None = None
    thinking: ThinkingLevel | None = None
    permission_mode: str | None = None
    source: str | None = None
    output_type: Any = None
    isolation: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"subagent name must be letters, digits, '-' or '_' (starting with a letter or digit), got {self.name!r}"
            )
        if self.max_turns is not None and (
            isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1
        ):
            raise ValueError(f"max_turns must be a positive integer, got {self.max_turns!r}")
        if self.thinking is not None and self.thinking not in _THINKING:
            raise ValueError(f"thinking must be one of {', '.join(_THINKING)}, got {self.thinking!r}")
        if self.permission_mode is not None:
            parse_mode(self.permission_mode)
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be 'worktree' or absent, got {self.isolation!r}")


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """The ``key: value`` front matter (scalars, inline ``[a, b]`` and ``- item`` lists)
    and the body after it."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SubagentFileError(f"{where}: an agent file must start with '---' front matter (name, description)")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SubagentFileError(f"{where}: the front matter has no closing '---'") from None
    data: dict[str, Any] = {}
    key: str | None = None
    for number, raw in enumerate(lines[1:end], start=2):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        stripped = line.strip()
        if stripped.startswith("- ") and key is not None:
            current = data.get(key)
            if current == "":
                current = data[key] = []
            if isinstance(current, list):
                current.append(_scalar(stripped[2:]))
                continue
        if ":" not in line or line[:1].isspace():
            raise SubagentFileError(f"{where}:{number}: expected 'key: value', got {stripped!r}")
        key, _, value = line.partition(":")
        key = key.strip()
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            data[key] = [_scalar(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            data[key] = _scalar(value)
    body = "\n".join(lines[end + 1 :]).strip()
    return data, body


def _names(value: Any) -> list[str]:
    items = value if isinstance(value, list) else str(value).split(",")
    return [v.strip() for v in items if v.strip()]


def parse_agent_file(text: str, *, source: str = "<agent file>") -> SubagentSpec:
    """A :class:`SubagentSpec` from an agent file's text (Claude Code's shape)::

        ---
        name: reviewer
        description: Reviews a diff for bugs
        tools: read, grep, ls          # optional; default: the parent's tools
        model: anthropic:claude-haiku-4-5   # optional; "inherit" or absent: the parent's
        max_turns: 8                   # optional
        thinking: low                  # optional
        permission_mode: plan          # optional (also permissionMode, acceptEdits ...)
        isolation: worktree            # optional: each run in its own git worktree
        ---
        You review diffs. ...          (the system prompt)

    Raises :class:`SubagentFileError` (one line naming ``source`` and the bad value).
    """
    data, body = _front_matter(text, source)
    name = data.get("name")
    if not name:
        raise SubagentFileError(f"{source}: 'name' is missing from the front matter")
    description = data.get("description")
    if not description:
        raise SubagentFileError(f"{source}: 'description' is missing from the front matter")
    tools = _names(data["tools"]) if data.get("tools") not in (None, "", "*") else None
    model = data.get("model") or None
    if model == "inherit":
        model = None
    turns_text = data.get("max_turns", data.get("maxTurns"))
    max_turns: Any = None
    if turns_text not in (None, ""):
        try:
            max_turns = int(str(turns_text))
        except ValueError:
            raise SubagentFileError(f"{source}: max_turns must be a positive integer, got {turns_text!r}") from None
    thinking = data.get("thinking") or None
    mode = data.get("permission_mode", data.get("permissionMode")) or None
    if isinstance(mode, str):
        mode = _MODE_NAMES.get(mode, mode)
    isolation = data.get("isolation") or None
    try:
        return SubagentSpec(
            name=str(name),
            description=str(description),
            system_prompt=body,
            model=model,
            tools=tools,
            max_turns=max_turns,
            thinking=thinking,
            permission_mode=mode,
            source=source,
            isolation=isolation,
        )
    except ValueError as exc:
        raise SubagentFileError(f"{source}: {exc}") from None


def load_agent_file(path: str | Path) -> SubagentSpec:
    """:func:`parse_agent_file` on a file; unreadable files raise :class:`SubagentFileError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SubagentFileError(f"{p}: cannot read the agent file ({exc.__class__.__name__})") from None
    return parse_agent_file(text, source=str(p))


def load_agents(directories: Iterable[str | Path]) -> tuple[list[SubagentSpec], list[str]]:
    """Every ``*.md`` agent file of ``directories`` (missing ones are skipped), sorted by
    name; a later directory's agent replaces an earlier one of the same name. Returns the
    specs and one error line per bad file (bad files are left out)."""
    found: dict[str, SubagentSpec] = {}
    errors: list[str] = []
    for directory in directories:
        d = Path(directory)
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.md")):
            try:
                spec = load_agent_file(path)
            except SubagentFileError as exc:
                errors.append(str(exc))
                continue
            found[spec.name] = spec
    return [found[n] for n in sorted(found)], errors
