"""The ``read`` tool: a text file with line numbers, or an image.

Text is shown like ``cat -n`` (line number right-aligned in six columns, a tab, the
line), from ``offset`` (1-based) for at most ``limit`` lines. Output stops at 2000 lines
or 50 KB, whichever comes first, with a note saying which lines were shown and how to
continue; a line longer than 2000 characters is cut with a note. PNG, JPEG, GIF and WebP
files (recognised by their first bytes) come back as an image block, and a PDF as a
document block when the model that asked takes documents
(:func:`ketch.llm.takes_documents`; otherwise an error saying so). Binary files,
missing files and directories are errors that say what to do instead; named pipes,
devices and sockets are refused without being opened for a blocking read. A file with
more than one hard link is read like any other (only writing it is refused, see
:func:`~ketch.tools._workspace.hard_link_message`).
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import os
from pathlib import Path
from stat import S_ISDIR
from stat import S_ISREG
from typing import Any

from ..llm import DocumentContent
from ..llm import ImageContent
from ..llm import TextContent
from ..loop import ToolContext
from ..loop import ToolResult
from ._workspace import Workspace
from ._workspace import WorkspaceError
from ._workspace import WorkspaceTool
from ._workspace import not_regular_message
from ._workspace import open_regular

MAX_LINES = 2000
MAX_BYTES = 50 * 1024
MAX_LINE_CHARS = 2000
_THREAD_THRESHOLD = 1 << 20

_DESCRIPTION = """Read a file from the workspace.

Text files are shown with line numbers (`cat -n` style: number, tab, line). By default up \
to 2000 lines or 50 KB are shown, from the start; a note at the end tells which lines were \
shown and the offset to continue from. Use `offset` (1-based line number) and `limit` to \
read a specific range of a long file. Lines longer than 2000 characters are cut.
Images (PNG, JPEG, GIF, WebP) are returned as images, and PDFs as documents when you can \
take documents. Other binary files cannot be read; use `ls` for directories. Read a file before you edit or overwrite it."""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."},
        "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based). Default 1."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "description": f"Maximum number of lines to show. Default and maximum {MAX_LINES}.",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image(head: bytes) -> str | None:
    """The MIME type of a PNG, JPEG, GIF or WebP image from its first bytes, else None."""
    for magic, mime in _IMAGE_MAGIC:
        if head.startswith(magic):
            return mime
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _size_text(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def _positive_int(args: dict[str, Any], name: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkspaceError(f"{name} must be an integer of at least 1, got {value!r}.")
    return value


def _render(data: bytes, shown: str, offset: int, limit: int) -> ToolResult:
    if b"\x00" in data:
        return ToolResult.error(
            f"{shown} is a binary file (it contains NUL bytes); the read tool shows text and images "
            "only. Use bash (for example `file` or `xxd | head`) to inspect it."
        )
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ToolResult.error(
            f"{shown} is not UTF-8 text (undecodable byte at offset {exc.start}); it looks like a "
            "binary file. Use bash (for example `file` or `iconv`) to inspect it."
        )
    if not text:
        return ToolResult(content=f"[{shown} is empty.]", details={"total_lines": 0})
    total = text.count("\n") + (0 if text.endswith("\n") else 1)
    if offset > total:
        return ToolResult.error(
            f"offset {offset} is beyond the end of {shown}, which has {total} line{'s' if total != 1 else ''}."
        )
    end_wanted = min(total, offset - 1 + min(limit, MAX_LINES))
    pieces = text.split("\n", end_wanted)
    out: list[str] = []
    used = 0
    end = offset - 1
    by_bytes = False
    for number in range(offset, end_wanted + 1):
        line = pieces[number - 1]
        if line.endswith("\r"):
            line = line[:-1]
        if len(line) > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]} [... line cut: {len(line) - MAX_LINE_CHARS} more characters]"
        rendered = f"{number:>6}\t{line}\n"
        size = len(rendered.encode("utf-8"))
        if used + size > MAX_BYTES and out:
            by_bytes = True
            break
        out.append(rendered)
        used += size
        end = number
    body = "".join(out)
    details: dict[str, Any] = {"total_lines": total, "start_line": offset, "end_line": end}
    if end < total:
        reason = " (output limited to 50 KB)" if by_bytes else ""
        body += f"\n[Showing lines {offset}-{end} of {total}{reason}. Use offset={end + 1} to continue.]"
        details["truncated"] = True
    else:
        body = body[:-1]
        details["truncated"] = False
    return ToolResult(content=body, details=details)


def _not_found(path: Path, shown: str) -> str:
    message = f"File not found: {shown}"
    try:
        names = os.listdir(path.parent)
    except OSError:
        return message
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    if close:
        message += ". Did you mean: " + ", ".join(close) + "?"
    return message


class ReadTool(WorkspaceTool):
    """The ``read`` tool (concurrency-safe). See the module docstring for its behaviour.

    Images larger than ``max_image_bytes``, PDFs larger than ``max_document_bytes`` and
    files larger than ``max_file_bytes`` are refused with an error suggesting other tools.
    """

    __slots__ = ("max_document_bytes", "max_file_bytes", "max_image_bytes")

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_image_bytes: int = 5 * 1024 * 1024,
        max_file_bytes: int = 256 * 1024 * 1024,
        max_document_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        super().__init__(workspace, "read", _DESCRIPTION, _PARAMETERS, label="Read", sequential=False, read_only=True)
        self.max_image_bytes = max_image_bytes
        self.max_file_bytes = max_file_bytes
        self.max_document_bytes = max_document_bytes

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Read the file named by ``args["path"]``."""
        located = self.locate(args.get("path", ""))
        if isinstance(located, ToolResult):
            return located
        path, shown = located
        try:
            offset = _positive_int(args, "offset") or 1
            limit = _positive_int(args, "limit") or MAX_LINES
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        try:
            stat = path.stat()
        except FileNotFoundError:
            return ToolResult.error(_not_found(path, shown))
        except OSError as exc:
            return ToolResult.error(f"Cannot read {shown}: {exc.strerror or exc}.")
        if S_ISDIR(stat.st_mode):
            return ToolResult.error(f"{shown} is a directory, not a file. Use the ls tool to list it.")
        if not S_ISREG(stat.st_mode):
            return ToolResult.error(not_regular_message(shown, stat.st_mode, "read"))
        if stat.st_size > self.max_file_bytes:
            return ToolResult.error(
                f"{shown} is {_size_text(stat.st_size)}, more than the {_size_text(self.max_file_bytes)} the "
                "read tool loads. Use grep to find the lines you need, or bash (head, tail, sed -n) for parts."
            )
        try:
            fd, stat = open_regular(path, shown, "read")
            with os.fdopen(fd, "rb") as f:
                if stat.st_size > _THREAD_THRESHOLD:
                    data = await asyncio.to_thread(f.read, self.max_file_bytes + 1)
                else:
                    data = f.read(self.max_file_bytes + 1)
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        except FileNotFoundError:
            return ToolResult.error(_not_found(path, shown))
        except OSError as exc:
            return ToolResult.error(f"Cannot read {shown}: {exc.strerror or exc}.")
        if len(data) > self.max_file_bytes:
            return ToolResult.error(
                f"{shown} is more than the {_size_text(self.max_file_bytes)} the read tool loads. Use grep "
                "to find the lines you need, or bash (head, tail, sed -n) for parts."
            )
        mime = sniff_image(data[:16])
        if mime is not None:
            return self._image(path, shown, data, mime, stat)
        if data.startswith(b"%PDF-"):
            return self._pdf(path, shown, data, stat, ctx)
        if len(data) > _THREAD_THRESHOLD:
            result = await asyncio.to_thread(_render, data, shown, offset, limit)
        else:
            result = _render(data, shown, offset, limit)
        if not result.is_error:
            self.workspace.record(path, data, stat)
            result.details["path"] = str(path)
        return result

    def _pdf(self, path: Path, shown: str, data: bytes, stat: os.stat_result, ctx: ToolContext[Any]) -> ToolResult:
        from ..llm import takes_documents

        asker = ctx.assistant_message
        if asker is None or not takes_documents(asker.provider, asker.api):
            where = f"this model ({asker.provider}/{asker.model})" if asker is not None else "this caller"
            return ToolResult.error(
                f"{shown} is a PDF and {where} does not take documents. Use bash (pdftotext {shown} -) for its text."
            )
        if len(data) > self.max_document_bytes:
            return ToolResult.error(
                f"{shown} is a PDF of {_size_text(len(data))}, more than the "
                f"{_size_text(self.max_document_bytes)} limit for documents. Use bash (pdftotext) for its text."
            )
        self.workspace.record(path, data, stat)
        return ToolResult(
            content=[
                TextContent(text=f"Read document {shown} [application/pdf, {_size_text(len(data))}]"),
                DocumentContent.from_bytes(data, name=path.name),
            ],
            details={"path": str(path), "mime_type": "application/pdf", "bytes": len(data)},
        )

    def _image(self, path: Path, shown: str, data: bytes, mime: str, stat: os.stat_result) -> ToolResult:
        if len(data) > self.max_image_bytes:
            return ToolResult.error(
                f"{shown} is an image of {_size_text(len(data))}, more than the "
                f"{_size_text(self.max_image_bytes)} limit for images."
            )
        self.workspace.record(path, data, stat)
        encoded = base64.b64encode(data).decode("ascii")
        return ToolResult(
            content=[
                TextContent(text=f"Read image {shown} [{mime}, {_size_text(len(data))}]"),
                ImageContent(mime_type=mime, data=encoded),
            ],
            details={"path": str(path), "mime_type": mime, "bytes": len(data)},
        )
