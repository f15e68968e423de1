"""The workspace the coding tools act on: path confinement and read-before-write records.

Every path argument resolves against the workspace root (``~`` is expanded, symlinks are
followed) and must end up inside the root or one of the extra allowed roots; anything
else raises :class:`WorkspaceError` with a message naming the path and the roots.
``.``, ``./``, the root's absolute path and absolute paths inside it all work; so does a
path that starts with the root's own folder name (``myproj`` or ``myproj/src`` in
``/x/myproj``, also written ``/myproj/src``) when the root holds no entry of that name.

The workspace also remembers which files the agent has read, with their modification
time, size and a content digest. Editing or overwriting an existing file requires such a
record that still matches the file on disk; a successful write refreshes it.

Only regular files and folders are worked on. Named pipes, devices and sockets would
block a reader (or writer) forever, so :func:`open_regular` and :func:`special_kind`
refuse them with a message naming the path and what it is, without ever blocking.

A file with more than one hard link is one file under several names, possibly some
outside the workspace (a link made there cannot be told apart from the original), so
the tools that write in place refuse it (``open_regular(..., single_link=True)``, see
:func:`hard_link_message`). Reading one is allowed.

Files are opened name by name from ``/`` without following a symlink (each folder with
``O_NOFOLLOW`` relative to the one before), so a folder on the resolved path that a
command swaps for a symlink after the path was checked fails the call instead of
redirecting it. The workspace's ``hidden`` and ``protected`` path patterns (what the
``Read`` and ``Edit`` deny rules name) are checked on the resolved path when a tool
runs: the permission engine's check happened earlier, and a path can be swapped for
a symlink in between.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import shutil
import stat as _stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from .._paths import absolute_patterns
from .._paths import could_contain
from .._paths import glob_escape
from .._paths import has_wildcard
from .._paths import join_in_root
from .._paths import link_targets
from .._paths import names_path
from .._paths import pattern_base
from .._paths import resolve_base
from .._paths import within
from ..loop import Tool
from ..loop import ToolResult
from ..sandbox import DEFAULT_PROTECTED
from ..sandbox import protected_path


class WorkspaceError(Exception):
    """A path or file-state problem, with a message meant for the model."""


def digest(data: bytes) -> bytes:
    """The content digest stored in a :class:`FileRecord`."""
    return hashlib.blake2b(data, digest_size=16).digest()


def special_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is when it is neither a regular file nor a
    folder (``"a named pipe (FIFO)"``, ``"a character device"``, ...), else None."""
    if _stat.S_ISREG(mode) or _stat.S_ISDIR(mode):
        return None
    if _stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if _stat.S_ISCHR(mode):
        return "a character device"
    if _stat.S_ISBLK(mode):
        return "a block device"
    if _stat.S_ISSOCK(mode):
        return "a socket"
    if _stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file"


def not_regular_message(shown: str, mode: int, verb: str) -> str:
    """The error for a path that is not a regular file, e.g. ``notes.fifo is a named pipe
    (FIFO), not a regular file; only regular files can be read.``"""
    kind = "a folder" if _stat.S_ISDIR(mode) else special_kind(mode) or "not a regular file"
    return f"{shown} is {kind}, not a regular file; only regular files can be {verb}."


def hard_link_message(shown: str, links: int) -> str:
    """The error for writing a file with ``links`` (more than one) hard links, e.g.
    ``notes.txt has 2 hard links; writing it would also change the other links, ...``."""
    return (
        f"{shown} has {links} hard links; writing it would also change the other links, which may lie "
        f"outside the workspace. To change only this name, write the new content to another file and "
        f"rename it over {shown}."
    )


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# O_PATH: a folder that may be searched but not read can still be walked through
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC


def _is_link(name: str, folder: int) -> bool:
    try:
        return _stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False


def open_folder(path: str, shown: str, *, create: bool = False) -> int:
    """A descriptor of the folder ``path`` (absolute, as :meth:`Workspace.resolve` gives
    it), opened name by name from ``/`` without following a symlink; ``create`` makes
    the missing folders. A name on the way that is now a symlink or a file raises
    :class:`WorkspaceError` (the path changed after it was checked); ``OSError``
    (missing folder, permissions, ``path`` itself a file) propagates."""
    fd = os.open("/", _FOLDER_FLAGS)
    names = [name for name in path.split(os.sep) if name]
    try:
        for i, name in enumerate(names):
            try:
                inner = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                inner = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as exc:
                # a symlink: ELOOP, or ENOTDIR with O_PATH; the folder itself being a
                # file is the caller's to report
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                if i == len(names) - 1 and not _is_link(name, fd):
                    raise
                raise WorkspaceError(
                    f"{shown} changed while it was being opened: a folder on its path is now a symbolic link "
                    "or a file. Nothing was done; check the path and try again."
                ) from None
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(
    path: os.PathLike[str] | str, shown: str, verb: str, *, write: bool = False, single_link: bool = False
) -> tuple[int, os.stat_result]:
    """Open the regular file ``path`` without blocking; returns ``(fd, stat)``.

    The file is opened with ``O_NONBLOCK | O_NOFOLLOW`` (so a named pipe, a device or a
    symlink swapped in after the path was resolved cannot block or redirect the call)
    and checked with ``fstat`` on the open descriptor; anything but a regular file is
    closed again and refused with :class:`WorkspaceError` (see :func:`not_regular_message`,
    ``verb`` is e.g. ``"read"``). ``write`` opens for reading and writing, creating the
    file if missing (never truncating: the caller does that once the file is checked).
    ``OSError`` (missing file, permissions) propagates; a symlink at ``path`` is refused.
    ``single_link`` also refuses a file with more than one hard link (checked on the open
    descriptor, see :func:`hard_link_message`): writing it in place would change the
    other names too.
    """
    flags = os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC
    flags |= os.O_RDWR | os.O_CREAT if write else os.O_RDONLY
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not write:
            raise
    else:
        if not _stat.S_ISREG(info.st_mode):
            raise WorkspaceError(not_regular_message(shown, info.st_mode, verb))
    text = os.fspath(path)
    folder = open_folder(os.path.dirname(text), shown)
    try:
        fd = os.open(os.path.basename(text), flags, 0o666, dir_fd=folder)
    except OSError as exc:
        # ELOOP: a symlink appeared at the resolved path; ENXIO: a socket or a FIFO without reader.
        try:
            info = os.lstat(path)
        except OSError:
            raise exc from None
        if not _stat.S_ISREG(info.st_mode):
            raise WorkspaceError(not_regular_message(shown, info.st_mode, verb)) from None
        raise
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not _stat.S_ISREG(info.st_mode):
            raise WorkspaceError(not_regular_message(shown, info.st_mode, verb))
        if single_link and info.st_nlink > 1:
            raise WorkspaceError(hard_link_message(shown, info.st_nlink))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


@dataclass(slots=True)
class FileRecord:
    """What the agent last saw of a file: modification time, size and content digest."""

    mtime_ns: int
    size: int
    digest: bytes = field(repr=False)


_SCRATCH_DIRS: set[str] = set()
"""The scratch directories of every workspace, removed when the program exits."""
_SCRATCH_DIRS_REGISTERED: list[bool] = []


def _remove_scratch_dirs() -> None:
    for path in list(_SCRATCH_DIRS):
        shutil.rmtree(path, ignore_errors=True)
    _SCRATCH_DIRS.clear()


class Workspace:
    """A workspace root, extra allowed roots, and the files the agent has read.

    One instance is shared by all tools of an agent (see
    :func:`ketch.tools.coding_tools`) so that a ``read`` enables a later
    ``edit``.

    ``hidden`` and ``protected`` are path patterns (the permission rules' syntax; relative
    to the root, from ``~`` or absolute) the tools refuse to read and to change, checked
    when a tool runs (:meth:`refusal`); pass the ``Read`` and ``Edit`` deny rules' paths
    (:meth:`~ketch.permissions.PermissionEngine.hidden_paths` and ``protected_paths``
    with ``all_rules=True``). ``ask_read`` and ``ask_edit`` are the path patterns the
    permission engine asks about before they are read and before they change (the ``Read``
    and ``Edit`` ask rules' paths, :meth:`~ketch.permissions.PermissionEngine.ask_read_paths`
    and ``ask_edit_paths``; ``ask_edit`` defaults to the sandbox's ``DEFAULT_PROTECTED``,
    whose ``.git/…`` entries also name the git directory a ``.git`` file points at). The
    engine judged the path the call gave, so the tools refuse one of these reached only
    through a symlink (a command can make the link after the check).
    """

    __slots__ = ("_ask_edit", "_ask_read", "_hidden", "_protected", "_records", "_roots", "_scratch", "root")

    def __init__(
        self,
        root: str | os.PathLike[str],
        allowed_roots: tuple[str | os.PathLike[str], ...] = (),
        *,
        hidden: Iterable[str | os.PathLike[str]] = (),
        protected: Iterable[str | os.PathLike[str]] = (),
        ask_read: Iterable[str | os.PathLike[str]] = (),
        ask_edit: Iterable[str | os.PathLike[str]] = DEFAULT_PROTECTED,
    ) -> None:
        self.root = Path(os.path.realpath(os.path.expanduser(os.fspath(root))))
        self._roots: list[str] = [str(self.root)]
        for extra in allowed_roots:
            self.allow_root(extra)
        self._records: dict[str, FileRecord] = {}
        self._scratch: Path | None = None
        self._hidden = self._patterns(hidden)
        self._protected = self._patterns(protected)
        self._ask_read = self._patterns(ask_read)
        # the sandbox's protected paths are checked as it keeps them (a .git file's git
        # directory too); every other entry as a pattern
        edits = [os.fspath(p) for p in ask_edit]
        self._ask_edit = (
            tuple(p for p in edits if p in DEFAULT_PROTECTED),
            self._patterns(p for p in edits if p not in DEFAULT_PROTECTED),
        )
        # where each ask pattern's base folder led when the first workspace of this process
        # named it: the one link an approved call may go through (one made or repointed
        # later, also before a fork, a /clear or another session of the same process, is
        # no exemption)
        for p in (*self._ask_read, *self._ask_edit[1]):
            if p not in _PINNED_BASES:
                _PINNED_BASES[p] = os.path.realpath(pattern_base(p))
        # where symlinks the wildcard patterns name lead: searched now, as this session starts
        for pattern in (*self._hidden, *self._protected, *self._ask_read, *self._ask_edit[1]):
            if has_wildcard(pattern):
                self._link_targets(pattern, search=True)

    def _patterns(self, items: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
        return absolute_patterns(items, self._roots[0])

    def _now(self, patterns: tuple[str, ...]) -> tuple[str, ...]:
        """Each pattern, the same with its part before the first wildcard resolved when a
        symlink leads elsewhere now (resolved at each check: a link can change), and
        where the symlinks a wildcard pattern names lead (:meth:`_link_targets`)."""
        out: list[str] = []
        for pattern in patterns:
            out.append(pattern)
            real = resolve_base(pattern)
            if real != pattern:
                out.append(real)
            if has_wildcard(pattern):
                out.extend(glob_escape(t) for t in self._link_targets(pattern))
        return tuple(out)

    def _link_targets(self, pattern: str, *, search: bool = False) -> tuple[str, ...]:
        """:func:`~ketch._paths.link_targets` of a wildcard pattern (``search``: search
        again), unless its ``**`` would search outside the roots."""
        inner = pattern.removesuffix("/**")
        if "**" in inner and not any(within(pattern_base(inner), root) for root in self._roots):
            return ()
        return link_targets(pattern, search=search)

    def hidden_now(self) -> tuple[str, ...]:
        """The :attr:`hidden` patterns as they resolve now, for :meth:`is_hidden` to check
        many paths against (a walk) without resolving them again for each."""
        return self._now(self._hidden)

    @property
    def hidden(self) -> tuple[str, ...]:
        """The absolute path patterns no tool may read, list or search into (the ``Read``
        deny rules' paths, see :meth:`~ketch.permissions.PermissionEngine.hidden_paths`);
        given relative to the root or absolute."""
        return self._hidden

    @property
    def protected(self) -> tuple[str, ...]:
        """The absolute path patterns no tool may change (the ``Edit`` deny rules' paths,
        see :meth:`~ketch.permissions.PermissionEngine.protected_paths`)."""
        return self._protected

    def _indirect(self, written: str, real: str, shown: str) -> tuple[str, str | None] | None:
        """How ``written`` reaches ``real`` when it is not ``real``'s own path, and the
        path it names literally: through a symlink (with ``written`` made absolute, a
        symlinked alias of the root replaced by the root: a link above the root is no
        detour), or by the workspace's own folder name (``myproj/.git/config``, which
        names another file while a ``myproj`` folder exists; with None: no literal path
        counts). None when ``written`` is ``real``'s own path."""
        root = self._roots[0]
        literal = os.path.normpath(os.path.join(root, os.path.expanduser(written)))
        literal = _through_root_alias(literal, self._roots) or literal
        if literal == real:
            return None
        if os.path.normpath(join_in_root(root, written)) == real:
            return f"{written} stands for {shown} by the workspace's folder name", None
        return f"{written} leads through a symlink to {shown}", literal

    def _asked(self, real: str, *, write: bool, search: bool, literal: str | None = None) -> str | None:
        """The verb of the ask patterns naming ``real`` (``"changes"``, ``"is read"``),
        None when none does; with ``search``, also a read pattern that may name something
        below the folder ``real``. With ``literal`` (the path the call named, which leads
        to ``real`` through a symlink), a pattern that names ``literal`` does not count
        when the one link on the way is the pattern's own base folder, leading where it
        led when the first workspace of this process named the pattern
        (``Read(./conf/**)`` with ``conf -> shared``: ``conf/a.txt`` is ``shared/a.txt``,
        name for name): the engine asked about that very file. Any other link counts: a
        base repointed since, and one between two files one rule names (``Read(*.pem)``
        asks about each: ``test.pem -> secrets/prod.pem`` is refused). The sandbox's
        protected paths count always."""
        if not write and not self._ask_read:
            return None
        folder = search and os.path.isdir(real)

        def names(pattern: str, path: str) -> bool:
            return names_path(pattern, path) or (folder and could_contain(pattern, path))

        def through_base(pattern: str) -> bool:
            # literal, below the pattern's base folder, is real below where the base leads
            base = pattern_base(pattern)
            target = os.path.realpath(base)
            if literal is None or target == base or target != _PINNED_BASES[pattern] or not within(literal, base):
                return False
            return target + literal[len(base) :] == real

        def asks(pattern: str) -> bool:
            if not any(names(p, real) for p in self._now((pattern,))):
                return False
            return literal is None or not (names(pattern, literal) and through_base(pattern))

        if write:
            relative, absolute = self._ask_edit
            asked = (relative and protected_path(self._roots[0], real, relative) is not None) or any(
                asks(p) for p in absolute
            )
            return "changes" if asked else None
        return "is read" if any(asks(p) for p in self._ask_read) else None

    def is_hidden(self, path: str, patterns: tuple[str, ...] | None = None) -> bool:
        """Whether a :attr:`hidden` pattern names the absolute ``path`` or a folder above it
        (``patterns``: those :meth:`hidden_now` gave, else resolved for this call)."""
        return any(names_path(p, path) for p in (self.hidden_now() if patterns is None else patterns))

    def refusal(
        self, path: Path, shown: str, *, write: bool = False, search: bool = False, written: str | None = None
    ) -> str | None:
        """Why a tool may not touch the resolved ``path`` (None when it may): a
        :attr:`hidden` pattern names it, or with ``write`` a :attr:`protected` one, or
        with ``search`` (a content search of a folder) a hidden path may lie below it.
        With ``written`` (the path as the call gave it), also a path the permission engine
        asks about (``ask_edit`` with ``write``: ``.git/config``, ``.ketch`` …; else
        ``ask_read``) reached only through a symlink or by the workspace's folder name: the
        engine judged the path as written (:meth:`_indirect`)."""
        text = os.fspath(path)
        if self.is_hidden(text):
            return f"Permission denied: {shown} is hidden from the tools (a Read deny rule names it)."
        if write and any(names_path(p, text) for p in self._now(self._protected)):
            return f"Permission denied: {shown} may not be changed (a deny rule on changing files names it)."
        indirect = self._indirect(written, text, shown) if written is not None else None
        if indirect is not None:
            how, literal = indirect
            verb = self._asked(text, write=write, search=search, literal=literal)
            if verb is not None:
                return f"Permission denied: {how}, which is asked about before it {verb}; give {shown} itself."
        if search and self._hidden and os.path.isdir(text) and any(could_contain(p, text) for p in self._now(self._hidden)):
            return (
                f"Permission denied: {shown} holds files hidden from the tools (a Read deny rule names them); "
                "search a folder inside it that does not."
            )
        return None

    @property
    def roots(self) -> tuple[Path, ...]:
        """The workspace root followed by the extra allowed roots (all resolved)."""
        return tuple(Path(r) for r in self._roots)

    def moved(self, root: str | os.PathLike[str]) -> Workspace:
        """A new workspace rooted at ``root`` (a worktree of this one's project) with this
        one's other roots and path patterns (``hidden``, ``protected``, the ask lists; the
        sandbox's protected entries apply under ``root``), and no read records."""
        ws = Workspace(
            root,
            tuple(self._roots[1:]),
            hidden=self._hidden,
            protected=self._protected,
            ask_read=self._ask_read,
            ask_edit=(*self._ask_edit[0], *self._ask_edit[1]),
        )
        return ws

    def allow_root(self, path: str | os.PathLike[str]) -> Path:
        """Allow access below ``path`` as well; returns the resolved root."""
        real = os.path.realpath(os.path.expanduser(os.fspath(path)))
        if real not in self._roots:
            self._roots.append(real)
        return Path(real)

    def scratch_dir(self) -> Path:
        """A private temporary directory (created on first use) inside the allowed roots,
        removed with what it holds (the bash tool's output logs) by :meth:`close` or when
        the program exits."""
        if self._scratch is None:
            self._scratch = self.allow_root(tempfile.mkdtemp(prefix="ketch-"))
            if not _SCRATCH_DIRS and not _SCRATCH_DIRS_REGISTERED:
                atexit.register(_remove_scratch_dirs)
                _SCRATCH_DIRS_REGISTERED.append(True)
            _SCRATCH_DIRS.add(str(self._scratch))
        return self._scratch

    def close(self) -> None:
        """Remove the scratch directory, if one was made (a later :meth:`scratch_dir`
        makes a new one)."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            _SCRATCH_DIRS.discard(str(self._scratch))
            self._scratch = None

    def _limits(self) -> str:
        roots = self._roots
        if len(roots) == 1:
            return f"the workspace root {roots[0]}"
        return f"the workspace root {roots[0]} and the allowed roots {', '.join(roots[1:])}"

    def resolve(self, path: str) -> Path:
        """The absolute, symlink-free path for ``path``, or :class:`WorkspaceError`.

        Relative paths are taken from the workspace root. The result must lie inside the
        root or an allowed root, checked after following symlinks.
        """
        if not isinstance(path, str) or not path.strip():
            raise WorkspaceError("The path is empty. Give a file or directory path.")
        if "\x00" in path:
            raise WorkspaceError(f"The path {path!r} contains a NUL character.")
        try:
            joined = os.path.normpath(join_in_root(self._roots[0], path))
            real = os.path.realpath(joined)
            os.fsencode(real)
        except (OSError, ValueError) as exc:
            raise WorkspaceError(f"The path {path!r} cannot be used: {exc}.") from None
        if any(within(real, root) for root in self._roots):
            return Path(real)
        if any(within(joined, root) for root in self._roots):
            raise WorkspaceError(
                f"Path {path!r} is outside the workspace: it leads through a symlink to {real}. "
                f"Access is limited to {self._limits()}."
            )
        raise WorkspaceError(
            f"Path {path!r} is outside the workspace: it resolves to {real}. "
            f"Access is limited to {self._limits()}."
        )

    def display(self, path: Path | str) -> str:
        """``path`` relative to the workspace root when inside it, else absolute."""
        text = os.fspath(path)
        root = self._roots[0]
        if text == root:
            return "."
        if within(text, root):
            return text[len(root) :].lstrip(os.sep)
        return text

    def record(self, path: Path, data: bytes, stat: os.stat_result) -> None:
        """Remember that the agent has seen ``data`` as the content of ``path``."""
        self._records[str(path)] = FileRecord(stat.st_mtime_ns, stat.st_size, digest(data))

    def record_of(self, path: Path) -> FileRecord | None:
        """The read record of ``path``, if any."""
        return self._records.get(str(path))

    def forget(self, path: Path) -> None:
        """Drop the read record of ``path``."""
        self._records.pop(str(path), None)

    def check_fresh(self, path: Path, stat: os.stat_result, data: bytes | None, *, action: str) -> None:
        """Raise :class:`WorkspaceError` unless the agent has read ``path`` as it is now.

        ``stat`` is the file's current status and ``data`` its current content when the
        caller has it (else it is read here if needed). A file whose time changed but
        whose size and digest did not (``touch``) still counts as read. ``action`` is
        the verb used in the message (``"edit"``, ``"overwrite"``).
        """
        record = self._records.get(str(path))
        shown = self.display(path)
        if record is None:
            raise WorkspaceError(
                f"{shown} has not been read yet. Read it with the read tool before you {action} it."
            )
        if stat.st_mtime_ns == record.mtime_ns and stat.st_size == record.size:
            return
        if stat.st_size == record.size:
            current = data if data is not None else path.read_bytes()
            if digest(current) == record.digest:
                record.mtime_ns = stat.st_mtime_ns
                return
        raise WorkspaceError(
            f"{shown} has changed on disk since you last read it. Read it again before you {action} it."
        )

    def __repr__(self) -> str:
        return f"Workspace(root={str(self.root)!r})"


_PINNED_BASES: dict[str, str] = {}
"""Where each ask pattern's base folder led when a workspace first named the pattern."""


def _through_root_alias(path: str, roots: list[str]) -> str | None:
    """An absolute ``path`` outside the roots written through another name of one
    (``/tmp/ws/x`` when ``/tmp`` links to ``/private/tmp``), with that root's own path;
    None when no folder above it is a root. A symlink above the root is no detour."""
    if any(within(path, root) for root in roots):
        return None
    # from the top: the shortest folder that is a root (a link inside it to itself, such
    # as self -> ., stays a detour)
    parts = path.split(os.sep)
    for n in range(2, len(parts)):
        folder = os.sep.join(parts[:n])
        real = os.path.realpath(folder)
        if real in roots:
            return real + path[len(folder) :]
    return None


class WorkspaceTool(Tool):
    """Base of the built-in tools that work on files of a :class:`Workspace` (``workspace``).

    ``options`` are :class:`~ketch.loop.Tool`'s keyword arguments.
    """

    __slots__ = ("workspace",)

    def __init__(
        self, workspace: Workspace, name: str, description: str, parameters: dict[str, Any], **options: Any
    ) -> None:
        super().__init__(name, description, parameters, **options)
        self.workspace = workspace

    def locate(
        self, path: Any, *, default_root: bool = False, write: bool = False, search: bool = False
    ) -> tuple[Path, str] | ToolResult:
        """``path`` resolved in the workspace and its display form, or the error result
        (also when :meth:`Workspace.refusal` refuses it: ``write`` for a tool that
        changes the file, ``search`` for one that reads every file below a folder).

        With ``default_root``, a missing or empty ``path`` means the workspace root.
        """
        ws = self.workspace
        try:
            resolved = ws.resolve(path) if path or not default_root else ws.root
        except WorkspaceError as exc:
            return ToolResult.error(str(exc))
        shown = ws.display(resolved)
        written = path if isinstance(path, str) and path else None
        refused = ws.refusal(resolved, shown, write=write, search=search, written=written)
        if refused is not None:
            return ToolResult.error(refused)
        return resolved, shown

    def locate_existing(
        self, path: Any, missing: str, failed: str | None = None, *, default_root: bool = False, search: bool = False
    ) -> tuple[Path, str, int] | ToolResult:
        """:meth:`locate`, and the file's ``st_mode``; ``missing`` (a format string with
        ``{shown}``) is the error when it does not exist, ``failed`` (also with
        ``{error}``) when it cannot be looked at (default: ``missing``)."""
        located = self.locate(path, default_root=default_root, search=search)
        if isinstance(located, ToolResult):
            return located
        resolved, shown = located
        try:
            mode = os.stat(resolved).st_mode
        except OSError as exc:
            text = missing if failed is None or isinstance(exc, FileNotFoundError) else failed
            return ToolResult.error(text.format(shown=shown, error=exc.strerror or exc))
        return resolved, shown, mode
