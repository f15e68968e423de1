"""What the command gives the embedded 135M model so that it does what it can reliably do.

Left free, SmolLM2-135M invents paths (``/Users/m``, ``C:\\Users``) and commands in its
calls and sets options it does not need (``limit: 1``). Its calls are grammar-constrained
by the local provider (:mod:`ketch.llm._providers.local_grammar`), and a schema's
``enum`` becomes part of that grammar. :class:`Grounding` is a capability whose tools view
gives the model compact tools (their required arguments only) whose arguments are
grounded in the request and the workspace:

- ``read``: the files the request names, else every file;
- ``ls``: the folders the request names, else ``.``;
- ``write``: the new file names the request names (a word with an extension that does
  not exist yet), else a free path;
- ``bash``: the commands the system prompt says it is for, on the paths the request
  names: ``mv FILE NEW`` and ``mv FILE FOLDER`` when it asks to rename or move, else
  ``wc -l FILE`` and ``ls FOLDER | wc -l`` (count); a free command when it names none.

The workspace is read again at the start of every run and after every turn, at most
:data:`MAX_PATHS` entries (a larger workspace keeps free paths), hidden entries and links
left out. The request is the last user message of the transcript (a tools view sees a
prompt once it is committed), so every entry point (``ketch run``, the terminal, ``ketch
eval``, ``ketch serve``, ACP) grounds the same way; before its first answer, the model is
offered only the tool the request's words name (:func:`ketch.cli._factory.route_embedded`). Whatever the model chooses still goes through the permission
engine and the sandbox like any call.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..llm import Message
from ..llm import UserMessage
from ..loop import Capability
from ..loop import Contribution
from ..loop import Tool

__all__ = ["MAX_PATHS", "Grounding", "grounded_arguments", "workspace_paths"]

MAX_PATHS = 200
"""More files or folders than this in the workspace: the paths are left free."""

_DEPTH = 3
_NEW_NAME = re.compile(r"(?<![\w./-])([\w-]+(?:/[\w-]+)*\.[A-Za-z0-9]{1,5})(?![\w/-])")


def workspace_paths(root: Path, limit: int = MAX_PATHS) -> tuple[list[str], list[str]] | None:
    """The files and folders under ``root`` as relative paths (folders include ``.``),
    breadth first to three levels, hidden entries and links left out; None when there
    are more than ``limit`` of either."""
    files: list[str] = []
    folders: list[str] = ["."]
    level = [(root, "")]
    for _ in range(_DEPTH):
        below: list[tuple[Path, str]] = []
        for folder, prefix in level:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                rel = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    folders.append(rel)
                    below.append((Path(entry.path), f"{rel}/"))
                elif entry.is_file(follow_symlinks=False):
                    files.append(rel)
                if len(files) > limit or len(folders) > limit:
                    return None
        level = below
    return files, folders


def _named(request: str, paths: Sequence[str]) -> list[str]:
    """The ``paths`` the request names (the path or its last part, as a whole word), in
    the order the request names them."""
    low = request.lower()
    found: list[tuple[int, str]] = []
    for path in paths:
        for name in dict.fromkeys((path.lower(), path.rsplit("/", 1)[-1].lower())):
            match = re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", low)
            if match is not None:
                found.append((match.start(), path))
                break
    return [p for _, p in sorted(found)]


def grounded_arguments(request: str, files: Sequence[str], folders: Sequence[str]) -> dict[str, list[str]]:
    """For each tool, the values its one argument may take for ``request`` (see the
    module docstring); a tool without an entry keeps a free argument."""
    named_files = _named(request, files)
    named_folders = [f for f in _named(request, [f for f in folders if f != "."]) if f not in named_files]
    existing = {p.lower() for p in (*files, *folders)}
    new = [
        n
        for n in dict.fromkeys(m.group(1) for m in _NEW_NAME.finditer(request))
        if n.lower() not in existing and not any(n.lower() in f.lower() for f in named_files)  # (a part of one)
    ]
    q = shlex.quote
    if re.search(r"\b(rename|move|mv)\b", request.lower()):
        commands = [f"mv {q(f)} {q(n)}" for f in named_files for n in (*new, *named_folders)]
    else:
        commands = [f"wc -l {q(f)}" for f in named_files] + [f"ls {q(d)} | wc -l" for d in named_folders]
    out: dict[str, list[str]] = {
        "read": named_files or list(files),
        "ls": named_folders or ["."],
    }
    if new:
        out["write"] = new
    if commands:
        out["bash"] = commands
    return out


_ARGUMENT = {"read": "path", "ls": "path", "write": "path", "bash": "command"}


def _compact(tool: Tool, values: list[str] | None) -> Tool:
    """A copy of ``tool`` with its required arguments only, the grounded one (if any) one of ``values``."""
    parameters: dict[str, Any] = dict(tool.parameters)
    properties: dict[str, Any] = dict(parameters.get("properties") or {})
    required = [k for k in parameters.get("required") or () if k in properties]
    argument = _ARGUMENT.get(tool.name)
    keep = required or ([argument] if argument in properties else [])
    properties = {k: dict(properties[k]) for k in keep}
    if values and argument in properties:
        properties[argument]["enum"] = values
    parameters.update(properties=properties, required=keep)
    compact = copy.copy(tool)
    compact.parameters = parameters
    return compact


class Grounding(Capability):
    """Compact tools with arguments grounded in the request and the workspace at ``root``
    (see the module docstring)."""

    name = "grounding"

    def __init__(self, root: Path, route: Callable[[str, Sequence[str]], str] | None = None) -> None:
        self.root = root
        self.route = route

    def contribute(self) -> Contribution:
        return Contribution(tools_view=self.view)

    def view(self, tools: Sequence[Tool], messages: Sequence[Message]) -> Sequence[Tool]:
        """``tools`` compacted, their arguments grounded in what exists now and in the
        request (the last user message); before the request's first answer, only the tool
        ``route`` picks for it, when it picks one."""
        request, answered = _request(messages)
        if self.route is not None and request and not answered:
            picked = self.route(request, [t.name for t in tools])
            if any(t.name == picked for t in tools):
                tools = [t for t in tools if t.name == picked]
        found = workspace_paths(self.root)
        grounded = grounded_arguments(request, *found) if found is not None else {}
        return [_compact(tool, grounded.get(tool.name)) for tool in tools]


def _request(messages: Sequence[Message]) -> tuple[str, bool]:
    """The text of the last user message, and whether an assistant message follows it."""
    for back, message in enumerate(reversed(messages)):
        if isinstance(message, UserMessage):
            content = message.content
            text = content if isinstance(content, str) else " ".join(getattr(b, "text", "") for b in content)
            return text, back > 0
    return "", False
