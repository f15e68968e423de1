"""The sandbox interface: a policy and the protocol every sandbox implements."""

from __future__ import annotations

import os
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

DEFAULT_PROTECTED: tuple[str, ...] = (
    ".git/config",
    ".git/hooks",
    ".git/commondir",
    ".ketch",
    ".git/modules/**/config",
    ".git/modules/**/hooks",
    ".git/modules/**/commondir",
    ".git/worktrees/*/commondir",
    ".git/worktrees/*/config.worktree",
)
"""Workspace-relative paths that stay read-only even when the workspace is writable:
git's configuration and hooks (also those of submodules, which ``git status`` runs in),
``commondir`` files (which would point git at another directory's configuration and
hooks), a linked worktree's own configuration, and ketch's project settings."""


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
    lets the command use the host's network; otherwise it has none. ``env_allow`` names
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
    network: bool = False
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
