"""White-box test: imports ketch implementation modules (private) directly.

write and edit: creation, read-before-write, tolerant matching mapped back to the
original text, uniqueness, line endings, BOM, diffs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import ReadTool
from ketch.tools import Workspace
from ketch.tools import WriteTool
from ketch.tools._edit import EditTool
from ketch.tools._edit import find_matches
from ketch.tools._edit import unified_diff


class Kit:
    def __init__(self, root: Path) -> None:
        self.root = root
        ws = Workspace(root)
        self.read_tool = ReadTool(ws)
        self.write_tool = WriteTool(ws)
        self.edit_tool = EditTool(ws)

    async def _run(self, tool: Tool, args: dict[str, Any]) -> ToolResult:
        result = await tool.execute(args, ToolContext(call_id="c", tool_name=tool.name, signal=AbortSignal()))
        assert isinstance(result, ToolResult)
        return result

    async def read(self, path: str) -> ToolResult:
        result = await self._run(self.read_tool, {"path": path})
        assert not result.is_error, result.text
        return result

    async def write(self, path: str, content: str) -> ToolResult:
        return await self._run(self.write_tool, {"path": path, "content": content})

    async def edit(self, path: str, old: str, new: str, **extra: Any) -> ToolResult:
        return await self._run(self.edit_tool, {"path": path, "old_string": old, "new_string": new, **extra})

    def put(self, name: str, data: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        return path

    async def put_and_read(self, name: str, data: str | bytes) -> Path:
        path = self.put(name, data)
        await self.read(name)
        return path


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path.resolve())


# --- write ---------------------------------------------------------------------------


async def test_write_creates_parent_folders_and_reports_size(kit: Kit) -> None:
    result = await kit.write("a/b/c.txt", "one\ntwo\n")
    assert not result.is_error
    assert result.text == "Created a/b/c.txt (8 bytes, 2 lines)."
    assert (kit.root / "a/b/c.txt").read_text() == "one\ntwo\n"
    assert result.details == {
        "path": str(kit.root / "a/b/c.txt"),
        "created": True,
        "bytes": 8,
        "lines": 2,
        "diff": None,
    }
    single = await kit.write("s.txt", "x")
    assert single.text == "Created s.txt (1 byte, 1 line)."


async def test_write_counts_utf8_bytes(kit: Kit) -> None:
    result = await kit.write("u.txt", "héllo")
    assert result.text == "Created u.txt (6 bytes, 1 line)."


async def test_overwriting_an_unread_file_is_refused(kit: Kit) -> None:
    kit.put("x.txt", "original\n")
    result = await kit.write("x.txt", "new\n")
    assert result.is_error
    assert result.text == "x.txt has not been read yet. Read it with the read tool before you overwrite it."
    assert (kit.root / "x.txt").read_text() == "original\n"


async def test_overwrite_after_read_reports_a_diff(kit: Kit) -> None:
    await kit.put_and_read("x.txt", "a\nb\n")
    result = await kit.write("x.txt", "a\nc\n")
    assert not result.is_error
    assert result.text == "Overwrote x.txt (4 bytes, 2 lines)."
    assert result.details["created"] is False
    assert result.details["diff"] == "--- a/x.txt\n+++ b/x.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c"


async def test_overwrite_after_the_file_changed_on_disk_is_refused(kit: Kit) -> None:
    path = await kit.put_and_read("x.txt", "a\n")
    path.write_text("changed by someone else\n")
    result = await kit.write("x.txt", "mine\n")
    assert result.is_error
    assert result.text == "x.txt has changed on disk since you last read it. Read it again before you overwrite it."
    assert path.read_text() == "changed by someone else\n"


async def test_same_size_change_is_caught_by_the_digest(kit: Kit) -> None:
    path = await kit.put_and_read("x.txt", "aaaa\n")
    stat = path.stat()
    path.write_text("bbbb\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    result = await kit.edit("x.txt", "bbbb", "cccc")
    assert result.is_error
    assert result.text == "x.txt has changed on disk since you last read it. Read it again before you edit it."


async def test_touch_without_content_change_still_counts_as_read(kit: Kit) -> None:
    path = await kit.put_and_read("x.txt", "aaaa\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    result = await kit.edit("x.txt", "aaaa", "bbbb")
    assert not result.is_error
    assert path.read_text() == "bbbb\n"


async def test_write_to_a_directory_is_an_error(kit: Kit) -> None:
    (kit.root / "d").mkdir()
    result = await kit.write("d", "x")
    assert result.is_error
    assert result.text == "d is a directory; give a file path to write."


async def test_write_refreshes_the_record_so_edits_need_no_read(kit: Kit) -> None:
    await kit.write("n.txt", "alpha\n")
    first = await kit.edit("n.txt", "alpha", "beta")
    assert not first.is_error
    second = await kit.edit("n.txt", "beta", "gamma")
    assert not second.is_error
    third = await kit.write("n.txt", "delta\n")
    assert not third.is_error
    assert (kit.root / "n.txt").read_text() == "delta\n"


# --- edit: basics and errors ---------------------------------------------------------


async def test_edit_replaces_a_unique_match_and_returns_a_diff(kit: Kit) -> None:
    await kit.put_and_read("m.py", "import os\n\ndef f():\n    return 1\n\nprint(f())\n")
    result = await kit.edit("m.py", "    return 1", "    return 2")
    assert not result.is_error
    diff = (
        "--- a/m.py\n+++ b/m.py\n@@ -1,6 +1,6 @@\n import os\n \n def f():\n-    return 1\n+    return 2\n \n print(f())"
    )
    assert result.text == f"Edited m.py: replaced 1 occurrence.\n\n{diff}"
    assert result.details == {
        "path": str(kit.root / "m.py"),
        "diff": diff,
        "replacements": 1,
        "match": "exact",
        "first_changed_line": 4,
    }
    assert (kit.root / "m.py").read_text() == "import os\n\ndef f():\n    return 2\n\nprint(f())\n"


async def test_consecutive_edits_do_not_need_a_new_read(kit: Kit) -> None:
    await kit.put_and_read("c.txt", "one two three\n")
    assert not (await kit.edit("c.txt", "one", "1")).is_error
    assert not (await kit.edit("c.txt", "two", "2")).is_error
    assert (kit.root / "c.txt").read_text() == "1 2 three\n"


async def test_edit_of_an_unread_file_is_refused(kit: Kit) -> None:
    kit.put("u.txt", "text\n")
    result = await kit.edit("u.txt", "text", "other")
    assert result.is_error
    assert result.text == "u.txt has not been read yet. Read it with the read tool before you edit it."
    assert (kit.root / "u.txt").read_text() == "text\n"


async def test_edit_after_external_change_is_refused(kit: Kit) -> None:
    path = await kit.put_and_read("e.txt", "text\n")
    path.write_text("text and more\n")
    result = await kit.edit("e.txt", "text", "other")
    assert result.is_error
    assert result.text == "e.txt has changed on disk since you last read it. Read it again before you edit it."


async def test_edit_of_a_missing_file(kit: Kit) -> None:
    result = await kit.edit("nope.txt", "a", "b")
    assert result.is_error
    assert result.text == "File not found: nope.txt. Use the write tool to create a new file."


async def test_multiple_matches_are_an_error_unless_replace_all(kit: Kit) -> None:
    await kit.put_and_read("d.txt", "x = 1\nx = 1\ny = 2\nx = 1\n")
    result = await kit.edit("d.txt", "x = 1", "x = 3")
    assert result.is_error
    assert result.text == (
        "Found 3 matches of old_string in d.txt. Include more surrounding lines in old_string to make "
        "it unique, or set replace_all=true to replace every occurrence."
    )
    assert (kit.root / "d.txt").read_text() == "x = 1\nx = 1\ny = 2\nx = 1\n"
    done = await kit.edit("d.txt", "x = 1", "x = 3", replace_all=True)
    assert not done.is_error
    assert done.text.startswith("Edited d.txt: replaced 3 occurrences.\n\n")
    assert done.details["replacements"] == 3
    assert (kit.root / "d.txt").read_text() == "x = 3\nx = 3\ny = 2\nx = 3\n"


async def test_empty_old_string_is_a_clear_error(kit: Kit) -> None:
    await kit.put_and_read("f.txt", "a\n")
    result = await kit.edit("f.txt", "", "b")
    assert result.is_error
    assert result.text == (
        "old_string is empty. Give the exact text to replace (to insert text, include a neighbouring "
        "line and repeat it in new_string); to create a file use the write tool."
    )


async def test_identical_strings_are_an_error(kit: Kit) -> None:
    await kit.put_and_read("f.txt", "a\n")
    result = await kit.edit("f.txt", "a", "a")
    assert result.is_error
    assert result.text == "old_string and new_string are identical; there is nothing to change."


async def test_not_found_names_the_file_and_the_most_similar_line(kit: Kit) -> None:
    await kit.put_and_read("g.py", "def compute_total(items):\n    return sum(items)\n")
    result = await kit.edit("g.py", "def compute_totals(items):\n    pass", "x")
    assert result.is_error
    assert result.text == (
        "Could not find old_string in g.py. It must match the file's text, including line breaks "
        "(differences in indentation, trailing spaces, line endings, quotes and dashes are tolerated). "
        "Read the file again and copy the exact text.\n"
        "The most similar line is line 1: def compute_total(items):"
    )
    assert (await kit.edit("g.py", "zzz", "y")).text.endswith("Read the file again and copy the exact text.")


async def test_a_replacement_that_changes_nothing_is_reported(kit: Kit) -> None:
    await kit.put_and_read("q.txt", "say \u201chi\u201d\n")
    result = await kit.edit("q.txt", 'say "hi"', "say \u201chi\u201d")
    assert result.is_error
    assert result.text == "The replacement leaves q.txt unchanged; nothing was written."


# --- edit: tolerant matching ---------------------------------------------------------


async def test_trailing_whitespace_differences_are_tolerated(kit: Kit) -> None:
    await kit.put_and_read("t.txt", "keep   \nfoo   \nbar\t\nend  \n")
    result = await kit.edit("t.txt", "foo\nbar\n", "FOO\nBAR\n")
    assert not result.is_error
    assert result.details["match"] == "normalized"
    assert result.text.startswith(
        "Edited t.txt: replaced 1 occurrence (matched ignoring differences in trailing whitespace, "
        "line endings, quotes or dashes).\n\n"
    )
    assert (kit.root / "t.txt").read_text() == "keep   \nFOO\nBAR\nend  \n"


async def test_trailing_spaces_in_old_string_only_match_at_a_line_end(kit: Kit) -> None:
    await kit.put_and_read("t.txt", "value = 1\nvalue\n")
    result = await kit.edit("t.txt", "value  ", "VALUE")
    assert not result.is_error
    assert (kit.root / "t.txt").read_text() == "value = 1\nVALUE\n"


async def test_curly_quotes_match_straight_ones_and_other_text_is_untouched(kit: Kit) -> None:
    original = "title = \u201cOld\u201d\nnote = \u2018keep \u201cme\u201d\u2019\n"
    await kit.put_and_read("q.py", original)
    result = await kit.edit("q.py", 'title = "Old"', 'title = "New"')
    assert not result.is_error
    assert (kit.root / "q.py").read_text() == 'title = "New"\nnote = \u2018keep \u201cme\u201d\u2019\n'


async def test_dashes_and_unicode_spaces_match_plain_ones(kit: Kit) -> None:
    await kit.put_and_read("d.md", "pages 10\u201320 \u2014 see\u00a0above\nother \u2013 dash\n")
    result = await kit.edit("d.md", "pages 10-20 - see above", "pages 10-21")
    assert not result.is_error
    assert (kit.root / "d.md").read_text() == "pages 10-21\nother \u2013 dash\n"


async def test_indentation_differences_are_tolerated_and_new_string_reindented(kit: Kit) -> None:
    original = "class A:\n    def f(self):\n        if x:\n            return 1\n        return 0\n"
    await kit.put_and_read("i.py", original)
    result = await kit.edit("i.py", "if x:\n    return 1\n", "if x:\n    log()\n    return 2\n")
    assert not result.is_error
    assert result.details["match"] == "indentation"
    assert result.text.startswith(
        "Edited i.py: replaced 1 occurrence (matched ignoring indentation; new_string was re-indented "
        "to the file's).\n\n"
    )
    assert (kit.root / "i.py").read_text() == (
        "class A:\n    def f(self):\n        if x:\n            log()\n            return 2\n        return 0\n"
    )


async def test_indentation_match_without_trailing_newline_keeps_the_line_break(kit: Kit) -> None:
    await kit.put_and_read("i.py", "def f():\n\treturn 1\n")
    result = await kit.edit("i.py", "  return 1", "  return 2")
    assert not result.is_error
    assert (kit.root / "i.py").read_text() == "def f():\n\treturn 2\n"


async def test_spaces_in_old_and_new_string_become_the_files_tabs(kit: Kit) -> None:
    await kit.put_and_read("f.go", "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n")
    result = await kit.edit(
        "f.go", "    if x {\n        return 1\n    }", "    if x {\n        y()\n        return 2\n    }"
    )
    assert not result.is_error
    assert (kit.root / "f.go").read_text() == "func f() {\n\tif x {\n\t\ty()\n\t\treturn 2\n\t}\n}\n"


async def test_tabs_in_old_and_new_string_become_the_files_spaces(kit: Kit) -> None:
    await kit.put_and_read("f.py", "def f():\n  if x:\n    return 1\n")
    result = await kit.edit("f.py", "\tif x:\n\t\treturn 1", "\tif x:\n\t\treturn 2")
    assert not result.is_error
    assert (kit.root / "f.py").read_text() == "def f():\n  if x:\n    return 2\n"


async def test_two_indentation_insensitive_matches_are_an_error(kit: Kit) -> None:
    await kit.put_and_read("i.py", "  a()\n  b()\n    a()\n    b()\n")
    assert find_matches("  a()\n  b()\n    a()\n    b()\n", "a()\nb()\n")[0] == "indentation"
    result = await kit.edit("i.py", "a()\nb()\n", "c()\n")
    assert result.is_error
    assert result.text.startswith("Found 2 matches of old_string in i.py.")
    replaced = await kit.edit("i.py", "a()\nb()\n", "c()\n", replace_all=True)
    assert not replaced.is_error
    assert (kit.root / "i.py").read_text() == "  c()\n    c()\n"


def test_find_matches_reports_the_level_and_the_original_offsets() -> None:
    text = "x \u201cq\u201d  \r\ny\r\n"
    level, matches = find_matches(text, 'x "q"\ny')
    assert level == "normalized"
    assert [(m.start, m.end) for m in matches] == [(0, 10)]
    assert text[0:10] == "x \u201cq\u201d  \r\ny"
    assert find_matches(text, "nothing")[1] == []


# --- edit: line endings and BOM ------------------------------------------------------


async def test_crlf_file_stays_crlf_and_new_string_is_converted(kit: Kit) -> None:
    await kit.put_and_read("w.txt", b"a\r\nb\r\nc\r\n")
    result = await kit.edit("w.txt", "a\nb\n", "x\ny\nz\n")
    assert not result.is_error
    assert result.details["match"] == "exact"
    assert (kit.root / "w.txt").read_bytes() == b"x\r\ny\r\nz\r\nc\r\n"
    assert result.details["diff"] == "--- a/w.txt\n+++ b/w.txt\n@@ -1,3 +1,4 @@\n-a\n-b\n+x\n+y\n+z\n c"


async def test_single_line_edit_in_a_crlf_file_uses_crlf_for_new_lines(kit: Kit) -> None:
    await kit.put_and_read("w.txt", b"a\r\nb\r\nc\r\n")
    result = await kit.edit("w.txt", "b", "b1\nb2")
    assert not result.is_error
    assert (kit.root / "w.txt").read_bytes() == b"a\r\nb1\r\nb2\r\nc\r\n"


async def test_lf_parts_of_a_mixed_file_are_left_alone(kit: Kit) -> None:
    await kit.put_and_read("mix.txt", b"one\r\ntwo\nthree\n")
    result = await kit.edit("mix.txt", "two\nthree", "2\n3")
    assert not result.is_error
    assert (kit.root / "mix.txt").read_bytes() == b"one\r\n2\n3\n"


async def test_utf8_bom_is_preserved(kit: Kit) -> None:
    await kit.put_and_read("bom.txt", b"\xef\xbb\xbfhello\nworld\n")
    result = await kit.edit("bom.txt", "world", "there")
    assert not result.is_error
    assert (kit.root / "bom.txt").read_bytes() == b"\xef\xbb\xbfhello\nthere\n"
    assert result.details["diff"] == "--- a/bom.txt\n+++ b/bom.txt\n@@ -1,2 +1,2 @@\n hello\n-world\n+there"


async def test_edit_of_a_binary_file_is_refused(kit: Kit) -> None:
    path = kit.put("b.bin", b"\xff\xfeabc")
    kit.edit_tool.workspace.record(path, path.read_bytes(), path.stat())
    result = await kit.edit("b.bin", "abc", "def")
    assert result.is_error
    assert result.text == "b.bin is not UTF-8 text; the edit tool only edits text files."


def test_unified_diff_uses_three_lines_of_context() -> None:
    old = "".join(f"{i}\n" for i in range(1, 11))
    new = old.replace("5\n", "five\n")
    assert unified_diff(old, new, "n.txt") == (
        "--- a/n.txt\n+++ b/n.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8"
    )


def _difflib(old: list[str], new: list[str]) -> str:
    import difflib

    return "\n".join(difflib.unified_diff(old, new, "a/x", "b/x", lineterm=""))


@pytest.mark.parametrize(
    "change",
    ["middle", "insert_first", "delete_last", "two_far_hunks", "two_near_changes", "all_new", "to_empty"],
)
def test_unified_diff_matches_difflib(change: str) -> None:
    old = [f"line {i}" for i in range(1, 101)]
    new = list(old)
    if change == "middle":
        new[49] = "changed"
    elif change == "insert_first":
        new.insert(0, "first")
    elif change == "delete_last":
        new.pop()
    elif change == "two_far_hunks":
        new[10] = "a"
        new[80] = "b"
    elif change == "two_near_changes":
        new[10] = "a"
        new[14] = "b"
    elif change == "all_new":
        new = ["other"]
    else:
        new = []
    expected = _difflib(old, new)
    old_text = "\n".join(old) + "\n"
    new_text = "\n".join(new) + "\n" if new else ""
    assert unified_diff(old_text, new_text, "x") == expected
    assert unified_diff(old_text, old_text, "x") == ""
