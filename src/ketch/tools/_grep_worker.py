"""The Python fallback of the ``grep`` tool, run in a process of its own.

Python's ``re`` holds the interpreter lock for a whole match, and a pattern with nested
repetition (``(a+)+$``) can backtrack for longer than the universe exists; in the agent's
own process that would freeze the event loop and every signal handler with it. So the
tool runs this file as a separate Python process (stdlib only, started with ``-I -S``)
that it can kill on abort or at its deadline.

Protocol: one JSON request object on stdin (see :func:`main`); one JSON array per line on
stdout, ``[path, line_number, text, is_match]``, files in path order. Exit status 0 when
the search completed, 2 with a message on stderr when it could not start.

:func:`walk` is also used in-process by the ``find`` tool.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator

_MAX_FILE_BYTES = 32 * 1024 * 1024


def _never() -> bool:
    return False


def walk(
    folder: str,
    ignored: Iterable[str],
    stop: Callable[[], bool] = _never,
    keep: Callable[[str], bool] = lambda name: False,
    max_depth: int | None = None,
    prefix: str = "",
    depth: int = 1,
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Non-folder entries below ``folder`` in path order, as (relative posix path, entry).

    Skips folders named in ``ignored`` (unless ``keep(name)``), does not follow symlinked
    folders and does not descend below ``max_depth`` path segments. Never opens a file.
    """
    ignored = ignored if isinstance(ignored, (set, frozenset)) else frozenset(ignored)
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if stop():
            return
        rel = prefix + entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if not is_dir:
            yield rel, entry
        elif (entry.name not in ignored or keep(entry.name)) and (max_depth is None or depth < max_depth):
            yield from walk(entry.path, ignored, stop, keep, max_depth, rel + "/", depth + 1)


def _read_regular(path: str) -> bytes | None:
    """The start of ``path`` if it is a regular file; never blocks on a pipe or device."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(_MAX_FILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def grep(
    base: str,
    regex: re.Pattern[str],
    glob: re.Pattern[str] | None,
    glob_has_slash: bool,
    context: int,
    ignored: Iterable[str],
    line_chars: int,
    emit: Callable[[str, int, str, bool], None],
    flush: Callable[[], object] = _never,
) -> None:
    """Search the regular files below ``base`` (or ``base`` itself) and ``emit`` matching and
    context lines (``flush`` after each file with matches); lines are cut to
    ``line_chars + 1`` characters. Binary files (a NUL byte
    in the first 8 KB), symlinks and special files (pipes, devices, sockets) are skipped."""
    files: Iterator[tuple[str, str]]
    if os.path.isfile(base):
        files = iter([(os.path.basename(base), base)])
        glob = None
    else:
        files = (
            (rel, entry.path) for rel, entry in walk(base, ignored) if entry.is_file(follow_symlinks=False)
        )
    precheck = "\\A" not in regex.pattern and "\\Z" not in regex.pattern
    for rel, full in files:
        if glob is not None and not glob.match(rel if glob_has_slash else rel.rsplit("/", 1)[-1]):
            continue
        data = _read_regular(full)
        if data is None or b"\x00" in data[:8192]:
            continue
        text = data.decode("utf-8", errors="replace")
        if precheck and regex.search(text.replace("\r\n", "\n") if "\r" in text else text) is None:
            continue
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        hits = [i for i, line in enumerate(lines) if regex.search(line.removesuffix("\r"))]
        if not hits:
            continue
        wanted: dict[int, bool] = {}
        for i in hits:
            for j in range(max(0, i - context), min(len(lines), i + context + 1)):
                wanted.setdefault(j, False)
            wanted[i] = True
        for j in sorted(wanted):
            emit(full, j + 1, lines[j].removesuffix("\r")[: line_chars + 1], wanted[j])
        flush()


def main() -> int:
    """Read the request from stdin, write the records to stdout; the exit status.

    The request: ``{"base", "pattern", "flags", "glob" (a regex or null),
    "glob_has_slash", "context", "ignored", "line_chars"}``.
    """
    try:
        request = json.loads(sys.stdin.buffer.read())
        regex = re.compile(request["pattern"], request["flags"])
        glob = re.compile(request["glob"]) if request["glob"] is not None else None
    except (ValueError, KeyError, TypeError, re.error) as exc:
        sys.stderr.write(f"bad request: {exc}\n")
        return 2
    out = sys.stdout.buffer
    dumps = json.dumps

    def emit(path: str, number: int, text: str, is_match: bool) -> None:
        out.write(dumps([path, number, text, is_match]).encode("ascii") + b"\n")

    try:
        grep(
            request["base"],
            regex,
            glob,
            bool(request["glob_has_slash"]),
            int(request["context"]),
            frozenset(request["ignored"]),
            int(request["line_chars"]),
            emit,
            out.flush,
        )
        out.flush()
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
