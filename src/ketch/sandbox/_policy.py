"""The sandbox interface: a policy and the protocol every sandbox implements."""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from typing import runtime_checkable

from .._paths import glob_escape
from .._paths import glob_regex
from .._paths import has_wildcard
from .._paths import join_in_root
from .._paths import pattern_base
from .._paths import within
from ._limits import SandboxLimits
from ._network import NetworkPolicy

DEFAULT_PROTECTED: tuple[str, ...] = (
    ".git/config",
    ".git/hooks",
    ".git/commondir",
    ".ketch",
    ".mcp.json",
    ".claude",
    ".agents",
    ".git/modules/**/config",
    ".git/modules/**/hooks",
    ".git/modules/**/commondir",
    ".git/worktrees/*/commondir",
    ".git/worktrees/*/config.worktree",
    "**/.ketch",
    "**/AGENTS.md",
    "**/CLAUDE.md",
)
"""Workspace-relative paths that stay read-only even when the workspace is writable:
git's configuration and hooks (also those of submodules, which ``git status`` runs in),
``commondir`` files (which would point git at another directory's configuration and
hooks), a linked worktree's own configuration, and what ketch (and other agents) read as
configuration or instructions: ``.ketch`` (settings, agent files) in the workspace and
in every folder below it, ``.mcp.json`` (MCP servers, started outside the sandbox),
``.claude`` and ``.agents``, and every ``AGENTS.md`` and ``CLAUDE.md``. The entries
without wildcards cannot be created either (the sandbox puts a placeholder where one is
absent); a pattern (``**/.ketch``) covers the paths that exist when a command starts,
which is why the command trusts a config file in a sub-folder only once the user has
(:mod:`ketch.cli._trust`)."""

_INTERPRETERS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "fish", "python", "python3", "node", "deno", "bun", "ruby", "perl",
     "php", "lua", "Rscript", "pwsh", "tsx", "ts-node", "source", "."}
)
_PROJECT_VARIABLE = re.compile(r"\$(?:\{(?:KETCH|CLAUDE)_PROJECT_DIR\}|(?:KETCH|CLAUDE)_PROJECT_DIR\b)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", "!", "then", "do", "else", "time", "exec", "env"})


def command_paths(
    workspace: str | os.PathLike[str], command: str | Sequence[str], *, cwd: str | os.PathLike[str] | None = None
) -> tuple[str, ...]:
    """The workspace-relative paths (as ``protected`` entries) of the files a command that
    ketch runs outside the sandbox names: a hook's shell command (a string) or an MCP
    server's ``command`` and ``args`` (a sequence). Relative paths are taken from ``cwd``
    (default: the workspace); ``$KETCH_PROJECT_DIR`` and ``$CLAUDE_PROJECT_DIR`` stand for
    it. What counts: a program given by its path (``./scripts/check.sh``), a word after
    an interpreter (``python3 hooks/check.py``, ``bash lint.sh``), whether it exists yet
    or not (so a command cannot create it), and any other word naming an existing file.
    Paths outside the workspace are left out (the sandbox cannot write there anyway)."""
    root = os.path.realpath(workspace)
    base = os.path.realpath(cwd) if cwd is not None else root
    if isinstance(command, str):
        text = _PROJECT_VARIABLE.sub(lambda _: shlex.quote(base), command)
        try:
            words = shlex.split(text, comments=True)
        except ValueError:
            words = text.split()
    else:
        words = [_PROJECT_VARIABLE.sub(lambda _: base, w) for w in command]
    found: dict[str, None] = {}
    program = True  # the next word is a program (a simple command starts)
    script = False  # the next word that is no option is the script an interpreter runs
    inline = False  # the next word is a shell command (sh -c '...')
    for word in words:
        if word in _SHELL_OPERATORS:
            program, script, inline = True, False, False
            continue
        if program and _ASSIGNMENT.match(word):
            continue  # NAME=value before the program
        if inline:
            found.update(dict.fromkeys(command_paths(root, word, cwd=base)))
            inline = script = False
            continue
        if word.startswith("-"):
            if script and word in ("-c", "-e", "--eval"):
                inline = word == "-c"
                script = False
            elif script and word == "-m":
                script = False  # python3 -m module: a module name, no path
            value, named = (word.split("=", 1)[1] if "=" in word else ""), False
        else:
            value, named = word, (program and "/" in word) or script
            if script:
                script = False
            elif program:
                script = os.path.basename(word) in _INTERPRETERS
        program = False
        if not value or "://" in value or value.startswith("~"):
            continue
        path = os.path.normpath(os.path.join(base, value))
        if not named and not os.path.isfile(path):
            continue
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if within(real, root) and real != root:
            found[glob_escape(os.path.relpath(real, root))] = None
    return tuple(found)


def _any_depth_name(entry: str) -> str | None:
    """``NAME`` of a ``**/NAME`` entry (a plain name), else None."""
    name = entry[3:] if entry.startswith("**/") else ""
    return name if name and "/" not in name and not has_wildcard(name) else None


def expand_protected(workspace: str | os.PathLike[str], protected: Iterable[str]) -> tuple[str, ...]:
    """``protected`` with its ``**/NAME`` entries (``**/.ketch``, ``**/AGENTS.md``)
    replaced by the paths they name in ``workspace`` now, found in one walk of it (symlinks
    not followed, ``.git`` folders not searched), as plain entries. A sandbox searches a
    ``**`` pattern at every command; a session that expands its entries once pays one walk,
    and each path found stays protected while it runs (a plain entry cannot be created
    again once removed either). What is created later is not covered: the command
    trusts a config file in a sub-folder only once the user has (:mod:`ketch.cli._trust`)."""
    entries = tuple(protected)
    names = {n for n in (_any_depth_name(e) for e in entries) if n is not None}
    if not names:
        return entries
    root = os.path.realpath(workspace)
    found: list[str] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                items = list(listing)
        except OSError:
            continue
        for item in items:
            if item.name in names:
                found.append(glob_escape(os.path.relpath(item.path, root)))
            elif item.name != ".git":
                try:
                    if item.is_dir(follow_symlinks=False):
                        pending.append(item.path)
                except OSError:
                    continue
    kept = [e for e in entries if _any_depth_name(e) is None]
    return tuple(dict.fromkeys((*kept, *sorted(found))))


def _git_file(workspace: str) -> tuple[bool, str]:
    """Whether the workspace's ``.git`` is a regular file (a worktree's or a submodule's
    ``gitdir: …``), and its start when it can be read ("" when not); never blocks (a
    named pipe) nor follows a symlink."""
    path = os.path.join(workspace, ".git")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False, ""
    except OSError:
        return False, ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return True, ""  # a file that cannot be read is still one
    try:
        return True, os.read(fd, 4096).decode("utf-8", "replace")
    except OSError:
        return True, ""
    finally:
        os.close(fd)


def _git_not_folder(workspace: str) -> bool:
    """Whether the workspace's ``.git`` is anything but a folder (absent too)."""
    try:
        return not stat.S_ISDIR(os.lstat(os.path.join(workspace, ".git")).st_mode)
    except OSError:
        return True


def with_git_dir(workspace: str, protected: Iterable[str]) -> tuple[str, ...]:
    """``protected``, and where ``.git`` is a file (a worktree's or a submodule's), that
    file itself (rewritten, it would point git at a directory holding any configuration
    and hooks) and, when it points at a git directory inside the workspace (``gitdir:
    ./.bare``), the ``.git/…`` entries again under that directory: git reads its
    configuration and hooks there."""
    entries = tuple(protected)
    if not any(entry.startswith(".git/") for entry in entries):
        return entries
    is_file, head = _git_file(workspace)
    if not is_file:
        return entries
    entries = tuple(dict.fromkeys((*entries, ".git")))
    lines = head[len("gitdir:") :].strip().splitlines() if head.startswith("gitdir:") else []
    if not lines or not lines[0].strip():
        return entries
    target = os.path.realpath(os.path.join(workspace, lines[0].strip()))
    if not within(target, workspace) or target == workspace:
        return entries
    base = glob_escape(os.path.relpath(target, workspace))
    extra = [f"{base}/{entry[len('.git/') :]}" for entry in entries if entry.startswith(".git/")]
    return tuple(dict.fromkeys((*entries, *extra)))


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """What a sandboxed command may do.

    ``workspace`` is the directory the command works in. With ``write`` the workspace,
    the ``extra_writable`` paths and a private temporary directory are writable and the
    rest of the filesystem is read-only; without it (plan mode) everything is read-only,
    the workspace too. ``protected`` names workspace-relative paths that stay read-only
    (and cannot be created, renamed or removed) even when ``write`` is set. ``network``
    True lets the command use the host's network; a :class:`NetworkPolicy` gives it no
    network of its own but ketch's proxy, which reaches only the hosts the policy names
    (and adds their credentials); otherwise it has none. ``env_allow`` names
    extra environment variables a sandbox's own environment filter lets through.
    ``hidden`` are absolute paths the command cannot read (files holding keys, such as
    ketch's own config, and what ``Read`` deny rules name): a directory is empty inside
    the sandbox, a file reads as empty.

    Entries of ``protected`` and ``hidden`` may be patterns (``*``, ``?`` and ``[…]``
    within a name, ``**`` for any number of folders; ``X/**`` stands for ``X``), which
    cover the paths that exist when a command starts.

    ``limits`` bounds each command's processes, memory, CPU time and file size
    (:class:`SandboxLimits`; None: this machine's defaults, where the host can hold them).
    A command of root runs as another user where that keeps the mode working (see
    :class:`BubblewrapSandbox`); ``as_caller`` keeps it the caller's user, for ketch's own
    programs that read only the workspace (the grep tool's search).
    """

    workspace: Path
    write: bool
    network: bool | NetworkPolicy = False
    protected: tuple[str, ...] = DEFAULT_PROTECTED
    extra_writable: tuple[Path, ...] = ()
    env_allow: tuple[str, ...] = ()
    hidden: tuple[Path, ...] = ()
    limits: SandboxLimits | None = None
    as_caller: bool = False


@runtime_checkable
class Sandbox(Protocol):
    """An OS-level sandbox that runs a command under a :class:`SandboxPolicy`.

    ``wrap`` turns the command's argv and environment into the argv and environment of
    the process to start instead (for example ``bwrap … -- argv``). ``release`` is called
    with the argv ``wrap`` returned once that process has ended, so the sandbox can undo
    what it prepared for it. ``unavailable_reason`` is None when the sandbox can run
    commands on this machine, else a one-line reason.
    """

    name: str

    def unavailable_reason(self) -> str | None:
        """None when usable, else why this sandbox cannot run commands here."""
        ...

    def wrap(
        self, argv: Sequence[str], policy: SandboxPolicy, env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that run ``argv`` inside the sandbox under ``policy``."""
        ...

    def release(self, wrapped: Sequence[str]) -> None:
        """Undo what ``wrap`` prepared for ``wrapped`` (its returned argv) once it has ended."""
        ...


def protected_path(
    workspace: str | os.PathLike[str],
    path: str | os.PathLike[str],
    protected: Iterable[str] = DEFAULT_PROTECTED,
) -> str | None:
    """The entry of ``protected`` that ``path`` is or lies under, else None.

    ``path`` (relative paths are taken from ``workspace``) is resolved first (symlinks,
    ``..``), so ``src/../.git/config`` and a symlink to ``.ketch/config.toml`` count. For
    tools that write files outside the sandbox (``write``, ``edit``) and the permission
    engine, so that they keep the same paths read-only as the sandbox does.
    """
    root = os.path.realpath(workspace)
    joined = join_in_root(root, os.fspath(path))
    # the file the workspace tools touch (".." first) and the one the kernel opens
    candidates = {os.path.realpath(os.path.normpath(joined)), os.path.realpath(joined)}
    entries = with_git_dir(root, protected)
    guards_git = any(e.startswith(".git/") for e in entries)
    git = os.path.join(root, ".git")
    if guards_git and _git_not_folder(root) and (os.path.normpath(joined) == git or git in candidates):
        return ".git"  # absent, a symlink or a pipe: written, it could point git elsewhere
    for entry in entries:
        if has_wildcard(entry):  # .git/modules/**/config: as the sandbox expands it
            regex = glob_regex(entry.removesuffix("/**"))
            for real in candidates:
                rel = os.path.relpath(real, root).split(os.sep)
                if rel[0] != ".." and any(regex.fullmatch("/".join(rel[:n])) for n in range(1, len(rel) + 1)):
                    return entry
        elif any(within(real, os.path.realpath(os.path.join(root, pattern_base(entry)))) for real in candidates):
            return entry
    if guards_git:
        # git's own files anywhere below the root (a nested repository's config, a
        # submodule's or worktree's commondir, a .git file pointing git elsewhere): written,
        # they could point the user's git at configuration the agent wrote
        for real in candidates:
            rel = os.path.relpath(real, root).split(os.sep)
            if rel[0] != ".." and ".git" in rel and rel != [".git"]:
                return ".git"
    return None
