"""The ``ls`` tool: the entries of one folder, folders marked with a trailing ``/``.

Hidden entries are included. Entries are sorted by name, ignoring case; at most ``limit``
(default 500) are listed, with a note giving the total when more exist. Listing a named
pipe, device or socket is refused with a message saying what it is.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from ..loop import ToolContext
from ..loop import ToolResult
from ._workspace import Workspace
from ._workspace import WorkspaceError
from ._workspace import WorkspaceTool
from ._workspace import open_folder
from ._workspace import special_kind

_DESCRIPTION = """List a folder's entries (default: the workspace root), hidden ones \
included. Folders end with `/`. At most `limit` entries are shown (default 500). Use \
find to search by name across folders."""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Folder to list (default: the workspace root)."},
        "limit": {"type": "integer", "minimum": 1, "description": "Maximum entries to show (default 500)."},
    },
    "additionalProperties": False,
}


def _list(folder: Path, shown: str) -> list[str]:
    names: list[str] = []
    fd = open_folder(str(folder), shown)
    try:
        # scandir needs a descriptor it may read; the walk's may be O_PATH
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        with os.scandir(listing) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                names.append(entry.name + "/" if is_dir else entry.name)
    finally:
        os.close(listing)
    names.sort(key=lambda n: (n.lower(), n))
    return names


class LsTool(WorkspaceTool):
    """The ``ls`` tool (concurrency-safe). See the module docstring."""

    __slots__ = ()

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(workspace, "ls", _DESCRIPTION, _PARAMETERS, label="List", sequential=False, read_only=True)

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """List the folder ``args.get("path")``."""
        limit = args.get("limit") or 500
        located = self.locate_existing(
            args.get("path"), "Folder not found: {shown}", "Cannot list {shown}: {error}.", default_root=True
        )
        if isinstance(located, ToolResult):
            return located
        folder, shown, mode = located
        kind = special_kind(mode)
        if kind is not None:
            return ToolResult.error(f"{shown} is {kind}, not a folder; only folders can be listed.")
        try:
            names = await asyncio.to_thread(_list, folder, shown)
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        except FileNotFoundError:
            return ToolResult.error(f"Folder not found: {shown}")
        except NotADirectoryError:
            return ToolResult.error(f"{shown} is a file, not a folder. Use the read tool to read it.")
        except OSError as exc:
            return ToolResult.error(f"Cannot list {shown}: {exc.strerror or exc}.")
        details = {"path": str(folder), "total": len(names), "truncated": len(names) > limit}
        if not names:
            return ToolResult(content="(empty folder)", details=details)
        text = "\n".join(names[:limit])
        if len(names) > limit:
            text += f"\n\n[Showing {limit} of {len(names)} entries. Raise limit to see more.]"
        return ToolResult(content=text, details=details)
