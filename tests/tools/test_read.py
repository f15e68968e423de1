"""White-box test: imports ketch implementation modules (private) directly.

The read tool: cat -n formatting, offset/limit, truncation notes, images, binary and
missing files, directories."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.llm import ImageContent
from ketch.llm import TextContent
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import Workspace
from ketch.tools._read import ReadTool
from ketch.tools._read import sniff_image


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path.resolve()


@pytest.fixture
def read(root: Path) -> ReadTool:
    return ReadTool(Workspace(root))


async def _run(tool: ReadTool, **args: Any) -> ToolResult:
    return await tool.execute(args, ToolContext(call_id="c", tool_name="read", signal=AbortSignal()))


def _numbered(start: int, lines: list[str]) -> str:
    return "".join(f"{n:>6}\t{line}\n" for n, line in enumerate(lines, start))


async def test_lines_are_numbered_like_cat_n(root: Path, read: ReadTool) -> None:
    (root / "f.py").write_text("def f():\n    return 1\n")
    result = await _run(read, path="f.py")
    assert not result.is_error
    assert result.text == "     1\tdef f():\n     2\t    return 1"
    assert result.details == {
        "total_lines": 2,
        "start_line": 1,
        "end_line": 2,
        "truncated": False,
        "path": str(root / "f.py"),
    }


async def test_last_line_without_newline_and_crlf_and_bom(root: Path, read: ReadTool) -> None:
    (root / "w.txt").write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree")
    result = await _run(read, path="w.txt")
    assert result.text == "     1\tone\n     2\ttwo\n     3\tthree"


async def test_line_numbers_beyond_six_digits_stay_separated_by_a_tab(root: Path, read: ReadTool) -> None:
    (root / "big.txt").write_text("x\n" * 1_000_001)
    result = await _run(read, path="big.txt", offset=1_000_000)
    assert result.text == "1000000\tx\n1000001\tx"


async def test_offset_and_limit_select_a_range_with_a_continue_note(root: Path, read: ReadTool) -> None:
    (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 6)))
    result = await _run(read, path="f.txt", offset=2, limit=2)
    assert result.text == (
        "     2\tline 2\n     3\tline 3\n\n[Showing lines 2-3 of 5. Use offset=4 to continue.]"
    )
    assert result.details["truncated"] is True
    tail = await _run(read, path="f.txt", offset=4)
    assert tail.text == "     4\tline 4\n     5\tline 5"


async def test_long_file_stops_at_2000_lines(root: Path, read: ReadTool) -> None:
    lines = [f"row {i}" for i in range(1, 5401)]
    (root / "long.txt").write_text("\n".join(lines) + "\n")
    result = await _run(read, path="long.txt")
    assert result.text == (
        _numbered(1, lines[:2000]) + "\n[Showing lines 1-2000 of 5400. Use offset=2001 to continue.]"
    )
    limited = await _run(read, path="long.txt", offset=5000, limit=9999)
    assert limited.text == _numbered(5000, lines[4999:5400])[:-1]


async def test_output_stops_at_50_kb(root: Path, read: ReadTool) -> None:
    lines = ["y" * 100] * 1000
    (root / "wide.txt").write_text("\n".join(lines) + "\n")
    result = await _run(read, path="wide.txt")
    # Each rendered line is 6 + 1 + 100 + 1 = 108 bytes; 474 fit in 51200.
    assert result.text == (
        _numbered(1, lines[:474])
        + "\n[Showing lines 1-474 of 1000 (output limited to 50 KB). Use offset=475 to continue.]"
    )
    assert result.details["end_line"] == 474


async def test_very_long_line_is_cut_with_a_note(root: Path, read: ReadTool) -> None:
    (root / "min.js").write_text("a" * 2500 + "\nshort\n")
    result = await _run(read, path="min.js")
    assert result.text == "     1\t" + "a" * 2000 + " [... line cut: 500 more characters]\n     2\tshort"


async def test_big_file_is_read_off_the_loop_with_the_same_result(root: Path, read: ReadTool) -> None:
    lines = [f"{i:07d}" + "z" * 100 for i in range(1, 20001)]
    (root / "huge.txt").write_text("\n".join(lines) + "\n")
    result = await _run(read, path="huge.txt", offset=19999)
    assert result.text == _numbered(19999, lines[19998:])[:-1]


async def test_offset_past_the_end_is_an_error(root: Path, read: ReadTool) -> None:
    (root / "f.txt").write_text("a\nb\nc\n")
    result = await _run(read, path="f.txt", offset=10)
    assert result.is_error
    assert result.text == "offset 10 is beyond the end of f.txt, which has 3 lines."


async def test_invalid_offset_and_limit_are_errors(root: Path, read: ReadTool) -> None:
    (root / "f.txt").write_text("a\n")
    assert (await _run(read, path="f.txt", offset=0)).text == "offset must be an integer of at least 1, got 0."
    assert (await _run(read, path="f.txt", limit="5")).text == "limit must be an integer of at least 1, got '5'."


async def test_empty_file(root: Path, read: ReadTool) -> None:
    (root / "empty.txt").write_text("")
    result = await _run(read, path="empty.txt")
    assert not result.is_error
    assert result.text == "[empty.txt is empty.]"


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "image/jpeg"),
        (b"GIF87a\x01\x00", "image/gif"),
        (b"GIF89a\x01\x00", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", None),
        (b"hello world", None),
    ],
)
def test_images_are_recognised_by_their_magic_bytes(head: bytes, mime: str | None) -> None:
    assert sniff_image(head) == mime


async def test_image_comes_back_as_an_image_block(root: Path, read: ReadTool) -> None:
    data = b"\x89PNG\r\n\x1a\n" + b"\x00\x01\x02\x03"
    (root / "pic.bin").write_bytes(data)
    result = await _run(read, path="pic.bin")
    assert not result.is_error
    assert result.blocks == [
        TextContent(text="Read image pic.bin [image/png, 12 bytes]"),
        ImageContent(mime_type="image/png", data=base64.b64encode(data).decode()),
    ]
    assert result.details == {"path": str(root / "pic.bin"), "mime_type": "image/png", "bytes": 12}


async def test_image_over_the_size_limit_is_an_error(root: Path) -> None:
    tool = ReadTool(Workspace(root), max_image_bytes=1024)
    (root / "big.gif").write_bytes(b"GIF89a" + b"\x00" * 2048)
    result = await _run(tool, path="big.gif")
    assert result.is_error
    assert result.text == "big.gif is an image of 2.0 KB, more than the 1.0 KB limit for images."


async def test_file_over_the_size_limit_is_an_error(root: Path) -> None:
    (root / "huge.log").write_text("x" * 3000)
    result = await _run(ReadTool(Workspace(root), max_file_bytes=2048), path="huge.log")
    assert result.is_error
    assert result.text == (
        "huge.log is 2.9 KB, more than the 2.0 KB the read tool loads. Use grep to find the lines you "
        "need, or bash (head, tail, sed -n) for parts."
    )


async def test_binary_file_with_nul_bytes_is_an_error(root: Path, read: ReadTool) -> None:
    (root / "prog.o").write_bytes(b"\x7fELF\x00\x00\x01")
    result = await _run(read, path="prog.o")
    assert result.is_error
    assert result.text == (
        "prog.o is a binary file (it contains NUL bytes); the read tool shows text and images only. "
        "Use bash (for example `file` or `xxd | head`) to inspect it."
    )


async def test_undecodable_file_is_an_error(root: Path, read: ReadTool) -> None:
    (root / "latin.txt").write_bytes(b"caf\xe9\n")
    result = await _run(read, path="latin.txt")
    assert result.is_error
    assert result.text == (
        "latin.txt is not UTF-8 text (undecodable byte at offset 3); it looks like a binary file. "
        "Use bash (for example `file` or `iconv`) to inspect it."
    )


async def test_missing_file_names_the_path_and_suggests_close_names(root: Path, read: ReadTool) -> None:
    (root / "main.py").write_text("x\n")
    assert (await _run(read, path="nothing.txt")).text == "File not found: nothing.txt"
    result = await _run(read, path="mian.py")
    assert result.is_error
    assert result.text == "File not found: mian.py. Did you mean: main.py?"
    assert (await _run(read, path="no/such/dir/f.txt")).text == "File not found: no/such/dir/f.txt"


async def test_directory_is_an_error_suggesting_ls(root: Path, read: ReadTool) -> None:
    (root / "src").mkdir()
    result = await _run(read, path="src")
    assert result.is_error
    assert result.text == "src is a directory, not a file. Use the ls tool to list it."


async def test_reading_records_the_file_for_later_writes(root: Path, read: ReadTool) -> None:
    (root / "f.txt").write_text("a\n")
    assert read.workspace.record_of(root / "f.txt") is None
    await _run(read, path="f.txt", offset=1, limit=1)
    record = read.workspace.record_of(root / "f.txt")
    assert record is not None
    assert record.size == 2
    failed = await _run(read, path="f.txt", offset=5)
    assert failed.is_error
