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

Trust: the project's files are read in any project (they only tell the model things;
they cannot widen what ketch may do), but until the project is trusted their imports
are confined to the project root: an import resolving outside it (``@~/.ssh/id_rsa``,
``@../../etc/passwd``, a symlink leading out) is skipped and reported, so an untrusted
repository cannot put the user's files into the requests sent to a provider. The
user's files, and a trusted project's, may import any file. Files larger than
:data:`MAX_FILE_BYTES` are cut there (reported).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Literal

from ..llm import SystemBlock
from ..llm import SystemPrompt
from ._config import config_dir
from ._config import project_root

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
"""The file names read in each directory: the first that exists."""
MAX_IMPORT_DEPTH = 5
"""How many levels of ``@path`` imports are followed."""
MAX_FILE_BYTES = 64 * 1024
"""Longest instruction file read; a longer one is cut there."""

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


class _Loader:
    def __init__(self, root: Path, trusted: bool, home: Path, result: Instructions) -> None:
        self.root = root
        self.trusted = trusted
        self.home = home
        self.result = result
        self.seen: set[Path] = set()

    def label(self, path: Path, origin: str) -> str:
        if origin != "user" and _within(path, self.root):
            return str(path.relative_to(self.root))
        if _within(path, self.home):
            return "~/" + str(path.relative_to(self.home))
        return str(path)

    def read(self, path: Path) -> str | None:
        try:
            with path.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            self.result.notes.append(f"cannot read {path}: {exc.strerror or exc}")
            return None
        if len(data) > MAX_FILE_BYTES:
            self.result.notes.append(f"{path} is longer than {MAX_FILE_BYTES} bytes; the rest was left out")
            data = data[:MAX_FILE_BYTES]
        return data.decode("utf-8", errors="replace")

    def add(self, path: Path, origin: Literal["user", "project", "import"], confined: bool, chain: tuple[Path, ...]) -> None:
        resolved = path.resolve()
        if resolved in self.seen:
            if resolved in chain:
                self.result.notes.append(f"import cycle: {path} imports itself (through {' -> '.join(map(str, chain))})")
            return
        text = self.read(resolved)
        if text is None:
            return
        self.seen.add(resolved)
        self.result.files.append(InstructionFile(resolved, self.label(resolved, origin), origin, text))
        depth = len(chain)
        for target in _imports(text):
            candidate = self.home / target[2:] if target.startswith("~/") else resolved.parent / target
            if not candidate.is_file():
                continue  # a mention, or a file that is not there
            real = candidate.resolve()
            if confined and not _within(real, self.root):
                self.result.notes.append(
                    f"{resolved}: import @{target} skipped: it is outside the project, which is not trusted "
                    "(trust it with --trust-project)"
                )
                continue
            if depth >= MAX_IMPORT_DEPTH:
                self.result.notes.append(f"{resolved}: import @{target} skipped: imports nest deeper than {MAX_IMPORT_DEPTH}")
                continue
            self.add(real, "import", confined, (*chain, resolved))


def _in_directory(directory: Path) -> Path | None:
    for name in INSTRUCTION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def load_instructions(cwd: Path, *, trusted: bool, environ: Mapping[str, str] | None = None) -> Instructions:
    """The instruction files for a run in ``cwd`` (see the module documentation);
    ``trusted``: whether the project is trusted. Never raises for unreadable files
    (they are reported in ``notes``)."""
    current = cwd.resolve()
    root = project_root(current)
    result = Instructions()
    loader = _Loader(root, trusted, _home(environ).resolve(), result)
    user = _in_directory(config_dir(environ))
    if user is not None:
        loader.add(user, "user", False, ())
    chain = [current]
    while chain[-1] != root and chain[-1] != chain[-1].parent:
        chain.append(chain[-1].parent)
    for directory in reversed(chain):
        found = _in_directory(directory)
        if found is not None:
            loader.add(found, "project", not trusted, ())
    return result
