"""The ``edit`` tool: replace a unique piece of text in a file, returning a unified diff.

Matching tries, in order, and stops at the first level that finds anything:

1. the exact text (also with its line breaks turned into CRLF for a CRLF file);
2. a lenient comparison that ignores CR before LF, trailing spaces and tabs at line ends,
   curly versus straight quotes, Unicode dashes versus ``-`` and Unicode spaces versus
   a plain space;
3. whole lines compared without their indentation (plus the normalisation of level 2);
   the replacement is re-indented from ``old_string``'s indentation to the file's.

A match found leniently is mapped back to the exact bytes of the file, so text outside it
is never touched. More than one match is an error unless ``replace_all`` is set. The
replacement uses the line ending of the matched text (or of the file) and a UTF-8 BOM is
kept. A file with more than one hard link is refused: the edit is made in place, so it
would change the file's other names too (which may lie outside the workspace).
"""

from __future__ import annotations

import bisect
import difflib
import os
import stat
from typing import Any

from ..loop import ToolContext
from ..loop import ToolResult
from ._idempotency import Change
from ._idempotency import FileChangeTool
from ._workspace import Workspace
from ._workspace import WorkspaceError
from ._workspace import hard_link_message
from ._workspace import open_regular

_DESCRIPTION = """Replace text in a file: `old_string` becomes `new_string`.

`old_string` must match the file's text and be unique in it; include a few surrounding \
lines to make it unique, or set `replace_all` to replace every occurrence. Small \
differences in indentation, trailing spaces, line endings, quotes and dashes are \
tolerated. Read the file first; after a successful edit you may edit it again without \
re-reading. Returns a unified diff of the change. To create a file, use the write tool."""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path, relative to the workspace root or absolute."},
        "old_string": {"type": "string", "description": "The exact text to replace."},
        "new_string": {"type": "string", "description": "The text to put in its place."},
        "replace_all": {
            "type": "boolean",
            "description": "Replace every occurrence of old_string (default false: it must be unique).",
        },
    },
    "required": ["path", "old_string", "new_string"],
    "additionalProperties": False,
}

_DIFF_CONTENT_LINES = 300
_MISSING = "File not found: {shown}. Use the write tool to create a new file."

_FOLD = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "),
    }
)

_MODE_NOTES = {
    "exact": "",
    "normalized": " (matched ignoring differences in trailing whitespace, line endings, quotes or dashes)",
    "indentation": " (matched ignoring indentation; new_string was re-indented to the file's)",
}


class Match:
    """One occurrence: ``text[start:end]`` is replaced; ``indent`` re-indents new_string."""

    __slots__ = ("end", "indent", "start")

    def __init__(self, start: int, end: int, indent: tuple[str, str] | None = None) -> None:
        self.start = start
        self.end = end
        self.indent = indent

    def __repr__(self) -> str:
        return f"Match({self.start}, {self.end}, indent={self.indent!r})"


class _Folded:
    """``text`` with each line folded (see level 2) and a map back to the original offsets."""

    __slots__ = ("content_len", "folded", "lines", "nl", "norm_starts", "orig_starts")

    def __init__(self, text: str) -> None:
        self.lines: list[str] = []
        self.norm_starts: list[int] = []
        self.orig_starts: list[int] = []
        self.content_len: list[int] = []
        self.nl: list[int] = []
        pieces: list[str] = []
        orig = 0
        norm = 0
        for raw in text.split("\n"):
            line = raw[:-1] if raw.endswith("\r") else raw
            folded = line.translate(_FOLD).rstrip(" \t")
            self.lines.append(folded)
            self.norm_starts.append(norm)
            self.orig_starts.append(orig)
            self.content_len.append(len(folded))
            newline_at = orig + len(raw)
            self.nl.append(newline_at if newline_at < len(text) else -1)
            pieces.append(folded)
            norm += len(folded) + 1
            orig += len(raw) + 1
        self.folded = "\n".join(pieces)

    def _line_of(self, j: int) -> int:
        return bisect.bisect_right(self.norm_starts, j) - 1

    def start_of(self, j: int) -> int:
        """Original offset where a match starting at folded offset ``j`` starts."""
        i = self._line_of(j)
        col = j - self.norm_starts[i]
        if col < self.content_len[i]:
            return self.orig_starts[i] + col
        return self.orig_starts[i] + self.content_len[i]

    def end_of(self, j: int) -> int:
        """Original offset just past a match whose last folded character is at ``j``."""
        i = self._line_of(j)
        col = j - self.norm_starts[i]
        if col < self.content_len[i]:
            return self.orig_starts[i] + col + 1
        return self.nl[i] + 1


def _fold_lines(text: str) -> list[str]:
    return [line.translate(_FOLD).rstrip(" \t") for line in text.split("\n")]


def _leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _exact(text: str, old: str) -> list[Match]:
    found: list[Match] = []
    at = text.find(old)
    while at != -1:
        found.append(Match(at, at + len(old)))
        at = text.find(old, at + len(old))
    return found


def _lenient(folded: _Folded, old: str) -> list[Match]:
    lines = _fold_lines(old)
    raw_last = old.split("\n")[-1]
    must_end_line = lines[-1] != raw_last.translate(_FOLD) and bool(raw_last)
    needle = "\n".join(lines)
    if not needle.strip():
        return []
    hay = folded.folded
    found: list[Match] = []
    at = hay.find(needle)
    while at != -1:
        end = at + len(needle)
        if not must_end_line or end == len(hay) or hay[end] == "\n":
            found.append(Match(folded.start_of(at), folded.end_of(end - 1)))
            at = hay.find(needle, end)
        else:
            at = hay.find(needle, at + 1)
    return found


def _by_lines(folded: _Folded, text: str, old: str) -> list[Match]:
    old_lines = old.split("\n")
    with_newline = len(old_lines) > 1 and old_lines[-1] == ""
    if with_newline:
        old_lines.pop()
    keys = [line.translate(_FOLD).strip() for line in old_lines]
    first = next((i for i, k in enumerate(keys) if k), None)
    if first is None:
        return []
    old_indent = _leading_ws(old_lines[first].translate(_FOLD))
    file_keys = [line.strip() for line in folded.lines]
    n = len(keys)
    found: list[Match] = []
    i = 0
    first_key = keys[0]
    while i + n <= len(file_keys):
        if file_keys[i] == first_key and file_keys[i : i + n] == keys:
            last = i + n - 1
            start = folded.orig_starts[i]
            end = folded.nl[last] if folded.nl[last] != -1 else len(text)
            if with_newline:
                if folded.nl[last] == -1:
                    i += 1
                    continue
                end += 1
            elif end > start and text[end - 1] == "\r" and folded.nl[last] != -1:
                end -= 1
            line_start = folded.orig_starts[i + first]
            file_indent = _leading_ws(text[line_start : line_start + folded.content_len[i + first] + 1])
            found.append(Match(start, end, (old_indent, file_indent)))
            i += n
        else:
            i += 1
    return found


def find_matches(text: str, old: str) -> tuple[str, list[Match]]:
    """Where ``old`` occurs in ``text``: the matching level used and the occurrences.

    The level is ``"exact"``, ``"normalized"`` or ``"indentation"`` (see the module
    docstring); the list is empty when nothing matched.
    """
    found = _exact(text, old)
    if not found and "\r\n" in text and "\n" in old and "\r" not in old:
        found = _exact(text, old.replace("\n", "\r\n"))
    if found:
        return "exact", found
    folded = _Folded(text)
    found = _lenient(folded, old.replace("\r\n", "\n"))
    if found:
        return "normalized", found
    return "indentation", _by_lines(folded, text, old.replace("\r\n", "\n"))


def _relead(rest: str, to_tabs: bool, unit: int) -> str:
    body = rest.lstrip(" \t")
    lead = rest[: len(rest) - len(body)]
    width = lead.count(" ") + lead.count("\t") * unit
    if to_tabs:
        return "\t" * (width // unit) + " " * (width % unit) + body
    return " " * width + body


def _reindent(new: str, indent: tuple[str, str]) -> str:
    """Move ``new`` from ``old_string``'s indentation to the file's, tabs or spaces alike."""
    old_indent, file_indent = indent
    if old_indent == file_indent:
        return new
    to_tabs: bool | None = None
    unit = 4
    if "\t" in file_indent and "\t" not in old_indent:
        to_tabs = True
        if old_indent:
            unit = max(1, len(old_indent) // file_indent.count("\t"))
    elif "\t" in old_indent and "\t" not in file_indent:
        to_tabs = False
        if file_indent:
            unit = max(1, len(file_indent) // old_indent.count("\t"))
    out = []
    for line in new.split("\n"):
        if not line.strip():
            out.append(line)
            continue
        rest = line[len(old_indent) :] if line.startswith(old_indent) else line.lstrip(" \t")
        if to_tabs is not None:
            rest = _relead(rest, to_tabs, unit)
        out.append(file_indent + rest)
    return "\n".join(out)


def _line_ending(text: str, region: str) -> str:
    if "\r\n" in region:
        return "\r\n"
    if "\n" in region:
        return "\n"
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def _apply(text: str, matches: list[Match], new: str) -> str:
    new = new.replace("\r\n", "\n")
    pieces: list[str] = []
    pos = 0
    for m in matches:
        replacement = _reindent(new, m.indent) if m.indent is not None else new
        eol = _line_ending(text, text[m.start : m.end])
        if eol != "\n":
            replacement = replacement.replace("\n", eol)
        pieces.append(text[pos : m.start])
        pieces.append(replacement)
        pos = m.end
    pieces.append(text[pos:])
    return "".join(pieces)


def _diff_lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _range(start: int, stop: int) -> str:
    beginning = start + 1
    length = stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def unified_diff(old: str, new: str, name: str, context: int = 3) -> str:
    """A unified diff (``--- a/name``, ``+++ b/name``, hunks) of two texts, LF line breaks.

    Lines shared at the start and end are set aside before diffing, so a small change in a
    big file costs little.
    """
    a = _diff_lines(old)
    b = _diff_lines(new)
    limit = min(len(a), len(b))
    head = 0
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if head == len(a) == len(b):
        return ""
    lo = max(0, head - context)
    keep = max(0, tail - context)
    a_win = a[lo : len(a) - keep]
    b_win = b[lo : len(b) - keep]
    out = [f"--- a/{name}", f"+++ b/{name}"]
    for group in difflib.SequenceMatcher(None, a_win, b_win, autojunk=False).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1] + lo, last[2] + lo)} +{_range(first[3] + lo, last[4] + lo)} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in a_win[i1:i2])
                continue
            if tag in ("replace", "delete"):
                out.extend("-" + line for line in a_win[i1:i2])
            if tag in ("replace", "insert"):
                out.extend("+" + line for line in b_win[j1:j2])
    return "\n".join(out)


def _closest_line(text: str, old: str) -> str:
    target = next((line.strip() for line in old.split("\n") if line.strip()), "")
    lines = text.split("\n")
    if not target or len(lines) > 50_000:
        return ""
    stripped = [line.strip() for line in lines]
    close = difflib.get_close_matches(target, stripped, n=1, cutoff=0.6)
    if not close:
        return ""
    number = stripped.index(close[0]) + 1
    return f"\nThe most similar line is line {number}: {lines[number - 1].rstrip()}"


def stale_problem(tool: FileChangeTool, path_arg: Any, action: str, *, missing: str | None) -> str | None:
    """A file-changing call's precheck: the error it would get now from where its path
    leads (outside the workspace, refused by a rule), a missing file (``missing``, a
    format string with ``{shown}``; None: a missing file is fine), a file with more than
    one hard link, or a file not read yet or changed since (``action`` is the verb of the
    message). Nothing is opened."""
    located = tool.locate(path_arg, write=True)
    if isinstance(located, ToolResult):
        return located.text
    path, shown = located
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return missing.format(shown=shown) if missing is not None else None
    except OSError:
        return None  # the tool reports it
    if not stat.S_ISREG(info.st_mode):
        return None  # the tool refuses folders and special files with its own message
    if info.st_nlink > 1:
        return hard_link_message(shown, info.st_nlink)  # refused before anything else, as the tool does
    try:
        tool.workspace.check_fresh(path, info, None, action=action)
    except WorkspaceError as exc:
        return str(exc)
    except OSError:
        return None
    return None


class EditTool(FileChangeTool):
    """The ``edit`` tool (sequential). See the module docstring for the matching rules.

    :meth:`precheck` tells the permission engine, before it asks anyone, that an edit
    would fail (a file not read yet, changed since, missing or refused)."""

    __slots__ = ()

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(workspace, "edit", _DESCRIPTION, _PARAMETERS, "Edit")

    def precheck(self, args: dict[str, Any]) -> str | None:
        """Why an edit with ``args`` would fail now (:func:`stale_problem`), or None."""
        return stale_problem(self, args.get("path", ""), "edit", missing=_MISSING)

    async def _change(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult | Change:
        ws = self.workspace
        old = args.get("old_string")
        new = args.get("new_string")
        replace_all = args.get("replace_all", False)
        if not isinstance(old, str) or not isinstance(new, str):
            return ToolResult.error("old_string and new_string must both be strings.")
        located = self.locate(args.get("path", ""), write=True)
        if isinstance(located, ToolResult):
            return located
        path, shown = located
        if old == "":
            return ToolResult.error(
                "old_string is empty. Give the exact text to replace (to insert text, include a "
                "neighbouring line and repeat it in new_string); to create a file use the write tool."
            )
        if old == new:
            return ToolResult.error("old_string and new_string are identical; there is nothing to change.")
        try:
            if path.is_dir():
                return ToolResult.error(f"{shown} is a directory, not a file.")
            fd, stat = open_regular(path, shown, "edited", single_link=True)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            ws.check_fresh(path, stat, data, action="edit")
        except FileNotFoundError:
            return ToolResult.error(_MISSING.format(shown=shown))
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        except OSError as exc:
            return ToolResult.error(f"Cannot read {shown}: {exc.strerror or exc}.")
        bom = data.startswith(b"\xef\xbb\xbf")
        try:
            text = data[3 if bom else 0 :].decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult.error(f"{shown} is not UTF-8 text; the edit tool only edits text files.")
        mode, matches = find_matches(text, old)
        if not matches:
            return ToolResult.error(
                f"Could not find old_string in {shown}. It must match the file's text, including line "
                "breaks (differences in indentation, trailing spaces, line endings, quotes and dashes "
                "are tolerated). Read the file again and copy the exact text." + _closest_line(text, old)
            )
        if len(matches) > 1 and replace_all is not True:
            return ToolResult.error(
                f"Found {len(matches)} matches of old_string in {shown}. Include more surrounding lines "
                "in old_string to make it unique, or set replace_all=true to replace every occurrence."
            )
        updated = _apply(text, matches, new)
        if updated == text:
            return ToolResult.error(f"The replacement leaves {shown} unchanged; nothing was written.")
        out = (b"\xef\xbb\xbf" if bom else b"") + updated.encode("utf-8")

        async def write() -> ToolResult | None:
            try:
                fd, _ = open_regular(path, shown, "edited", write=True, single_link=True)
                with os.fdopen(fd, "r+b") as f:
                    f.write(out)
                    f.truncate()
                    f.flush()
                    new_stat = os.fstat(f.fileno())
            except WorkspaceError as exc:
                return ToolResult.error(str(exc))
            except OSError as exc:
                return ToolResult.error(f"Cannot write {shown}: {exc.strerror or exc}.")
            ws.record(path, out, new_stat)
            return None

        diff = unified_diff(text, updated, shown)
        count = len(matches)
        summary = f"Edited {shown}: replaced {count} occurrence{'s' if count != 1 else ''}{_MODE_NOTES[mode]}."
        shown_diff = diff
        diff_lines = diff.split("\n")
        if len(diff_lines) > _DIFF_CONTENT_LINES:
            cut = len(diff_lines) - _DIFF_CONTENT_LINES
            shown_diff = "\n".join(diff_lines[:_DIFF_CONTENT_LINES]) + f"\n[diff cut: {cut} more lines]"
        result = ToolResult(
            content=f"{summary}\n\n{shown_diff}",
            details={
                "path": str(path),
                "diff": diff,
                "replacements": count,
                "match": mode,
                "first_changed_line": text.count("\n", 0, matches[0].start) + 1,
            },
        )
        return Change(path, out, result, write)
