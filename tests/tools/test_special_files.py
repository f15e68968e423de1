"""Named pipes, devices and sockets in the workspace: every file tool refuses them with a
message naming the path and its kind, and never blocks on them; grep and find skip them
when they walk a folder.

A thread holds the write end of the FIFO open while a test runs: a tool that (wrongly)
opens the FIFO reads ``leaked`` from it instead of blocking forever, so such a bug fails
the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import EditTool
from ketch.tools import FindTool
from ketch.tools import GrepTool
from ketch.tools import LsTool
from ketch.tools import ReadTool
from ketch.tools import Workspace
from ketch.tools import WriteTool

RG = shutil.which("rg")


async def _run(tool: Tool, **args: Any) -> ToolResult:
    result = await tool.execute(args, ToolContext(call_id="c", tool_name=tool.name, signal=AbortSignal()))
    assert isinstance(result, ToolResult)
    return result


class _FifoWriter:
    """Opens the FIFO for writing (blocks until some reader opens it), writes ``leaked``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        try:
            with open(self.path, "wb") as f:
                f.write(b"leaked\n")
        except OSError:
            pass

    def release(self) -> None:
        """Let the writer finish if nothing opened the FIFO."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            self.thread.join()
        finally:
            os.close(fd)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = (tmp_path / "proj").resolve()
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("hello leaked world\n")
    (root / "sub" / "b.txt").write_text("leaked too\n")
    os.mkfifo(root / "notes.fifo")
    os.mkfifo(root / "sub" / "deep.fifo")
    monkeypatch.chdir(root)  # AF_UNIX paths are short only when relative
    server = socket.socket(socket.AF_UNIX)
    server.bind("agent.sock")
    (root / "null").symlink_to("/dev/null")
    writers = [_FifoWriter(root / "notes.fifo"), _FifoWriter(root / "sub" / "deep.fifo")]
    try:
        yield root
    finally:
        for writer in writers:
            writer.release()
        server.close()


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(root, allowed_roots=("/dev",))


_READ = [
    ("notes.fifo", "notes.fifo is a named pipe (FIFO), not a regular file; only regular files can be {}."),
    ("agent.sock", "agent.sock is a socket, not a regular file; only regular files can be {}."),
    ("null", "/dev/null is a character device, not a regular file; only regular files can be {}."),
    ("/dev/zero", "/dev/zero is a character device, not a regular file; only regular files can be {}."),
]


@pytest.mark.parametrize(("path", "message"), _READ)
async def test_read_refuses_special_files(ws: Workspace, path: str, message: str) -> None:
    result = await _run(ReadTool(ws), path=path)
    assert result.is_error
    assert result.text == message.format("read")
    assert ws.record_of(ws.resolve(path)) is None


@pytest.mark.parametrize(("path", "message"), _READ)
async def test_write_refuses_special_files(ws: Workspace, root: Path, path: str, message: str) -> None:
    result = await _run(WriteTool(ws), path=path, content="data\n")
    assert result.is_error
    assert result.text == message.format("written")
    assert (root / "a.txt").read_text() == "hello leaked world\n"


@pytest.mark.parametrize(("path", "message"), _READ)
async def test_edit_refuses_special_files(ws: Workspace, path: str, message: str) -> None:
    result = await _run(EditTool(ws), path=path, old_string="leaked", new_string="sealed")
    assert result.is_error
    assert result.text == message.format("edited")


async def test_ls_refuses_special_files_and_lists_them_in_folders(ws: Workspace) -> None:
    ls = LsTool(ws)
    fifo = await _run(ls, path="notes.fifo")
    assert fifo.is_error
    assert fifo.text == "notes.fifo is a named pipe (FIFO), not a folder; only folders can be listed."
    device = await _run(ls, path="null")
    assert device.text == "/dev/null is a character device, not a folder; only folders can be listed."
    listing = await _run(ls)
    assert listing.text == "a.txt\nagent.sock\nnotes.fifo\nnull\nsub/"


async def test_find_lists_only_regular_files(ws: Workspace) -> None:
    result = await _run(FindTool(ws), pattern="**")
    assert result.text == "a.txt\nsub/b.txt"
    fifo = await _run(FindTool(ws), pattern="*", path="notes.fifo")
    assert fifo.text == "notes.fifo is a named pipe (FIFO), not a folder; give a folder to search."


def _backends() -> list[Any]:
    return [pytest.param(False, id="python"), pytest.param(RG, id="rg")]


@pytest.mark.parametrize("ripgrep", _backends())
async def test_grep_skips_special_files_in_folders(ws: Workspace, ripgrep: Any) -> None:
    assert ripgrep is not None, "ripgrep (rg) must be installed for the test suite"
    grep = GrepTool(ws, ripgrep=ripgrep)
    result = await _run(grep, pattern="leaked")
    assert result.text == "a.txt:1:hello leaked world\nsub/b.txt:1:leaked too"
    in_sub = await _run(grep, pattern="leaked", path="sub")
    assert in_sub.text == "sub/b.txt:1:leaked too"


@pytest.mark.parametrize("ripgrep", _backends())
@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("notes.fifo", "a named pipe (FIFO)"),
        ("agent.sock", "a socket"),
        ("null", "a character device"),
    ],
)
async def test_grep_refuses_a_special_file_as_its_path(ws: Workspace, ripgrep: Any, path: str, kind: str) -> None:
    grep = GrepTool(ws, ripgrep=ripgrep)
    result = await _run(grep, pattern="leaked", path=path)
    assert result.is_error
    shown = "/dev/null" if path == "null" else path
    assert result.text == (
        f"{shown} is {kind}, not a regular file or folder; only regular files and folders can be searched."
    )


async def test_regular_files_still_work(ws: Workspace, root: Path) -> None:
    read = await _run(ReadTool(ws), path="a.txt")
    assert read.text == "     1\thello leaked world"
    edit = await _run(EditTool(ws), path="a.txt", old_string="leaked", new_string="sealed")
    assert not edit.is_error
    write = await _run(WriteTool(ws), path="a.txt", content="new\n")
    assert write.text == "Overwrote a.txt (4 bytes, 1 line)."
    created = await _run(WriteTool(ws), path="sub/new/c.txt", content="c")
    assert created.text == "Created sub/new/c.txt (1 byte, 1 line)."
    assert (root / "a.txt").read_text() == "new\n"
    assert (root / "sub" / "new" / "c.txt").read_text() == "c"
