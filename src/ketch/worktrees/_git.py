"""Creating, listing, merging and removing ketch's git worktrees (see the package docstring)."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import secrets
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..loop import Tool
from ..tools import Workspace

WORKTREES_DIR = ".ketch/worktrees"
"""Where the worktrees are, relative to the main checkout (git-ignored by a ``.gitignore`` of ``*``)."""

BRANCH_PREFIX = "ketch/"
_BASE_KEY = "ketchbase"  # branch.ketch/NAME.ketchbase = the branch it came from
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_TIMEOUT = 120.0
_LOCK = threading.Lock()  # git's own lock files make a second concurrent change fail: one at a time


class WorktreeError(Exception):
    """A worktree cannot be made, found, merged or removed; the message is one line."""


class WorktreeConflict(WorktreeError):
    """Merging a worktree's branch conflicts in ``files``; the merge was undone."""

    def __init__(self, message: str, files: list[str]) -> None:
        super().__init__(message)
        self.files = files


@dataclass(frozen=True, slots=True)
class Worktree:
    """One of ketch's worktrees: ``name``, its folder ``path``, its ``branch``
    (``ketch/NAME``), the ``base`` branch it came from (None: not recorded),
    ``uncommitted`` (changed, new or deleted files not committed on the branch) and
    ``ahead`` (commits on the branch not in ``base``; -1 when ``base`` is gone)."""

    name: str
    path: Path
    branch: str
    base: str | None
    uncommitted: int = 0
    ahead: int = 0


def check_name(name: str) -> str:
    """``name`` if it can name a worktree, else a :class:`WorktreeError` saying what may."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise WorktreeError(
            f"worktree name {name!r}: use letters, digits, '-' and '_' (up to 63, starting with a letter or digit)"
        )
    return name


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", LANG="C")
    return env


def _git(cwd: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(cwd), *args],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise WorktreeError("git is not installed (worktrees need it on PATH)") from None
    except subprocess.TimeoutExpired:
        raise WorktreeError(f"git {args[0]} in {cwd} did not finish in {_TIMEOUT:g} s") from None
    if check and done.returncode != 0:
        raise WorktreeError(
            f"git {' '.join(args[:2])} in {cwd} failed: {_last_line(done.stderr or done.stdout)}"
        )
    return done


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    useful = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (useful or lines or ["no message"])[0].removeprefix("fatal: ").removeprefix("error: ")


def _entries(cwd: Path | str) -> list[dict[str, str]]:
    """``git worktree list --porcelain`` as one dict per worktree (the main checkout first)."""
    out = _git(cwd, "worktree", "list", "--porcelain").stdout
    entries: list[dict[str, str]] = []
    for block in out.split("\n\n"):
        entry: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            entry[key] = value
        if "worktree" in entry:
            entries.append(entry)
    return entries


def main_checkout(cwd: Path | str) -> Path:
    """The main checkout of the repository ``cwd`` is in (also from inside a worktree)."""
    probe = _git(cwd, "rev-parse", "--is-inside-work-tree", check=False)
    if probe.returncode != 0 or probe.stdout.strip() != "true":
        raise WorktreeError(
            f"{cwd} is not inside a git repository's checkout: worktrees need one (git init, one commit)"
        )
    entries = _entries(cwd)
    if not entries or "bare" in entries[0]:
        raise WorktreeError(
            f"{cwd}: the repository is bare; worktrees are made from a repository with a checkout"
        )
    return Path(entries[0]["worktree"])


def _bases(root: Path) -> dict[str, str]:
    done = _git(root, "config", "--get-regexp", rf"^branch\..*\.{_BASE_KEY}$", check=False)
    bases: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        branch = key[len("branch.") : -len(f".{_BASE_KEY}")]
        bases[branch] = value.strip()
    return bases


def _count(done: subprocess.CompletedProcess[str]) -> int:
    try:
        return int(done.stdout.strip()) if done.returncode == 0 else -1
    except ValueError:
        return -1


def _status(path: Path, branch: str, base: str | None) -> tuple[int, int]:
    changes = _git(path, "status", "--porcelain", "--untracked-files=all")
    uncommitted = len([line for line in changes.stdout.splitlines() if line.strip()])
    ahead = (
        -1
        if base is None
        else _count(_git(path, "rev-list", "--count", f"refs/heads/{base}..refs/heads/{branch}", check=False))
    )
    return uncommitted, ahead


def list_worktrees(cwd: Path | str) -> list[Worktree]:
    """The worktrees ketch made in the repository of ``cwd``, sorted by name, each with
    its pending work (:class:`Worktree`)."""
    return _list(main_checkout(cwd), status=True)


def _list(root: Path, *, status: bool) -> list[Worktree]:
    folder = (root / WORKTREES_DIR).resolve()
    bases = _bases(root)
    found: list[Worktree] = []
    for entry in _entries(root):
        path = Path(entry["worktree"])
        if path.parent != folder:
            continue
        branch = entry.get("branch", "").removeprefix("refs/heads/")
        if not branch:
            continue
        base = bases.get(branch)
        uncommitted, ahead = _status(path, branch, base) if status and path.is_dir() else (0, 0)
        found.append(Worktree(path.name, path, branch, base, uncommitted, ahead))
    return sorted(found, key=lambda w: w.name)


def find_worktree(cwd: Path | str, name: str) -> Worktree:
    """The worktree ``name``, or a :class:`WorktreeError` listing the ones there are."""
    check_name(name)
    worktrees = list_worktrees(cwd)
    for wt in worktrees:
        if wt.name == name:
            return wt
    there = ", ".join(w.name for w in worktrees) or "none"
    raise WorktreeError(f"no worktree named {name!r} (there are: {there})")


def create_worktree(cwd: Path | str, name: str | None = None, *, prefix: str = "wt") -> Worktree:
    """The worktree ``name`` of the repository of ``cwd``: an existing one as it is, else
    a new one on branch ``ketch/NAME`` from the branch checked out in ``cwd`` (its base).
    Without ``name``, a new one named ``PREFIX-<6 hex digits>``."""
    with _LOCK:
        return _create(cwd, name, prefix)


def _create(cwd: Path | str, name: str | None, prefix: str) -> Worktree:
    root = main_checkout(cwd)
    if name is None:
        name = f"{prefix}-{secrets.token_hex(3)}"
    check_name(name)
    for wt in _list(root, status=False):
        if wt.name == name:
            uncommitted, ahead = _status(wt.path, wt.branch, wt.base)
            return dataclasses.replace(wt, uncommitted=uncommitted, ahead=ahead)
    base = _git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    if not base:
        raise WorktreeError(
            f"HEAD is detached in {cwd}: check out a branch first (a worktree merges back into it)"
        )
    if _git(cwd, "rev-parse", "--verify", "--quiet", "HEAD", check=False).returncode != 0:
        raise WorktreeError(f"branch {base} in {cwd} has no commit yet: commit once, then make worktrees")
    folder = root / WORKTREES_DIR
    path = folder / name
    if os.path.lexists(path):
        raise WorktreeError(
            f"{path} exists but is not a worktree of this repository: move it away or choose another name"
        )
    branch = BRANCH_PREFIX + name
    if _git(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).returncode == 0:
        raise WorktreeError(
            f"branch {branch} exists already (from an earlier worktree?): delete it or choose another name"
        )
    folder.mkdir(parents=True, exist_ok=True)
    _write_ignore(folder / ".gitignore")
    _git(cwd, "worktree", "add", "--quiet", "-b", branch, os.fspath(path), "HEAD")
    _git(root, "config", f"branch.{branch}.{_BASE_KEY}", base)
    return Worktree(name, path.resolve(), branch, base)


def _write_ignore(path: Path) -> None:
    """``.ketch/worktrees/.gitignore`` (``*``) unless there is one; never through a symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return
    except OSError as exc:
        raise WorktreeError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("# ketch's worktrees (ketch worktree list)\n*\n")


def _identity(cwd: Path) -> list[str]:
    """``-c user.name=… -c user.email=…`` when the repository has no identity to commit with."""
    have = _git(cwd, "config", "user.email", check=False).stdout.strip()
    return [] if have else ["-c", "user.name=ketch", "-c", "user.email=ketch@localhost"]


def commit_pending(wt: Worktree) -> bool:
    """Commit every change in the worktree (new, changed, deleted files) on its branch,
    hooks not run; True when there was something to commit."""
    if _git(wt.path, "status", "--porcelain", "--untracked-files=all").stdout.strip() == "":
        return False
    _git(wt.path, "add", "-A")
    _git(wt.path, *_identity(wt.path), "commit", "--quiet", "--no-verify", "-m", f"ketch worktree {wt.name}")
    return True


def merge_worktree(cwd: Path | str, name: str) -> Worktree:
    """Commit what is pending in worktree ``name`` (:func:`commit_pending`) and merge its
    branch into its base, in the checkout that has the base checked out (a merge
    commit; hooks not run). A conflict is never resolved: the merge is undone and
    :class:`WorktreeConflict` names the files. Returns the worktree as it is after."""
    with _LOCK:
        return _merge(cwd, name)


def _merge(cwd: Path | str, name: str) -> Worktree:
    wt = find_worktree(cwd, name)
    if wt.base is None:
        raise WorktreeError(
            f"worktree {name!r}: the branch it came from is not recorded; merge {wt.branch} with git"
        )
    commit_pending(wt)
    target = next(
        (Path(e["worktree"]) for e in _entries(cwd) if e.get("branch") == f"refs/heads/{wt.base}"), None
    )
    if target is None:
        raise WorktreeError(
            f"worktree {name!r}: its base branch {wt.base} is not checked out anywhere; check it out, then merge"
        )
    done = _git(
        target, *_identity(target), "merge", "--no-ff", "--no-verify", "--no-edit",
        "-m", f"Merge worktree {name} ({wt.branch})", f"refs/heads/{wt.branch}", check=False,
    )  # fmt: skip
    if done.returncode != 0:
        files = [
            f
            for f in _git(target, "diff", "--name-only", "--diff-filter=U", check=False).stdout.splitlines()
            if f
        ]
        if files:
            _git(target, "merge", "--abort", check=False)
            raise WorktreeConflict(
                f"merging {wt.branch} into {wt.base} conflicts in {', '.join(files)}; nothing was merged "
                f"(resolve it yourself: git merge {wt.branch} in {target})",
                files,
            )
        raise WorktreeError(
            f"merging {wt.branch} into {wt.base} failed: {_last_line(done.stderr or done.stdout)}"
        )
    return find_worktree(cwd, name)


def remove_worktree(cwd: Path | str, name: str, *, force: bool = False) -> None:
    """Remove worktree ``name``'s folder and branch. Refused while it has uncommitted
    changes or commits its base lacks, unless ``force``."""
    with _LOCK:
        _remove(cwd, name, force)


def _remove(cwd: Path | str, name: str, force: bool) -> None:
    wt = find_worktree(cwd, name)
    if not force:
        if wt.uncommitted:
            raise WorktreeError(
                f"worktree {name!r} has {wt.uncommitted} uncommitted change(s): merge it first "
                f"(ketch worktree merge {name}) or remove it with --force"
            )
        if wt.ahead:
            what = (
                f"{wt.ahead} commit(s) not merged into {wt.base}"
                if wt.ahead > 0
                else "commits whose base branch is gone"
            )
            raise WorktreeError(
                f"branch {wt.branch} has {what}: merge it first (ketch worktree merge {name}) or remove it with --force"
            )
    root = main_checkout(cwd)
    _git(root, "worktree", "remove", "--force", os.fspath(wt.path))
    _git(root, "branch", "-D", "--quiet", wt.branch)


def rebase_tools(tools: Iterable[Tool], root: Path | str) -> list[Tool]:
    """``tools`` with every tool that works on a :class:`~ketch.tools.Workspace` (read,
    write, edit, bash, grep, find, ls) copied onto one workspace rooted at ``root``
    (:meth:`~ketch.tools.Workspace.moved`), also inside a wrapper that keeps the tool it
    wraps as ``inner`` (the editor's file tools over ACP); other tools are shared as they
    are, and ``tools`` are left unchanged."""
    moved: dict[int, Workspace] = {}

    def rebased(tool: Any) -> Any:
        try:  # its own attribute, not one a wrapper's __getattr__ hands on
            ws = object.__getattribute__(tool, "workspace")
        except AttributeError:
            ws = None
        if isinstance(ws, Workspace):
            if id(ws) not in moved:
                moved[id(ws)] = ws.moved(root)
            clone = copy.copy(tool)
            clone.workspace = moved[id(ws)]
            return clone
        try:  # a wrapper of a tool (the editor's file tools over ACP): the tool it wraps
            inner = object.__getattribute__(tool, "inner")
        except AttributeError:
            return tool
        inner_moved = rebased(inner)
        if inner_moved is inner:
            return tool
        # not copy.copy: it asks the wrapper for __setstate__ before the copy has ``inner``
        clone = object.__new__(type(tool))
        clone.__dict__.update(object.__getattribute__(tool, "__dict__"))
        clone.inner = inner_moved
        return clone

    return [rebased(tool) for tool in tools]
