"""The ``grep`` and ``find`` tools: search file contents and file names in the workspace.

``grep`` uses ripgrep (``rg --json``) when it is on PATH and a Python fallback otherwise;
both print ``path:line:text`` for matching lines and ``path-line-text`` for context lines,
with ``--`` between separate groups, files in path order. Both skip ``.git``,
``node_modules``, ``.venv`` and cache folders and search hidden files; ripgrep also
honours ``.gitignore`` files, the fallback does not. Both run as child processes in
sessions of their own (the fallback is :mod:`ketch.tools._grep_worker`), killed on abort,
cancellation or at the tool's deadline, so no pattern can freeze the agent. Named pipes,
devices and sockets are skipped inside folders and refused as the search path: reading
them could block forever.

``find`` lists files whose path, relative to the search folder, matches a glob
(``*`` and ``?`` stay inside one path segment, ``**`` spans any number of folders,
``[abc]`` and ``{a,b}`` work as in shells; ``*`` also matches names starting with a dot).
Results are sorted by path (default) or by modification time, newest first. Only regular
files (and symlinks to them) are listed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from stat import S_ISDIR
from typing import Any
from typing import Literal
from typing import NamedTuple
from typing import TypeVar

import msgspec

from .._paths import absolute_patterns
from .._proc import signal_group
from .._proc import spawn_group
from .._proc import untrack_process_group
from ..llm import Aborted
from ..loop import ToolContext
from ..loop import ToolResult
from ..sandbox import Sandbox
from ..sandbox import SandboxPolicy
from ..sandbox import tool_environment
from ._workspace import Workspace
from ._workspace import WorkspaceError
from ._workspace import WorkspaceTool
from ._workspace import open_folder
from ._workspace import special_kind

IGNORED_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"}
)
"""Folders that ``grep`` and ``find`` never enter."""

MAX_LINE_CHARS = 500
MAX_BYTES = 50 * 1024

_T = TypeVar("_T")


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                if pattern.startswith("**/", i):
                    out.append("(?:.*/)?")
                    i += 3
                else:
                    out.append(".*")
                    i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "{":
            end = pattern.find("}", i)
            if end == -1:
                out.append(re.escape(c))
            else:
                alternatives = pattern[i + 1 : end].split(",")
                out.append("(?:" + "|".join(_translate(a) for a in alternatives) + ")")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex that fully matches the ``/``-separated paths ``pattern`` matches."""
    return re.compile("(?s:" + _translate(pattern) + r")\Z")


async def _in_thread(fn: Callable[[threading.Event], _T], ctx: ToolContext[Any]) -> _T:
    """Run ``fn(stop)`` in a worker thread; ``stop`` is set on abort or cancellation."""
    stop = threading.Event()
    remove = ctx.signal.add_callback(stop.set)
    try:
        return await asyncio.to_thread(fn, stop)
    except asyncio.CancelledError:
        stop.set()
        raise
    finally:
        remove()


# --- grep ----------------------------------------------------------------------------

_Record = tuple[str, int, str, bool]

_GREP_DESCRIPTION = """Search file contents with a regular expression (ripgrep syntax; \
Python syntax in the fallback).

Prints `path:line:text` for each matching line (`path-line-text` for context lines, `--` \
between groups). Searches the workspace root or `path` (a folder or a file), skipping .git, \
node_modules and .venv. Filter files with `glob` (e.g. `*.py`, `src/**/*.ts`). At most \
`max_results` matching lines are shown (default 100); lines are cut at 500 characters."""

_GREP_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Regular expression to search for."},
        "path": {"type": "string", "description": "Folder or file to search (default: the workspace root)."},
        "glob": {"type": "string", "description": "Only search files matching this glob, e.g. '*.py'."},
        "ignore_case": {"type": "boolean", "description": "Case-insensitive search."},
        "literal": {"type": "boolean", "description": "Treat pattern as a literal string, not a regex."},
        "context": {
            "type": "integer",
            "minimum": 0,
            "maximum": 20,
            "description": "Lines of context to show before and after each match.",
        },
        "max_results": {"type": "integer", "minimum": 1, "description": "Maximum matching lines (default 100)."},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}


class _Query(NamedTuple):
    """What one grep call searches for, as both backends take it."""

    pattern: str
    base: Path
    glob: str | None
    context: int
    ignore_case: bool
    literal: bool


class _Formatter:
    """Turns match and context records into the output text, stopping at the limits."""

    def __init__(self, workspace: Workspace, context: int, max_results: int) -> None:
        self._ws = workspace
        self._context = context
        self._max = max_results
        self._lines: list[str] = []
        self._size = 0
        self._last: tuple[str, int] | None = None
        self._shown_paths: dict[str, str] = {}
        self.matches = 0
        self.more = False
        self.cut_bytes = False

    @property
    def done(self) -> bool:
        """True once no further record is wanted."""
        return self.more or self.cut_bytes

    def add(self, path: str, number: int, text: str, is_match: bool) -> None:
        """Add one line of ``path`` (absolute)."""
        if self.done:
            return
        if is_match and self.matches >= self._max:
            self.more = True
            return
        shown = self._shown_paths.get(path)
        if shown is None:
            shown = self._shown_paths[path] = self._ws.display(path)
        text = text.rstrip("\n").removesuffix("\r")
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + " [... line cut]"
        lines = []
        if self._context and self._last is not None and self._last != (path, number - 1):
            lines.append("--")
        lines.append(f"{shown}{':' if is_match else '-'}{number}{':' if is_match else '-'}{text}")
        size = sum(len(line.encode("utf-8")) + 1 for line in lines)
        if self._size + size > MAX_BYTES:
            self.cut_bytes = True
            return
        self._lines.extend(lines)
        self._size += size
        self._last = (path, number)
        if is_match:
            self.matches += 1

    def text(self) -> str:
        """The output, with a note when something was left out."""
        body = "\n".join(self._lines)
        if self.more:
            body += (
                f"\n\n[Showing the first {self.matches} matching lines; there are more. Use a more "
                "specific pattern, path or glob, or raise max_results.]"
            )
        elif self.cut_bytes:
            body += (
                f"\n\n[Output cut at 50 KB after {self.matches} matching lines. Use a more specific "
                "pattern, path or glob.]"
            )
        return body


def _rg_text(value: dict[str, Any]) -> str:
    if "text" in value:
        return str(value["text"])
    return base64.b64decode(value.get("bytes", "")).decode("utf-8", errors="replace")


_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_grep_worker.py")


_Confined = tuple[Sandbox, SandboxPolicy]  # a search process's sandbox and its policy


class _Child:
    """A search process in a session of its own, tracked so that the program's exit
    (see :func:`ketch._proc.kill_process_groups`) ends it too. It gets the scrubbed
    :func:`~ketch.sandbox.tool_environment`, never the agent's keys."""

    __slots__ = ("_release", "proc")

    def __init__(self, proc: asyncio.subprocess.Process, release: Callable[[], None] | None = None) -> None:
        self.proc = proc
        self._release = release

    @classmethod
    async def start(
        cls, argv: list[str], cwd: Path | None = None, stdin: bool = False, sandbox: _Confined | None = None
    ) -> _Child:
        """Start ``argv``; with ``sandbox`` (the sandbox and its policy) inside it."""
        env = tool_environment()
        release = None
        extra: dict[str, Any] = {}
        started: Any = None
        if sandbox is not None:
            box, policy = sandbox
            wrapped, env = box.wrap(argv, policy, env)
            argv = wrapped
            release = lambda: box.release(wrapped)  # noqa: E731
            options = getattr(box, "spawn_options", None)
            extra = options(wrapped) if options is not None else {}
            started = getattr(box, "started", None)
        try:
            proc = await spawn_group(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=4 * 1024 * 1024,
                cwd=cwd,
                env=env,
                **extra,
            )
        except BaseException:
            if release is not None:
                release()
            raise
        child = cls(proc, release)
        if started is not None:
            try:
                refused = await started(argv, proc.pid)
            except BaseException:
                await child.end(kill=True)
                raise
            if refused is not None:
                await child.end(kill=True)
                raise OSError(f"the search could not run in the sandbox: {refused}")
        return child

    async def end(self, kill: bool) -> None:
        """Kill the process group if asked (and the process still runs), reap the process."""
        proc = self.proc
        if kill and proc.returncode is None:
            # os.killpg, not proc.kill: Popen.send_signal would reap the process behind
            # the child watcher's back.
            signal_group(proc.pid)
        try:
            await proc.wait()
        finally:
            untrack_process_group(proc.pid)
            if self._release is not None:
                self._release()


class GrepTool(WorkspaceTool):
    """The ``grep`` tool (concurrency-safe). See the module docstring.

    ``ripgrep`` is the path of the ``rg`` program to use, ``False`` to always use the
    Python fallback, or ``None`` (default) to look ``rg`` up on PATH at the first call.
    The Python fallback runs in a separate process, so a pathological pattern cannot
    freeze the agent. A search that takes longer than ``deadline`` seconds (default 30)
    is stopped with an error; an abort of the run stops it at once.

    With a ``sandbox``, the search process runs in it, read-only, with ``hidden`` (the
    paths the ``Read`` deny rules name, as the bash tool's) gone: a folder a command
    swaps for a symlink while the search walks it cannot lead to them.
    """

    __slots__ = ("_rg", "deadline", "hidden", "sandbox")

    def __init__(
        self,
        workspace: Workspace,
        *,
        ripgrep: str | Literal[False] | None = None,
        deadline: float = 30.0,
        sandbox: Sandbox | None = None,
        hidden: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        super().__init__(workspace, "grep", _GREP_DESCRIPTION, _GREP_PARAMETERS, label="Grep", sequential=False, read_only=True)
        self._rg: str | Literal[False] | None = ripgrep
        self.deadline = deadline
        # a sandbox that cannot run is none (as for the bash tool): no search would run
        self.sandbox = sandbox if sandbox is not None and sandbox.unavailable_reason() is None else None
        self.hidden = tuple(Path(p) for p in absolute_patterns(hidden, workspace.root))

    def _confined(self, program: Sequence[str]) -> _Confined | None:
        """The sandbox and policy a search process runs under: the workspace and its other
        roots read-only, and the files and folders the search ``program`` is made of, as
        they resolve (they may lie in ``/tmp`` or ``/run``, which are private in the
        sandbox): a file's folder is shown."""
        if self.sandbox is None:
            return None
        ws = self.workspace
        extra = [r for r in ws.roots if r != ws.root]
        for part in program:
            real = os.path.realpath(part)
            if os.path.isdir(real):
                extra.append(Path(real))
            else:  # the folder of the name given (a link, perhaps) and of what it leads to
                extra += (Path(os.path.realpath(os.path.dirname(os.path.abspath(part)))), Path(os.path.dirname(real)))
        policy = SandboxPolicy(
            workspace=ws.root,
            write=False,
            extra_writable=tuple(dict.fromkeys(extra)),
            hidden=self.hidden,
            as_caller=True,  # ketch's own search, confined to the workspace: as ketch's user
        )
        return self.sandbox, policy

    def _ripgrep(self) -> str | None:
        if self._rg is None:
            self._rg = shutil.which("rg") or False
        return self._rg or None

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Search for ``args["pattern"]``."""
        ws = self.workspace
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or pattern == "":
            return ToolResult.error("pattern is empty. Give a regular expression to search for.")
        glob = args.get("glob") or None
        context = args.get("context") or 0
        max_results = args.get("max_results") or 100
        ignore_case = bool(args.get("ignore_case"))
        literal = bool(args.get("literal"))
        located = self.locate_existing(args.get("path"), "Path not found: {shown}", default_root=True, search=True)
        if isinstance(located, ToolResult):
            return located
        base, shown, mode = located
        kind = special_kind(mode)
        if kind is not None:
            return ToolResult.error(
                f"{shown} is {kind}, not a regular file or folder; only regular files and folders can be searched."
            )
        formatter = _Formatter(ws, context, max_results)
        query = _Query(pattern, base, glob, context, ignore_case, literal)
        rg = self._ripgrep()
        try:
            async with asyncio.timeout(self.deadline), ctx.signal.scope():
                if rg is not None:
                    folder = base if base.is_dir() else base.parent
                    error = await self._run_rg(rg, query, formatter, folder)
                else:
                    error = await self._run_python(query, formatter)
        except TimeoutError:
            return ToolResult.error(
                f"The search for {pattern!r} timed out after {self.deadline:g} seconds and was stopped. Use a "
                "simpler pattern (nested repetition such as (a+)+ can take forever) or a narrower path or glob."
            )
        except Aborted:
            return ToolResult.error(f"The search for {pattern!r} was aborted.")
        if error is not None:
            return ToolResult.error(error)
        details = {"matches": formatter.matches, "truncated": formatter.done, "backend": "rg" if rg else "python"}
        if formatter.matches == 0:
            where = f" (files matching {glob!r})" if glob else ""
            return ToolResult(content=f"No matches for {pattern!r} in {shown}{where}.", details=details)
        return ToolResult(content=formatter.text(), details=details)

    async def _run_python(self, query: _Query, formatter: _Formatter) -> str | None:
        pattern, base, glob, context, ignore_case, literal = query
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        source = re.escape(pattern) if literal else pattern
        try:
            re.compile(source, flags)
        except re.error as exc:
            return f"Invalid regular expression {pattern!r}: {exc}."
        request = {
            "base": str(base),
            "pattern": source,
            "flags": int(flags),
            "glob": glob_to_regex(glob).pattern if glob else None,
            "glob_has_slash": bool(glob and "/" in glob),
            "context": context,
            "ignored": sorted(IGNORED_DIRS),
            "line_chars": MAX_LINE_CHARS,
        }
        if not sys.executable:
            return "The Python grep fallback cannot run: the Python interpreter's path is unknown. Install ripgrep (rg)."
        try:
            # the interpreter, its standard library and the worker
            program = (sys.executable, sys.prefix, sys.base_prefix, _WORKER)
            child = await _Child.start(
                [sys.executable, "-I", "-S", _WORKER], stdin=True, sandbox=self._confined(program)
            )
        except OSError as exc:
            return f"Could not start the Python grep fallback ({sys.executable}): {exc.strerror or exc}."
        proc = child.proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        finished = False
        try:
            proc.stdin.write(json.dumps(request).encode("utf-8"))
            proc.stdin.close()
            while not formatter.done:
                line = await proc.stdout.readline()
                if not line:
                    break
                path, number, text, is_match = json.loads(line)
                formatter.add(path, number, text, is_match)
            stderr = b"" if formatter.done else await proc.stderr.read()
            finished = not formatter.done
        finally:
            await child.end(kill=not finished)
        if finished and proc.returncode:
            message = stderr.decode("utf-8", errors="replace").strip().splitlines()
            return f"The Python grep fallback failed: {message[-1] if message else f'exit code {proc.returncode}'}"
        return None

    async def _run_rg(self, rg: str, query: _Query, formatter: _Formatter, folder: Path) -> str | None:
        pattern, base, glob, context, ignore_case, literal = query
        argv = [rg, "--json", "--no-config", "--hidden", "--crlf", "--sort=path", "--no-messages"]
        for name in sorted(IGNORED_DIRS):
            argv += ["--glob", f"!{name}"]
        if glob:
            argv += ["--glob", glob]
        if ignore_case:
            argv.append("--ignore-case")
        if literal:
            argv.append("--fixed-strings")
        if context:
            argv += ["--context", str(context)]
        argv += ["--regexp", pattern, "--", str(base)]
        try:
            # ripgrep matches globs that contain '/' against paths relative to its cwd.
            child = await _Child.start(argv, cwd=folder, sandbox=self._confined((rg,)))
        except OSError as exc:
            return f"Could not run ripgrep ({rg}): {exc.strerror or exc}."
        proc = child.proc
        assert proc.stdout is not None and proc.stderr is not None
        decode = msgspec.json.Decoder().decode
        finished = False
        summary = False  # ripgrep ends every search it ran with one (a sandbox that failed: none)
        try:
            while not formatter.done:
                line = await proc.stdout.readline()
                if not line:
                    break
                try:
                    event = decode(line)
                except msgspec.DecodeError:
                    continue
                kind = event.get("type")
                if kind == "summary":
                    summary = True
                elif kind == "match" or kind == "context":
                    data = event["data"]
                    formatter.add(_rg_text(data["path"]), data["line_number"], _rg_text(data["lines"]), kind == "match")
            stderr = b"" if formatter.done else await proc.stderr.read()
            finished = not formatter.done
        finally:
            await child.end(kill=not finished)
        if (proc.returncode == 2 or not summary) and formatter.matches == 0 and not formatter.done:
            message = stderr.decode("utf-8", errors="replace").strip()
            return f"ripgrep failed: {message or f'exit code {proc.returncode}'}"
        return None


# --- find ----------------------------------------------------------------------------

_FIND_DESCRIPTION = """Find files by glob pattern, e.g. `**/*.py` or `src/**/test_*.ts`.

The pattern is matched against paths relative to `path` (default: the workspace root): \
`*` stays within one folder, `**` spans folders, so `*.py` only finds files directly in \
`path`. Results are sorted by path, or with `sort: "mtime"` by modification time, newest \
first. At most `limit` files are listed (default 200). .git, node_modules and .venv are \
skipped unless the pattern names them."""

_FIND_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Glob pattern, e.g. '**/*.py'."},
        "path": {"type": "string", "description": "Folder to search (default: the workspace root)."},
        "sort": {"type": "string", "enum": ["path", "mtime"], "description": "Sort order (default 'path')."},
        "limit": {"type": "integer", "minimum": 1, "description": "Maximum files to list (default 200)."},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}


_SUBFOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _walk_folder(
    fd: int,
    path: str,
    stop: threading.Event,
    keep: Callable[[str], bool],
    max_depth: int | None,
    hidden: Callable[[str], bool] | None,
    prefix: str = "",
    depth: int = 1,
) -> Iterator[tuple[str, str, os.DirEntry[str]]]:
    """``(relative posix path, absolute path, entry)`` of the non-folder entries below the
    open folder ``fd`` (at ``path``) in path order, as the grep fallback's walk gives them; each
    subfolder is opened from its parent with ``O_NOFOLLOW``, so one swapped for a
    symlink while the walk runs is skipped, never followed."""
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if stop.is_set():
            return
        name = entry.name
        full = f"{path}/{name}"
        if hidden is not None and hidden(full):
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if not is_dir:
            yield prefix + name, full, entry
        elif (name not in IGNORED_DIRS or keep(name)) and (max_depth is None or depth < max_depth):
            try:
                inner = os.open(name, _SUBFOLDER, dir_fd=fd)
            except OSError:
                continue
            try:
                yield from _walk_folder(inner, full, stop, keep, max_depth, hidden, f"{prefix}{name}/", depth + 1)
            finally:
                os.close(inner)


def _find_files(
    base: Path, shown: str, pattern: str, by_mtime: bool, stop: threading.Event, hidden: Callable[[str], bool] | None
) -> list[tuple[str, float]]:
    pattern = pattern.removeprefix("./")
    regex = glob_to_regex(pattern)
    max_depth = None if "**" in pattern else pattern.count("/") + 1
    found: list[tuple[str, float]] = []
    walked = open_folder(str(base), shown)
    try:
        fd = os.open(".", _SUBFOLDER, dir_fd=walked)
    finally:
        os.close(walked)
    try:
        for rel, full, entry in _walk_folder(fd, str(base).rstrip("/"), stop, lambda name: name in pattern, max_depth, hidden):
            if regex.match(rel):
                try:
                    if not entry.is_file():
                        continue
                    mtime = entry.stat().st_mtime if by_mtime else 0.0
                except OSError:
                    continue
                found.append((full, mtime))
    finally:
        os.close(fd)
    return found


class FindTool(WorkspaceTool):
    """The ``find`` tool (concurrency-safe). See the module docstring."""

    __slots__ = ()

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(workspace, "find", _FIND_DESCRIPTION, _FIND_PARAMETERS, label="Find", sequential=False, read_only=True)

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """List files matching ``args["pattern"]``."""
        ws = self.workspace
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern.strip():
            return ToolResult.error("pattern is empty. Give a glob such as '**/*.py'.")
        sort = args.get("sort") or "path"
        if sort not in ("path", "mtime"):
            return ToolResult.error(f"sort must be 'path' or 'mtime', got {sort!r}.")
        limit = args.get("limit") or 200
        missing = "{shown} does not exist; give a folder to search."
        located = self.locate_existing(args.get("path"), missing, default_root=True)
        if isinstance(located, ToolResult):
            return located
        base, shown, mode = located
        if not S_ISDIR(mode):
            kind = special_kind(mode)
            what = f"is {kind}, not a folder" if kind else "is not a folder"
            return ToolResult.error(f"{shown} {what}; give a folder to search.")
        patterns = ws.hidden_now()  # resolved once for the whole walk
        hidden = (lambda path: ws.is_hidden(path, patterns)) if patterns else None
        try:
            found = await _in_thread(lambda stop: _find_files(base, shown, pattern, sort == "mtime", stop, hidden), ctx)
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        except OSError as exc:
            return ToolResult.error(f"Cannot search {shown}: {exc.strerror or exc}.")
        if sort == "mtime":
            found.sort(key=lambda item: (-item[1], item[0]))
        details = {"total": len(found), "truncated": len(found) > limit}
        if not found:
            return ToolResult(content=f"No files match {pattern!r} in {shown}.", details=details)
        lines = [ws.display(path) for path, _ in found[:limit]]
        text = "\n".join(lines)
        if len(found) > limit:
            text += (
                f"\n\n[Showing {limit} of {len(found)} files (sorted by {sort}). Use a more specific "
                "pattern or path, or raise limit.]"
            )
        return ToolResult(content=text, details=details)
