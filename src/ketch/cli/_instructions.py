"""Project instructions for the ``ketch`` command: ``AGENTS.md`` files merged into the
system prompt.

Where, in this order (the order of the system prompt, so it is the same from run to
run and a provider's prompt cache keeps hitting): the user's, in the user config
directory (``~/.config/ketch/AGENTS.md``); then the project's, in the project root and
in each directory down to the working directory (outermost first: later files are more
specific). In each directory ``AGENTS.md`` is read, or ``CLAUDE.md`` when there is no
``AGENTS.md``.

Imports: ``@path`` in a file's text (outside code spans and fenced code) adds the file
at ``path`` (relative to the importing file's directory; ``~/`` is the home directory)
right after the importing file, recursively up to :data:`MAX_IMPORT_DEPTH` levels. A
file already included is not included again (an import cycle is reported, then
skipped). A path that does not exist is left alone (``@alice`` is a mention, not an
import).

Reads: an instruction file and each import is a read ketch makes for the provider, so
it obeys what the agent's own reads obey. A project's files and their imports must
resolve inside the project root (no symlink leading out, ``@~/.ssh/id_rsa`` and
``@../../etc/passwd`` are skipped), trusted or not: a repository cannot put the user's
files into the requests sent to a provider. The user's files (in the user config
directory) may import files anywhere. Neither may read ``/proc``, ``/sys`` or ``/dev``
(``/proc/self/environ`` holds ketch's keys), anything but a regular file (a FIFO, a
device), a file a ``Read`` deny rule names, or a config file holding a literal
``api_key``. Files are opened without following a final symlink and without blocking,
and checked after opening (where they really are, and what they are); each is cut at
:data:`MAX_FILE_BYTES` and all together at :data:`MAX_TOTAL_BYTES` (reported). What is
skipped is reported in ``notes`` (``/memory`` shows them).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Literal

from .._paths import glob_escape
from .._paths import names_path
from ..llm import SystemBlock
from ..llm import SystemPrompt
from ..loop import Capability
from ._config import project_root
from ._dirs import config_dir

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
"""The file names read in each directory: the first that exists."""
MAX_IMPORT_DEPTH = 5
"""How many levels of ``@path`` imports are followed."""
MAX_FILE_BYTES = 64 * 1024
"""Longest instruction file read; a longer one is cut there."""
MAX_TOTAL_BYTES = 256 * 1024
"""Most bytes read from all instruction files together; the rest is left out."""

HEADER = (
    "# Project instructions\n\n"
    "Instructions from AGENTS.md files: the user's, then the project's from its root down to the "
    "working directory (later ones are more specific). Follow them."
)

_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_IMPORT = re.compile(r"(?<![\w@`])@((?:~/|\.{1,2}/|/)?[\w.\-/]+[\w\-/])")


@dataclass(frozen=True, slots=True)
class InstructionFile:
    """One file merged into the system prompt: where it is, how it is shown, where it
    came from (``user``, ``project`` or ``import``) and its text."""

    path: Path
    label: str
    origin: Literal["user", "project", "import"]
    text: str


@dataclass(slots=True)
class Instructions:
    """The instruction files found, in system-prompt order, and ``notes`` about what
    was skipped or cut."""

    files: list[InstructionFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The system prompt block (empty when there are no files)."""
        if not self.files:
            return ""
        parts = [HEADER]
        for f in self.files:
            parts.append(f"## {f.label}\n\n{f.text.strip()}")
        return "\n\n".join(parts)

    def capability(self) -> Capability | None:
        """The instructions as a capability: their block follows the agent's system prompt
        in every request (None when there are no files)."""
        if not self.files:
            return None
        return Capability.of("project instructions", instructions=self.text)

    def system_prompt(self, base: str) -> str:
        """``base`` followed by the instructions, as a :class:`~ketch.llm.SystemPrompt`
        of two blocks (``base`` alone when there are none)."""
        if not self.files:
            return base
        return SystemPrompt([SystemBlock(base), SystemBlock(self.text)])

    def describe(self) -> list[str]:
        """Lines for ``/memory``: each file with its size, then the notes."""
        if not self.files:
            lines = ["no instruction files (AGENTS.md or CLAUDE.md in the user config directory, the project root "
                     "or a directory down to the working directory)"]
        else:
            lines = [f"{f.label} ({f.origin}, {len(f.text.encode())} bytes) {f.path}" for f in self.files]
        lines.extend(f"note: {n}" for n in self.notes)
        return lines


def _home(environ: Mapping[str, str] | None) -> Path:
    home = (environ or {}).get("HOME")
    return Path(home) if home else Path.home()


def _imports(text: str) -> list[str]:
    """The ``@path`` imports of ``text``, in order, outside code."""
    found: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.extend(m.group(1) for m in _IMPORT.finditer(_CODE_SPAN.sub("", line)))
    return found


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


_KERNEL = (Path("/proc"), Path("/sys"), Path("/dev"))
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def _opened_path(fd: int) -> Path | None:
    """Where the open file ``fd`` really is (Linux: ``/proc/self/fd``), None when unknown."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


class _Loader:
    def __init__(self, root: Path, home: Path, result: Instructions, user_dir: Path, hidden: Sequence[str]) -> None:
        self.root = root
        self.home = home
        self.result = result
        self.user_dir = user_dir
        # a pattern for the user config directory itself hides it from the tools; the
        # user's own instruction files live there
        own = glob_escape(str(user_dir))
        self.hidden = tuple(hidden)
        self.hidden_for_user = tuple(p for p in self.hidden if p.removesuffix("/**") != own)
        self.seen: set[Path] = set()
        self.total = 0

    def label(self, path: Path, origin: str) -> str:
        if origin != "user" and _within(path, self.root):
            return str(path.relative_to(self.root))
        if _within(path, self.home):
            return "~/" + str(path.relative_to(self.home))
        return str(path)

    def refusal(self, real: Path, confined: bool) -> str | None:
        """Why the resolved ``real`` may not be read (None when it may)."""
        if any(_within(real, k) for k in _KERNEL):
            return "it is a kernel file (/proc, /sys, /dev), never read"
        if confined and not _within(real, self.root):
            return "it is outside the project (a project's instructions may import only its own files)"
        for pattern in self.hidden if confined else self.hidden_for_user:
            if names_path(pattern, str(real)):
                return "a Read deny rule names it (or it may hold a key)"
        return None

    def read(self, real: Path, confined: bool) -> str | None:
        why = self.refusal(real, confined)
        if why is not None:
            self.result.notes.append(f"{real} skipped: {why}")
            return None
        try:
            fd = os.open(real, _FLAGS)
        except OSError as exc:
            why = "it is a symlink" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
            self.result.notes.append(f"cannot read {real}: {why}")
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.result.notes.append(f"{real} skipped: not a regular file")
                return None
            opened = _opened_path(fd)
            if opened is not None and opened != real:  # a folder on the way was swapped for a link
                self.result.notes.append(f"{real} skipped: it moved while being opened")
                return None
            room = min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - self.total)
            if room <= 0:
                self.result.notes.append(f"{real} skipped: the instructions are longer than {MAX_TOTAL_BYTES} bytes")
                return None
            data = b""
            while len(data) <= room:
                chunk = os.read(fd, room + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            self.result.notes.append(f"cannot read {real}: {exc.strerror or exc}")
            return None
        finally:
            os.close(fd)
        if len(data) > room:
            if room < MAX_FILE_BYTES:
                self.result.notes.append(
                    f"{real} was cut: the instructions may hold {MAX_TOTAL_BYTES} bytes together; the rest was left out"
                )
            else:
                self.result.notes.append(f"{real} is longer than {MAX_FILE_BYTES} bytes; the rest was left out")
            data = data[:room]
        self.total += len(data)
        return data.decode("utf-8", errors="replace")

    def add(self, path: Path, origin: Literal["user", "project", "import"], confined: bool, chain: tuple[Path, ...]) -> None:
        resolved = path.resolve()
        if resolved in self.seen:
            if resolved in chain:
                self.result.notes.append(f"import cycle: {path} imports itself (through {' -> '.join(map(str, chain))})")
            return
        text = self.read(resolved, confined)
        if text is None:
            return
        self.seen.add(resolved)
        self.result.files.append(InstructionFile(resolved, self.label(resolved, origin), origin, text))
        depth = len(chain)
        for target in _imports(text):
            candidate = self.home / target[2:] if target.startswith("~/") else resolved.parent / target
            if not os.path.lexists(candidate):
                continue  # a mention, or a file that is not there
            real = candidate.resolve()
            if confined and not _within(real, self.root):
                self.result.notes.append(
                    f"{resolved}: import @{target} skipped: it is outside the project "
                    "(a project's instructions may import only its own files)"
                )
                continue
            if depth >= MAX_IMPORT_DEPTH:
                self.result.notes.append(f"{resolved}: import @{target} skipped: imports nest deeper than {MAX_IMPORT_DEPTH}")
                continue
            self.add(real, "import", confined, (*chain, resolved))


def _in_directory(directory: Path) -> Path | None:
    for name in INSTRUCTION_FILES:
        candidate = directory / name
        if os.path.lexists(candidate) and not candidate.is_dir():
            return candidate
    return None


def load_instructions(
    cwd: Path, *, environ: Mapping[str, str] | None = None, hidden: Sequence[str] = ()
) -> Instructions:
    """The instruction files for a run in ``cwd`` (see the module documentation);
    ``hidden``: the absolute path patterns of the ``Read`` deny rules (those of the
    files that may hold keys too), whose files are not read. Never raises for
    unreadable files (they are reported in ``notes``)."""
    current = cwd.resolve()
    root = project_root(current)
    result = Instructions()
    user_dir = config_dir(environ)
    loader = _Loader(root, _home(environ).resolve(), result, Path(os.path.realpath(user_dir)), hidden)
    user = _in_directory(user_dir)
    if user is not None:
        loader.add(user, "user", False, ())
    chain = [current]
    while chain[-1] != root and chain[-1] != chain[-1].parent:
        chain.append(chain[-1].parent)
    for directory in reversed(chain):
        found = _in_directory(directory)
        if found is not None:
            loader.add(found, "project", True, ())
    return result
