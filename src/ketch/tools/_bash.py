"""The ``bash`` tool: run a shell command in the workspace.

The command runs as ``bash -c COMMAND`` (``/bin/sh -c`` where bash is missing) in its own
session and process group, with standard input closed and stdout and stderr merged into
one pipe. Its environment is built from an allow-list (PATH, HOME, LANG, LC_*, TERM, …;
see :func:`ketch.sandbox.tool_environment`), never the whole process environment, and
never holds secrets; plus any variables the tool was given.

With a sandbox (:mod:`ketch.sandbox`), every command runs inside it: the workspace is
writable when ``write_allowed()`` says so at the call (else the whole filesystem is
read-only), ``.git/config``, ``.git/hooks`` and ``.ketch`` stay read-only, there is no
network unless ``network=True``, and ``/proc`` shows only the sandbox's processes. A
denial is the command's own output and exit status, with a one-line ``[sandbox: …]``
hint appended when the failure looks like one. Background processes end with the
command. Without a usable sandbox the tool still runs commands (``sandboxed`` is False
and ``sandbox_warning`` says why).

Output is streamed through ``ctx.report`` as text chunks (``str``), at most about every
100 ms, up to 16 MiB (then a note says the rest is not streamed). The result shows the
last 2000 lines or 50 KB of output, whichever is less; when more was produced, the output
is kept in a log file whose path the result gives (inside the workspace's scratch
directory, so the read tool can open it): all of it up to 16 MiB, else its first and last
8 MiB, and a line in the result says how much was cut. The logs are deleted with the
scratch directory (:meth:`Workspace.close`, or when the program exits).

A non-zero exit status, death by a signal, a timeout and an abort are results with
``is_error=True`` that still carry the output. On timeout, abort (``ctx.signal``) or
cancellation of the calling task, the whole process group gets SIGTERM, then SIGKILL
after a short grace period. Background processes still holding the output pipe when
the shell exits are left running, but the pipe is closed and their later output lost.
Every command's process group is tracked until it is empty; :func:`ketch._proc.kill_process_groups`
ends those still running (the ``ketch`` command calls it on every way out, so a second
Ctrl-C or a closed terminal leaves no orphaned tool processes behind).

A call is read-only (may run concurrently with other read-only tools) only when
:func:`is_read_only_command` says so; otherwise the tool runs alone.

With a task registry (``tasks=``, :class:`ketch.tasks.TaskRegistry`) the tool takes
``background: true``: the command starts the same way (sandbox, environment, process
group) as a task of kind ``shell`` and the call returns its id at once; its output goes
to the registry (``task_output``), its default timeout is ``max_timeout``, it survives
the run that started it, and ``task_stop`` kills its process group.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fnmatch
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import IO
from typing import TYPE_CHECKING
from typing import Any

from .._paths import absolute_patterns
from .._proc import group_alive
from .._proc import signal_group
from .._proc import spawn_group
from .._proc import untrack_process_group
from .._shell import matching_paren
from ..llm import Aborted
from ..llm import AbortSignal
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult
from ..sandbox import DEFAULT_PROTECTED
from ..sandbox import NetworkPolicy
from ..sandbox import Sandbox
from ..sandbox import SandboxLimits
from ..sandbox import SandboxPolicy
from ..sandbox import denial_hint
from ..sandbox import has_url_password
from ..sandbox import is_secret_name
from ..sandbox import protected_names
from ..sandbox import tool_environment
from ._workspace import Workspace
from ._workspace import WorkspaceError

if TYPE_CHECKING:
    from ..tasks import TaskRegistry

MAX_LINES = 2000
MAX_BYTES = 50 * 1024
LOG_LIMIT = 16 * 1024 * 1024
"""The most of a command's output kept in its log file: the first and the last half."""

_DESCRIPTION = """Run a shell command with bash in the workspace and return its output.

stdout and stderr are merged. The command runs in the workspace root unless `cwd` is \
given, with no standard input (interactive programs will not work). The default timeout \
is {timeout} seconds (`timeout` argument, in seconds); on timeout the command and all its \
child processes are killed. Only the last 2000 lines / 50 KB of output are shown; when \
more was produced, the full output is saved to a log file whose path is given (open it \
with the read tool). A non-zero exit code is reported as an error together with the \
output. Environment variables holding secrets are not available. Redirect the output of \
background commands to a file (`cmd > log 2>&1 &`). Prefer the read, grep, find and ls \
tools for looking at files."""

_SANDBOX_NOTE = """

Commands run in a sandbox: only the workspace and /tmp are writable (nothing is in plan \
mode), {protected} stay read-only, there is {network}, and background processes end \
with the command. A denied action fails like any other error, with a [sandbox: ...] note."""


_BACKGROUND_NOTE = """

`background: true` starts the command as a background task and returns its id at once \
(for servers and long builds); read its output with task_output, wait with task_wait, \
stop it with task_stop. It is not killed when this turn ends."""


def _parameters(max_timeout: float, background: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command to run."},
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": max_timeout,
                "description": "Timeout in seconds.",
            },
            "cwd": {
                "type": "string",
                "description": "Working directory inside the workspace (default: the workspace root).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    if background:
        params["properties"]["background"] = {
            "type": "boolean",
            "description": "Run as a background task and return its id at once.",
        }
        params["properties"]["description"] = {
            "type": "string",
            "description": "A short description of a background command (shown in task_list).",
        }
    return params


# --- environment ---------------------------------------------------------------------


def scrub_environment(
    env: Mapping[str, str],
    *,
    extra_names: Iterable[str] = (),
    extra_patterns: Iterable[str] = (),
) -> dict[str, str]:
    """A copy of ``env`` without variables that look like secrets.

    A name is dropped when it is a conventional secret name or in ``extra_names``
    (:func:`ketch.sandbox.is_secret_name`: ``*_KEY``, ``*_PAT``, ``*_TOKEN``, …), or when,
    upper-cased, it matches one of ``extra_patterns`` (``fnmatch``); a value holding a URL
    with a password is dropped too. Prefer :func:`ketch.sandbox.tool_environment`, which
    starts from an allow-list.
    """
    extra = tuple(extra_names)
    patterns = tuple(p.upper() for p in extra_patterns)
    return {
        key: value
        for key, value in env.items()
        if not is_secret_name(key, extra)
        and not any(fnmatch.fnmatchcase(key.upper(), p) for p in patterns)
        and not has_url_password(value)
    }


# --- read-only classification --------------------------------------------------------


class _Unsafe(Exception):
    pass


_PLAIN_READERS = frozenset(
    """
    ls cat head tail wc grep egrep fgrep pwd echo printf which whereis type file stat du df
    true false : test [ basename dirname realpath readlink nl cut tr diff cmp comm md5sum
    sha1sum sha256sum sha512sum cksum whoami id uname jq column seq cd pushd popd printenv
    tac rev fold expand unexpand od hexdump strings ps pgrep uptime free nproc locale getconf
    """.split()
)
_NO_ARGS_ONLY = frozenset({"env", "hostname"})
_FIND_UNSAFE = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
_GIT_READERS = frozenset(
    """
    status log diff show blame ls-files ls-tree rev-parse grep shortlog describe cat-file
    rev-list merge-base name-rev whatchanged show-ref count-objects
    """.split()
)
_GIT_BRANCH_FLAGS = frozenset(
    {"-a", "-r", "-v", "-vv", "--all", "--remotes", "--verbose", "--show-current", "--list", "-l", "--no-color"}
)
_SAFE_ASSIGNMENTS = re.compile(r"(LC_[A-Z]+|LANG|LANGUAGE|TZ|NO_COLOR|TERM|COLUMNS|LINES|CLICOLOR|FORCE_COLOR)=")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PREFIX_WORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
_CLOSING_WORDS = frozenset({"fi", "done", "}"})
_SAFE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_WORD_END = frozenset(" \t\n;&|()<>")


def _short_flags(args: list[str]) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))


def _git_ok(args: list[str]) -> bool:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--no-pager":
            i += 1
        elif args[i] == "-C" and i + 1 < len(args):
            i += 2
        else:
            return False
    if i >= len(args):
        return False
    sub, rest = args[i], args[i + 1 :]
    if any(a.startswith(("--output", "--ext-diff", "--open-files-in-pager")) for a in rest):
        return False
    if sub == "grep" and "O" in _short_flags(rest):
        return False
    if sub in _GIT_READERS:
        return True
    if sub == "branch":
        listing = "--list" in rest or "-l" in rest
        return all(a in _GIT_BRANCH_FLAGS or (listing and not a.startswith("-")) for a in rest)
    if sub in ("remote", "stash", "worktree"):
        return rest in ([], ["-v"], ["--verbose"]) if sub == "remote" else rest[:1] == ["list"]
    if sub == "tag":
        return rest == [] or rest[0] in ("-l", "--list")
    return False


def _program_ok(words: list[str]) -> bool:
    name, args = words[0], words[1:]
    if "/" in name:
        head, _, base = name.rpartition("/")
        if head not in ("/bin", "/usr/bin", "/usr/local/bin"):
            return False
        name = base
    if name in _PLAIN_READERS:
        if name == "file":
            return "C" not in _short_flags(args)
        return True
    if name in _NO_ARGS_ONLY:
        return not args
    if name == "date":
        return "s" not in _short_flags(args) and not any(a.startswith("--set") for a in args)
    if name == "sort":
        return "o" not in _short_flags(args) and not any(
            a.startswith(("--output", "--compress-program")) for a in args
        )
    if name == "uniq":
        return sum(1 for a in args if not a.startswith("-")) <= 1
    if name == "tree":
        return "o" not in _short_flags(args)
    if name == "find":
        return not any(a in _FIND_UNSAFE for a in args)
    if name == "rg":
        return not any(a.startswith("--pre") for a in args)
    if name == "command":
        return bool(args) and args[0] in ("-v", "-V")
    if name == "git":
        return _git_ok(args)
    return False


def _simple_command_ok(words: list[str]) -> bool:
    while words and words[0] in _PREFIX_WORDS:
        words = words[1:]
    if not words or (len(words) == 1 and words[0] in _CLOSING_WORDS):
        return True
    if words[0] == "for":
        return len(words) == 2 or (len(words) >= 3 and words[2] == "in")
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    if i == len(words):
        return True
    if any(not _SAFE_ASSIGNMENTS.match(w) for w in words[:i]):
        return False
    return _program_ok(words[i:])


class _Scanner:
    """Splits a command line into simple commands, rejecting anything that may write."""

    def __init__(self, text: str, depth: int) -> None:
        if depth > 8:
            raise _Unsafe
        self.s = text
        self.i = 0
        self.depth = depth
        self.commands: list[list[str]] = []
        self.words: list[str] = []
        self.word: list[str] | None = None

    def _end_word(self) -> None:
        if self.word is not None:
            self.words.append("".join(self.word))
            self.word = None

    def _end_command(self) -> None:
        self._end_word()
        if self.words:
            self.commands.append(self.words)
        self.words = []

    def _add(self, text: str) -> None:
        if self.word is None:
            self.word = []
        self.word.append(text)

    def _closing(self, start: int, quote: str, escapes: bool) -> int:
        j = start
        while j < len(self.s):
            if escapes and self.s[j] == "\\":
                j += 2
                continue
            if self.s[j] == quote:
                return j
            j += 1
        raise _Unsafe

    def _matching_paren(self, start: int) -> int:
        """Index of the ``)`` closing the ``(`` before ``start`` (quotes respected)."""
        end = matching_paren(self.s, start - 1)
        if end < 0:
            raise _Unsafe
        return end

    def _substitution(self, inner: str) -> None:
        if not _classify(inner, self.depth + 1):
            raise _Unsafe

    def _dollar(self) -> None:
        s, i = self.s, self.i
        nxt = s[i + 1 : i + 2]
        if s.startswith("$((", i):
            end = self._matching_paren(i + 2)
            body = s[i + 3 : end - 1]
            if "$(" in body or "`" in body:
                raise _Unsafe
            self._add(s[i : end + 1])
            self.i = end + 1
        elif nxt == "(":
            end = self._matching_paren(i + 2)
            self._substitution(s[i + 2 : end])
            self._add("$(...)")
            self.i = end + 1
        elif nxt == "{":
            end = self._closing(i + 2, "}", True)
            body = s[i + 2 : end]
            if "$(" in body or "`" in body:
                raise _Unsafe
            self._add(s[i : end + 1])
            self.i = end + 1
        elif nxt == "'":
            end = self._closing(i + 2, "'", True)
            self._add(s[i + 2 : end])
            self.i = end + 1
        else:
            self._add("$")
            self.i = i + 1

    def _backtick(self) -> None:
        end = self._closing(self.i + 1, "`", True)
        self._substitution(self.s[self.i + 1 : end].replace("\\`", "`"))
        self._add("`...`")
        self.i = end + 1

    def _double_quoted(self) -> None:
        s = self.s
        self.i += 1
        self._add("")
        while True:
            if self.i >= len(s):
                raise _Unsafe
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c in "\\$`":
                self._escape_or_expansion(c, quoted=True)
            else:
                self._add(c)
                self.i += 1

    def _escape_or_expansion(self, c: str, *, quoted: bool) -> None:
        """At a backslash, ``$`` or backtick ``c``: take it in (outside quotes a
        backslash-newline joins the lines)."""
        if c == "$":
            self._dollar()
        elif c == "`":
            self._backtick()
        else:
            escaped = self.s[self.i + 1 : self.i + 2]
            if quoted or escaped != "\n":
                self._add(escaped)
            self.i += 2

    def _target(self) -> str:
        s = self.s
        while self.i < len(s) and s[self.i] in " \t":
            self.i += 1
        start = self.i
        while self.i < len(s) and s[self.i] not in _WORD_END:
            if s[self.i] in "'\"$`\\":
                raise _Unsafe
            self.i += 1
        return s[start : self.i]

    def _redirect(self) -> None:
        s, i = self.s, self.i
        if self.word is not None and "".join(self.word).isdigit():
            self.word = None
        op = s[i]
        nxt = s[i + 1 : i + 2]
        if op == "<":
            if nxt == "<":
                if s.startswith("<<<", i):
                    self.i = i + 3
                    return
                raise _Unsafe
            if nxt == "(":
                end = self._matching_paren(i + 2)
                self._substitution(s[i + 2 : end])
                self.i = end + 1
                return
            if nxt == ">":
                raise _Unsafe
            self.i = i + (2 if nxt == "&" else 1)
            self._end_word()
            self._target()
            return
        if nxt == "(":
            raise _Unsafe
        if nxt == "&":
            self.i = i + 2
            target = self._target()
            if not (target.isdigit() or target == "-" or target in _SAFE_TARGETS):
                raise _Unsafe
            return
        self.i = i + (2 if nxt in (">", "|") else 1)
        if self._target() not in _SAFE_TARGETS:
            raise _Unsafe

    def run(self) -> list[list[str]]:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self._end_word()
                self.i += 1
            elif c in "\n;()":
                self._end_command()
                self.i += 1
            elif c == "&":
                nxt = s[self.i + 1 : self.i + 2]
                if nxt == "&":
                    self._end_command()
                    self.i += 2
                elif nxt == ">":
                    self._end_word()
                    self.i += 1 if s[self.i + 2 : self.i + 3] != ">" else 2
                    self.i += 1
                    if self._target() not in _SAFE_TARGETS:
                        raise _Unsafe
                else:
                    raise _Unsafe
            elif c == "|":
                self._end_command()
                self.i += 2 if s[self.i + 1 : self.i + 2] in ("|", "&") else 1
            elif c in "<>":
                self._redirect()
            elif c == "'":
                end = self._closing(self.i + 1, "'", False)
                self._add(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self._double_quoted()
            elif c in "\\$`":
                self._escape_or_expansion(c, quoted=False)
            elif c == "#" and self.word is None:
                end = s.find("\n", self.i)
                self.i = len(s) if end == -1 else end
            else:
                self._add(c)
                self.i += 1
        self._end_command()
        return self.commands


def _classify(command: str, depth: int) -> bool:
    commands = _Scanner(command, depth).run()
    return bool(commands) and all(_simple_command_ok(words) for words in commands)


def is_read_only_command(command: str) -> bool:
    """Whether ``command`` can only read: a conservative check used to schedule ``bash`` calls.

    True only when every simple command in it (split at ``;``, ``&&``, ``||``, ``|``,
    newlines and parentheses, including those inside ``$(...)``, backticks and ``<(...)``)
    runs a known read-only program (``ls``, ``cat``, ``head``, ``grep``, ``rg``, ``find``
    without ``-exec``/``-delete``, ``git status``/``log``/``diff``/``show``, ``pwd``,
    ``echo``, ``stat``, ``du``, ``tree``, ...) with no option that writes, and output is
    redirected only to ``/dev/null`` or another descriptor. Anything else (``>`` to a
    file, ``tee``, heredocs, background ``&``, unknown programs, variables or globs as the
    program name, unbalanced quotes) is not read-only.
    """
    try:
        return _classify(command, 0)
    except (_Unsafe, IndexError):
        return False


# --- process handling ----------------------------------------------------------------


async def _wait_group_gone(pgid: int, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _terminate_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, then reap the shell."""
    pgid = proc.pid
    signal_group(pgid, signal.SIGTERM)
    try:
        if not await _wait_group_gone(pgid, grace):
            signal_group(pgid, signal.SIGKILL)
            await _wait_group_gone(pgid, 5.0)
        await proc.wait()
    except asyncio.CancelledError:
        signal_group(pgid, signal.SIGKILL)
        raise


class _Output(asyncio.Protocol):
    """Receives the output pipe: a bounded tail in memory, everything in a log file if large."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._head: list[bytes] | None = []
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self.tail = bytearray()
        self.total_bytes = 0
        self.total_newlines = 0
        self.ends_with_newline = False
        self.file: IO[bytes] | None = None
        self.log_path: Path | None = None
        self.logged = 0  # bytes written to the log's first half
        self.log_tail: bytearray | None = None  # the last half, once the first is full
        self.cut = 0  # bytes of output the log leaves out
        self.streamed = 0  # bytes of output reported as it came (at most LOG_LIMIT)
        self.new_data = asyncio.Event()
        self.closed = asyncio.get_running_loop().create_future()

    @property
    def truncated(self) -> bool:
        """Whether the output exceeds what the result can show."""
        return self.total_bytes > MAX_BYTES or self.lines > MAX_LINES

    @property
    def lines(self) -> int:
        """Number of lines so far (a last line without a newline counts)."""
        return self.total_newlines + (1 if self.total_bytes and not self.ends_with_newline else 0)

    def data_received(self, data: bytes) -> None:
        """Take a chunk of output."""
        self.total_bytes += len(data)
        self.total_newlines += data.count(b"\n")
        self.ends_with_newline = data.endswith(b"\n")
        self.tail += data
        if len(self.tail) > 2 * (MAX_BYTES + 1):
            del self.tail[: len(self.tail) - (MAX_BYTES + 1)]
        if self._head is not None:
            self._head.append(data)
            if self.truncated:
                self._spill()
        elif self.file is not None:
            self._log(data)
        if self.streamed >= LOG_LIMIT:
            return  # streamed enough: the rest is in the result and the log
        data = data[: LOG_LIMIT - self.streamed]
        self.streamed += len(data)
        text = self._decoder.decode(data)
        if text:
            self._pending.append(text)
        if self.streamed >= LOG_LIMIT:
            self._pending.append(f"\n[output no longer streamed after {_size(LOG_LIMIT)}; the end is in the result]\n")
        if self._pending:
            self.new_data.set()

    def connection_lost(self, exc: Exception | None) -> None:
        """The pipe closed: every writer is gone."""
        if not self.closed.done():
            self.closed.set_result(None)

    def _spill(self) -> None:
        head, self._head = self._head, None
        try:
            fd, name = tempfile.mkstemp(prefix="bash-", suffix=".log", dir=self._workspace.scratch_dir())
        except OSError:
            return
        self.file = os.fdopen(fd, "wb")
        self.log_path = Path(name)
        for chunk in head or ():
            self._log(chunk)

    def _log(self, data: bytes) -> None:
        """Keep ``data`` in the log: in its first half while there is room, else in the
        last half (written when the log is closed), dropping what falls out of it."""
        half = LOG_LIMIT // 2
        if self.logged < half:
            room = data[: half - self.logged]
            data = data[len(room) :]
            self.logged += len(room)
            if self.file is not None:
                try:
                    self.file.write(room)
                except OSError:
                    self.close_log()
        if data:
            if self.log_tail is None:
                self.log_tail = bytearray()
            self.log_tail += data
            if len(self.log_tail) > 2 * half:
                drop = len(self.log_tail) - half
                del self.log_tail[:drop]
                self.cut += drop

    def cut_line(self) -> str:
        """The note saying that the log left part of the output out."""
        half = LOG_LIMIT // 2
        return (
            f"[output cut: the command wrote {_size(self.total_bytes)}; its log keeps the first and the last "
            f"{_size(half)} (log limit {_size(LOG_LIMIT)})]"
        )

    def remove_log(self) -> None:
        """Close the log file and delete it."""
        self.close_log()
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
            self.log_path = None

    def take_pending(self, final: bool = False) -> str:
        """Text decoded since the last call."""
        if final and self.streamed < LOG_LIMIT:
            rest = self._decoder.decode(b"", final=True)
            if rest:
                self._pending.append(rest)
        text = "".join(self._pending)
        self._pending.clear()
        self.new_data.clear()
        return text

    def close_log(self) -> None:
        """Close the log file, if any, writing the last half of a long output first."""
        if self.file is not None:
            tail, self.log_tail = self.log_tail, None
            half = LOG_LIMIT // 2
            try:
                if tail is not None:
                    if len(tail) > half:
                        self.cut += len(tail) - half
                        del tail[: len(tail) - half]
                    if self.cut:
                        self.file.write(f"\n[... {self.cut} bytes of output cut here ...]\n".encode())
                    self.file.write(tail)
                self.file.close()
            except OSError:
                with contextlib.suppress(OSError):
                    self.file.close()
            self.file = None

    def render(self) -> tuple[str, str]:
        """The output to show and a truncation note (empty when nothing was cut)."""
        if not self.truncated:
            return bytes(self.tail).decode("utf-8", errors="replace"), ""
        data = bytes(self.tail[-(MAX_BYTES + 1) :])
        whole_line = True
        if len(data) > MAX_BYTES:
            newline = data.find(b"\n", 0, len(data) - 1)
            if newline == -1:
                data = data[-MAX_BYTES:]
                whole_line = False
            else:
                data = data[newline + 1 :]
        while data and (data[0] & 0xC0) == 0x80:
            data = data[1:]
        text = data.decode("utf-8", errors="replace")
        lines = text.removesuffix("\n").split("\n")
        if len(lines) > MAX_LINES:
            lines = lines[-MAX_LINES:]
        total = self.lines
        if whole_line:
            note = f"[Output truncated: showing lines {total - len(lines) + 1}-{total} of {total}."
        else:
            note = f"[Output truncated: showing the last {MAX_BYTES // 1024} KB of line {total} of {total}."
        if self.log_path is not None and self.cut:
            note += f" The start and the end of the output are saved to {self.log_path}]"
        elif self.log_path is not None:
            note += f" Full output saved to {self.log_path}]"
        else:
            note += "]"
        return "\n".join(lines), note


# --- the tool ------------------------------------------------------------------------


def _sequential(args: dict[str, Any]) -> bool:
    command = args.get("command")
    return not (isinstance(command, str) and is_read_only_command(command))


class BashTool(Tool):
    """The ``bash`` tool. Sequential unless the command is read-only (see the module docstring).

    ``timeout`` is the default per-call timeout in seconds and ``max_timeout`` the
    largest a call may ask for. The environment (``env`` attribute) is the allow-list
    environment of :func:`ketch.sandbox.tool_environment` (``env_allow`` adds names,
    ``secret_names`` names never passed, such as providers' ``api_key_env``) when
    ``inherit_env`` and ``scrub_env`` are set, the whole process environment with
    ``scrub_env=False``, nothing with ``inherit_env=False``; ``env`` then adds or
    overrides variables. ``kill_grace`` is the time between SIGTERM and SIGKILL,
    ``drain_timeout`` how long output is still read after the shell exits, and
    ``report_interval`` the minimum time between progress reports.

    ``sandbox`` runs every command inside it (when its ``unavailable_reason()`` is None);
    ``write_allowed()`` is asked at each call whether the workspace is writable (False:
    plan mode, everything read-only); ``network``, ``protected`` (workspace-relative
    paths kept read-only), ``env_allow``, ``hidden`` (absolute paths commands cannot
    read, such as the files that hold keys) and ``limits`` (each command's processes,
    memory, CPU time and file size; None: the defaults) go into the :class:`SandboxPolicy`, and the
    workspace's other roots are writable too. ``sandboxed`` tells whether commands run
    sandboxed; when not, ``sandbox_warning`` says why (from the sandbox, or
    ``unsandboxed_reason`` when the caller found none).
    """

    __slots__ = (
        "default_timeout",
        "drain_timeout",
        "env",
        "env_allow",
        "hidden",
        "kill_grace",
        "limits",
        "max_timeout",
        "network",
        "protected",
        "report_interval",
        "sandbox",
        "sandbox_warning",
        "shell",
        "tasks",
        "workspace",
        "write_allowed",
    )

    def __init__(
        self,
        workspace: Workspace,
        *,
        timeout: float = 120.0,
        max_timeout: float = 3600.0,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        scrub_env: bool = True,
        secret_names: Iterable[str] = (),
        shell: str | None = None,
        kill_grace: float = 2.0,
        drain_timeout: float = 0.5,
        report_interval: float = 0.1,
        sandbox: Sandbox | None = None,
        write_allowed: Callable[[], bool] | None = None,
        network: bool | NetworkPolicy = False,
        protected: Iterable[str] = DEFAULT_PROTECTED,
        env_allow: Iterable[str] = (),
        unsandboxed_reason: str | None = None,
        tasks: TaskRegistry | None = None,
        hidden: Iterable[str | os.PathLike[str]] = (),
        limits: SandboxLimits | None = None,
    ) -> None:
        reason = sandbox.unavailable_reason() if sandbox is not None else unsandboxed_reason
        usable = sandbox if sandbox is not None and reason is None else None
        self.protected = tuple(protected)
        # relative to the workspace, ~ from the home folder (a relative path means nothing
        # to the sandbox)
        self.hidden = tuple(Path(p) for p in absolute_patterns(hidden, workspace.root))
        description = _DESCRIPTION.format(timeout=f"{timeout:g}")
        if usable is not None:
            description += _SANDBOX_NOTE.format(
                protected=protected_names(self.protected),
                network=(
                    "network access only to the hosts the user allowed, through a proxy (HTTP_PROXY is set)"
                    if isinstance(network, NetworkPolicy)
                    else "network access" if network else "no network access"
                ),
            )
        if tasks is not None:
            description += _BACKGROUND_NOTE
        super().__init__(
            "bash",
            description,
            _parameters(max_timeout, background=tasks is not None),
            label="Bash",
            sequential=_sequential,
        )
        self.workspace = workspace
        self.tasks = tasks
        self.default_timeout = timeout
        self.max_timeout = max_timeout
        self.env_allow = tuple(env_allow)
        base: dict[str, str] = {}
        if inherit_env and scrub_env:
            base = tool_environment(allow=self.env_allow, secret_names=secret_names)
        elif inherit_env:
            base = dict(os.environ)
        if env:
            base.update(env)
        self.env = base
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        self.kill_grace = kill_grace
        self.drain_timeout = drain_timeout
        self.report_interval = report_interval
        self.write_allowed: Callable[[], bool] = write_allowed or _always
        self.network = network
        self.limits = limits
        self.sandbox: Sandbox | None = usable
        self.sandbox_warning: str | None = (
            f"bash commands run without a sandbox ({reason}); every bash command needs approval"
            if reason is not None
            else None
        )

    def enable_background(self, tasks: TaskRegistry) -> None:
        """Take ``background: true`` from now on, registering in ``tasks`` (as if given
        to the constructor)."""
        if self.tasks is None:
            self.description += _BACKGROUND_NOTE
        self.tasks = tasks
        self.parameters = _parameters(self.max_timeout, background=True)

    @property
    def sandboxed(self) -> bool:
        """Whether commands run inside an active sandbox."""
        return self.sandbox is not None

    def policy(self) -> SandboxPolicy:
        """The sandbox policy of a call made now (``write`` from ``write_allowed()``)."""
        ws = self.workspace
        return SandboxPolicy(
            workspace=ws.root,
            write=bool(self.write_allowed()),
            network=self.network,
            protected=self.protected,
            extra_writable=tuple(r for r in ws.roots if r != ws.root),
            env_allow=self.env_allow,
            hidden=self.hidden,
            limits=self.limits,
        )

    def __repr__(self) -> str:
        return f"BashTool(root={str(self.workspace.root)!r})"

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Run ``args["command"]``; see the module docstring for the result."""
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolResult.error("command is empty. Give a shell command to run.")
        timeout = args.get("timeout", self.default_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            return ToolResult.error(f"timeout must be a positive number of seconds, got {timeout!r}.")
        timeout = min(float(timeout), self.max_timeout)
        ws = self.workspace
        try:
            cwd = ws.resolve(args["cwd"]) if args.get("cwd") is not None else ws.root
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        if not cwd.is_dir():
            what = "does not exist" if not cwd.exists() else "is not a directory"
            return ToolResult.error(f"Working directory {ws.display(cwd)} {what}.")
        if ctx.signal.aborted:
            return ToolResult.error("Command not started: the run was aborted.")
        background = args.get("background", False)
        if background is not False:
            if background is not True:
                return ToolResult.error(f"background must be true or false, got {background!r}.")
            if self.tasks is None:
                return ToolResult.error("background commands need a task registry (BashTool(tasks=...)).")
            timeout = timeout if "timeout" in args else self.max_timeout
            return self._start_background(command, cwd, timeout, args.get("description"))
        return await self._run(command, cwd, timeout, ctx)

    async def _run(
        self, command: str, cwd: Path, limit: float, ctx: ToolContext[Any], on_start: Callable[[int], None] | None = None
    ) -> ToolResult:
        argv, env = [self.shell, "-c", command], self.env
        policy = None
        if self.sandbox is not None:
            policy = self.policy()
            argv, env = self.sandbox.wrap(argv, policy, env)
        try:
            return await self._run_command(command, argv, env, cwd, limit, policy, ctx, on_start)
        finally:
            if self.sandbox is not None:
                self.sandbox.release(argv)

    def _start_background(self, command: str, cwd: Path, limit: float, description: Any) -> ToolResult:
        """Start ``command`` as a task of the registry; the result names its id."""
        registry = self.tasks
        assert registry is not None
        stop = AbortSignal()
        task_id = ""

        async def work(write: Callable[[str], None]) -> int:
            async def report(chunk: Any) -> None:
                if isinstance(chunk, str):
                    write(chunk)

            ctx: ToolContext[Any] = ToolContext(call_id=task_id, tool_name="bash", signal=stop, report=report)
            result = await self._run(command, cwd, limit, ctx, lambda pid: registry.set_pgid(task_id, pid))
            details = result.details if isinstance(result.details, dict) else {}
            code = details.get("exit_code")
            if code is None:  # it did not start
                from ..tasks import TaskFailed

                raise TaskFailed(result.text)
            return int(code)

        label = description if isinstance(description, str) and description.strip() else command
        info = registry.start(work, kind="shell", description=label, prefix="bash", stop=stop.abort)
        task_id = info.id
        return ToolResult(
            content=f"Started background task {info.id}: {label}\n"
            f"Read its output with task_output(task_id={info.id!r}); stop it with task_stop.",
            details={"task_id": info.id, "command": command, "cwd": str(cwd)},
        )

    async def _run_command(
        self,
        command: str,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        limit: float,
        policy: SandboxPolicy | None,
        ctx: ToolContext[Any],
        on_start: Callable[[int], None] | None = None,
    ) -> ToolResult:
        ws, timeout = self.workspace, limit
        box = self.sandbox if policy is not None else None
        options = getattr(box, "spawn_options", None)
        extra: dict[str, Any] = options(argv) if options is not None else {}
        read_fd, write_fd = os.pipe()
        try:
            proc = await spawn_group(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=write_fd, stderr=write_fd, cwd=cwd, env=env, **extra
            )
        except OSError as exc:
            os.close(read_fd)
            return ToolResult.error(f"Could not start {argv[0]}: {exc.strerror or exc}.")
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        if on_start is not None:
            on_start(proc.pid)
        output = _Output(ws)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(lambda: output, os.fdopen(read_fd, "rb", buffering=0))
        reporter = asyncio.ensure_future(self._report(output, ctx))
        timed_out = aborted = stray = finished = False
        refused: str | None = None
        started = getattr(box, "started", None)
        try:
            try:
                async with asyncio.timeout(timeout), ctx.signal.scope():
                    if started is not None:
                        refused = await started(argv, proc.pid)
                    await proc.wait()
                    stray = not await _wait_closed(output, self.drain_timeout)
                finished = True
            except TimeoutError:
                timed_out = True
            except Aborted:
                aborted = True
            finally:
                if not finished:
                    await _terminate_group(proc, self.kill_grace)
            if not finished:
                await _wait_closed(output, self.drain_timeout)
        finally:
            untrack_process_group(proc.pid, unless_alive=True)
            transport.close()
            output.close_log()
            reporter.cancel()
            await asyncio.wait({reporter})
            report_error = None if reporter.cancelled() else reporter.exception()
        if report_error is not None:
            raise report_error
        rest = output.take_pending(final=True)
        if rest:
            await ctx.report(rest)
        if refused is not None:
            output.remove_log()
            return ToolResult.error(f"Command not run: {refused}.")
        notes = getattr(box, "notes", None)
        bounds: list[str] = []
        if notes is not None:
            bounds = notes(argv, bytes(output.tail[-(MAX_BYTES + 1) :]).decode("utf-8", "replace"), proc.returncode)
        return self._result(command, cwd, proc.returncode, output, timeout, timed_out, aborted, stray, policy, bounds)

    async def _report(self, output: _Output, ctx: ToolContext[Any]) -> None:
        while True:
            await output.new_data.wait()
            chunk = output.take_pending()
            if chunk:
                await ctx.report(chunk)
            await asyncio.sleep(self.report_interval)

    def _result(
        self,
        command: str,
        cwd: Path,
        code: int | None,
        output: _Output,
        timeout: float,
        timed_out: bool,
        aborted: bool,
        stray: bool,
        policy: SandboxPolicy | None = None,
        notes: list[str] | None = None,
    ) -> ToolResult:
        shown, note = output.render()
        shown = shown.removesuffix("\n")
        parts = [shown if shown else "(no output)"]
        if note:
            parts.append(note)
        if output.cut:
            parts.append(output.cut_line())
        if stray:
            parts.append(
                "[Background processes still held the output open when the shell exited; their "
                "later output is lost. Redirect background output to a file: cmd > log 2>&1 &]"
            )
        is_error = True
        if timed_out:
            unit = "second" if timeout == 1 else "seconds"
            parts.append(f"[Command timed out after {timeout:g} {unit} and was killed with all its processes.]")
        elif aborted:
            parts.append("[Command aborted; it was killed with all its processes.]")
        elif code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            parts.append(f"[Command was killed by {name}.]")
        elif code:
            parts.append(f"[Command exited with code {code}.]")
            hint = denial_hint(shown, policy) if policy is not None else None
            if hint is not None:
                parts.append(hint)
        else:
            is_error = False
        parts.extend(notes or ())
        details = {
            "command": command,
            "cwd": str(cwd),
            "exit_code": code,
            "timed_out": timed_out,
            "aborted": aborted,
            "truncated": bool(note),
            "total_lines": output.lines,
            "total_bytes": output.total_bytes,
            "output_file": str(output.log_path) if output.log_path is not None else None,
        }
        return ToolResult(content="\n\n".join(parts), details=details, is_error=is_error)


def _always() -> bool:
    return True


async def _wait_closed(output: _Output, limit: float) -> bool:
    """Wait up to ``limit`` seconds for the output pipe to close; True if it did."""
    if output.closed.done():
        return True
    done, _ = await asyncio.wait({output.closed}, timeout=limit)
    return bool(done)


def _size(count: int) -> str:
    """``count`` bytes as ``16 MiB``, ``192.7 MiB``, ``3 KiB`` or ``12 bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            number = count / size
            return f"{number:.0f} {unit}" if number == int(number) else f"{number:.1f} {unit}"
    return f"{count} bytes"
