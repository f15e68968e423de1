"""The ``write`` tool: create a file, or overwrite one the agent has read.

Parent folders are created. Overwriting an existing file requires that the agent read it
first and that it has not changed on disk since (see :class:`~ketch.tools.Workspace`);
new files need no read. The content is written exactly as given (UTF-8). Named pipes,
devices and sockets are refused (without blocking), never written to; so is a file with
more than one hard link, since writing it in place would change its other names too
(which may lie outside the workspace).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any
from typing import BinaryIO

from ..loop import ToolContext
from ..loop import ToolResult
from ._edit import stale_problem
from ._edit import unified_diff
from ._idempotency import Change
from ._idempotency import FileChangeTool
from ._workspace import Workspace
from ._workspace import WorkspaceError
from ._workspace import open_folder
from ._workspace import open_regular

_THREAD_THRESHOLD = 1 << 20
_DIFF_MAX_BYTES = 1 << 20

_DESCRIPTION = """Write a file in the workspace, replacing it if it exists.

Parent folders are created as needed. Overwriting an existing file is only allowed after \
you have read it with the read tool (and it has not changed since). Prefer the edit tool \
for changes to part of an existing file. The content is written exactly as given."""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."},
        "content": {"type": "string", "description": "The complete new content of the file."},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}


def count_lines(data: bytes) -> int:
    """Number of lines in ``data`` (a last line without a newline counts)."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _write(f: BinaryIO, data: bytes) -> None:
    f.seek(0)
    f.write(data)
    f.truncate()
    f.flush()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class WriteTool(FileChangeTool):
    """The ``write`` tool (sequential). See the module docstring for its behaviour;
    :meth:`precheck` tells the permission engine before it asks that a write would fail."""

    __slots__ = ()

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(workspace, "write", _DESCRIPTION, _PARAMETERS, "Write")

    def precheck(self, args: dict[str, Any]) -> str | None:
        """Why a write with ``args`` would fail now (an existing file not read yet or
        changed since, a path refused), or None; see :func:`~ketch.tools._edit.stale_problem`."""
        return stale_problem(self, args.get("path", ""), "overwrite", missing=None)

    async def _change(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult | Change:
        ws = self.workspace
        content = args.get("content")
        if not isinstance(content, str):
            return ToolResult.error("content must be a string with the complete file content.")
        located = self.locate(args.get("path", ""), write=True)
        if isinstance(located, ToolResult):
            return located
        path, shown = located
        data = content.encode("utf-8")
        old: bytes | None = None
        try:
            if path.is_dir():
                return ToolResult.error(f"{shown} is a directory; give a file path to write.")
            os.close(open_folder(str(path.parent), shown, create=True))
            existed = path.exists()
            fd, stat = open_regular(path, shown, "written", write=True, single_link=True)
            f = os.fdopen(fd, "r+b")
            try:
                if existed:
                    old = f.read()
                    ws.check_fresh(path, stat, old, action="overwrite")
            except BaseException:
                f.close()
                raise
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        except OSError as exc:
            return ToolResult.error(f"Cannot write {shown}: {exc.strerror or exc}.")
        lines = count_lines(data)
        verb = "Created" if old is None else "Overwrote"
        details: dict[str, Any] = {
            "path": str(path),
            "created": old is None,
            "bytes": len(data),
            "lines": lines,
            "diff": None,
        }
        if old is not None and len(old) + len(data) <= _DIFF_MAX_BYTES:
            details["diff"] = unified_diff(old.decode("utf-8", errors="replace"), content, shown)
        result = ToolResult(
            content=f"{verb} {shown} ({_plural(len(data), 'byte')}, {_plural(lines, 'line')}).",
            details=details,
        )

        async def write() -> ToolResult | None:
            with f:
                try:
                    if len(data) > _THREAD_THRESHOLD:
                        await asyncio.to_thread(_write, f, data)
                    else:
                        _write(f, data)
                    written = os.fstat(f.fileno())
                except OSError as exc:
                    return ToolResult.error(f"Cannot write {shown}: {exc.strerror or exc}.")
            ws.record(path, data, written)
            return None

        return Change(path, data, result, write)
