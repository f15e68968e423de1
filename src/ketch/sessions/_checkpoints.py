"""File checkpoints: what the agent's file-changing tool calls did, and how to undo it.

:class:`FileCheckpoints` wraps tool execution (its ``middleware`` goes into
``LoopConfig.middlewares``). Before a call that may change files, it saves the current
content of those files as content-addressed blobs (``BlobSink.put_blob``, sha256 hex,
deduplicated; a digest already saved by this instance is not sent again); after the
call it compares, saves the new content too, and hands ``record`` one ``checkpoint``
payload::

    {"tool_call_id": "call_1",
     "files": [{"path": "src/a.py", "before": "<sha256>" | None, "after": "<sha256>" | None,
                "mode": 0o644}],          # "mode" only when "before" is not None
     "skipped": ["big.bin"]}

``files`` lists each file the call created (``before`` None), modified (its content or
its permission bits: a ``chmod`` alone has ``before`` equal to ``after``) or deleted
(``after`` None), as a relative posix path under ``root``; every digest named there can
be fetched with ``get_blob``. ``skipped`` lists files the call changed (or, for an
explicit target, may have changed) whose content could not be saved: above
``max_file_bytes``, unreadable, outside ``root``, or the blob store failed. A call that
changed nothing and skipped nothing records nothing (a failed ``write``, a read-only
``bash`` command).

Which calls are checkpointed, in this order:

1. a call its tool declares read-only (``Tool.is_read_only(args)``): never;
2. a tool with a ``touched_paths(args) -> list[str]`` method (:class:`TouchesFiles`;
   paths relative to ``root`` or absolute): those paths;
3. the built-in ``write`` and ``edit`` tools: their ``path`` argument, resolved as the
   tool resolves it;
4. the built-in ``bash`` tool, unless the command is one the tool itself runs as
   read-only (``is_read_only_command``, which makes the call non-sequential) or the
   workspace is read-only for it (sandboxed with ``write_allowed()`` False): the whole
   workspace is snapshotted before the call (every regular file's modification time,
   size, inode and content digest, outside the ``ignore`` directory names) and compared
   after it. Digests are cached by (path, mtime_ns, size, inode), so later snapshots
   read only files that changed; a file modified within the last two seconds is always
   read again (a file system's clock is coarse: two writes in one tick can leave the
   same modification time). A sandboxed command can write only its workspace, so when
   the bash tool's workspace is a folder below ``root`` (a subagent's git worktree in
   ``.ketch/worktrees/NAME``) only that folder is snapshotted, and when it is ``root``
   and the sandbox keeps ``.ketch`` read-only, ``.ketch/worktrees`` is left out.

Other tools are not checkpointed. A checkpoint problem never fails the tool call: it
is logged as a warning (logger ``ketch.sessions``) and the call runs anyway, with the
files it could not protect in ``skipped``. The payload is recorded after the call
ends (also when it fails or is cancelled); the blobs are saved before it starts (a
process killed during the call leaves the blobs but no payload: that call cannot be
rewound). The first ``bash`` snapshot saves every file of the workspace once (measured:
about 1.5 s for 5,000 files, 114 MB); later ones only read what changed since (about
40 ms for the same 5,000 files).

:func:`restore_files` undoes checkpoints; see there.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hashlib
import logging
import os
import secrets
import stat as _stat
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import NamedTuple
from typing import Protocol
from typing import runtime_checkable

import msgspec

from ketch._paths import expand_pattern
from ketch._paths import within
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolResult

if TYPE_CHECKING:
    from ketch.tools import BashTool
    from ketch.tools import EditTool
    from ketch.tools import WriteTool


log = logging.getLogger("ketch.sessions")

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
DEFAULT_IGNORE: tuple[str, ...] = (".git", "node_modules", "__pycache__", ".venv")
_RACY_NS = 2_000_000_000  # modified this recently: do not trust a cached digest
_KEEP_BYTES = 32 * 1024 * 1024  # content kept from a scan for put_blob, at most
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class BlobSink(Protocol):
    """Where checkpoint content goes: a session's blob storage.

    ``put_blob`` stores ``data`` and returns its sha256 hex digest (storing the same
    content twice keeps one copy); ``get_blob`` returns the content of a digest.
    """

    async def put_blob(self, data: bytes) -> str:
        """Store ``data``; return its sha256 hex digest."""
        ...

    async def get_blob(self, digest: str) -> bytes:
        """The content stored under ``digest``."""
        ...


@runtime_checkable
class TouchesFiles(Protocol):
    """A tool that says which files a call may change, so that it is checkpointed.

    ``touched_paths(args)`` returns paths relative to the checkpoint root (or absolute
    paths inside it); they are saved before the call and compared after it.
    """

    def touched_paths(self, args: dict[str, Any]) -> list[str]:
        """The files the call with ``args`` may create, change or delete."""
        ...


class RewindReport(msgspec.Struct, kw_only=True):
    """What :func:`restore_files` did, each list sorted, paths relative to the root.

    ``restored``: files written back to their earlier content; ``deleted``: files the
    agent had created, removed; ``conflicts``: files changed outside the agent since
    its last change (or whose path now leads through a symlink or out of the root), left
    untouched; ``skipped``: files the agent changed whose earlier content was never
    saved (too big, unreadable, outside the root) or cannot be fetched, left untouched
    (``"."``: a ``bash`` call whose changes could not be tracked at all).
    """

    restored: list[str] = msgspec.field(default_factory=list)
    deleted: list[str] = msgspec.field(default_factory=list)
    conflicts: list[str] = msgspec.field(default_factory=list)
    skipped: list[str] = msgspec.field(default_factory=list)


class _Entry(NamedTuple):
    """One regular file as a scan saw it; ``digest`` None: content not saved."""

    mtime_ns: int
    size: int
    ino: int
    mode: int
    digest: str | None


class _Scan(NamedTuple):
    entries: dict[str, _Entry]
    new: dict[str, bytes | str]  # digest -> content, or the path to read it again from
    failed: bool  # the scan itself could not run (the whole workspace is unprotected)


class _Tree(NamedTuple):
    """A ``bash`` call's snapshot: every file under ``scope`` (relative, "" for the root)
    but those under the relative folders ``skip``."""

    scope: str
    skip: frozenset[str]


WORKTREES = ".ketch/worktrees"  # ketch.worktrees.WORKTREES_DIR (sessions does not import it)

Plan = list[str] | _Tree | None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_regular(path: str | int, *, dir_fd: int | None = None) -> tuple[bytes, os.stat_result]:
    """Read a regular file without following a symlink or blocking on a FIFO."""
    fd = os.open(path, _OPEN_FLAGS, dir_fd=dir_fd) if isinstance(path, str) else path
    try:
        st = os.fstat(fd)
        if not _stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


@functools.cache
def _builtin_tools() -> tuple[tuple[type[WriteTool], type[EditTool]], type[BashTool]]:
    """The built-in tool classes (imported on first use: ``ketch.tools`` loads them lazily)."""
    from ketch.tools import BashTool
    from ketch.tools import EditTool
    from ketch.tools import WriteTool

    return (WriteTool, EditTool), BashTool


class FileCheckpoints:
    """Checkpoints of the files under ``root`` that tool calls change (module docstring).

    ``blobs`` stores the content; ``record(payload)`` is awaited with each ``checkpoint``
    payload. Files above ``max_file_bytes`` are not saved (they are listed in
    ``skipped``); directories named in ``ignore`` are left out of ``bash`` snapshots.
    ``hidden`` (absolute paths or patterns, the bash sandbox's: files that may hold keys)
    are never read or saved: a ``bash`` snapshot leaves them out (the sandbox keeps
    commands from them) and a named file among them is ``skipped``.
    Put :attr:`middleware` into ``LoopConfig.middlewares`` (last, so that it sees the
    arguments the tool runs with).
    """

    __slots__ = ("_cache", "_known", "_lock", "blobs", "hidden", "ignore", "max_file_bytes", "record", "root")

    def __init__(
        self,
        root: Path,
        blobs: BlobSink,
        *,
        record: Callable[[dict[str, Any]], Awaitable[None]],
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        ignore: Sequence[str] = DEFAULT_IGNORE,
        hidden: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        self.root = Path(os.path.realpath(os.fspath(root)))
        self.blobs = blobs
        self.record = record
        self.max_file_bytes = max_file_bytes
        self.ignore = frozenset(ignore)
        self.hidden = tuple(os.fspath(p) for p in hidden)
        self._cache: dict[str, tuple[int, int, int, str]] = {}  # path -> (mtime_ns, size, ino, digest)
        self._known: set[str] = set()  # digests this instance has saved
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"FileCheckpoints(root={str(self.root)!r})"

    # -- the middleware ---------------------------------------------------------------------
    async def middleware(
        self, call: ToolCallInfo, next: Callable[[dict[str, Any]], Awaitable[ToolResult]]
    ) -> ToolResult:
        """A ``ketch.loop`` middleware: checkpoint the call around ``next(call.args)``."""
        try:
            plan, outside = self._plan(call.tool, call.args)
        except Exception as exc:
            log.warning("checkpoint: cannot tell which files %s may change: %s", call.tool.name, exc)
            return await next(call.args)
        if plan is None:
            return await next(call.args)
        before: _Scan | None = None
        try:
            async with self._lock:
                before = await self._scan(plan, before=True)
        except Exception as exc:
            log.warning("checkpoint: saving files before %s failed: %s", call.tool_call.id, exc)
        try:
            return await next(call.args)
        finally:
            await self._after(call.tool_call.id, plan, outside, before)

    async def _after(self, call_id: str, plan: list[str] | _Tree, outside: list[str], before: _Scan | None) -> None:
        try:
            async with self._lock:
                after = await self._scan(plan, before=False)
            if before is None or before.failed or after.failed:
                files: list[dict[str, Any]] = []
                skipped = [plan.scope or "."] if isinstance(plan, _Tree) else sorted(plan)
            else:
                files, skipped = _compare(before.entries, after.entries)
            skipped = sorted(set(skipped) | set(outside))
            if not files and not skipped:
                return
            await self.record({"tool_call_id": call_id, "files": files, "skipped": skipped})
        except Exception as exc:
            log.warning("checkpoint: recording %s failed: %s", call_id, exc)

    def _plan(self, tool: Tool, args: dict[str, Any]) -> tuple[Plan, list[str]]:
        """Which files the call may change: a list of paths, the whole workspace, or None;
        and the paths it names outside the root (never saved)."""
        if tool.is_read_only(args):
            return None, []
        named: list[str] | None = None
        file_tools, bash_tool = _builtin_tools()
        if isinstance(tool, TouchesFiles):
            named = [os.path.join(self.root, p) for p in tool.touched_paths(args)]
        elif isinstance(tool, file_tools):
            try:
                named = [os.fspath(tool.workspace.resolve(args.get("path", "")))]
            except Exception:  # the tool refuses the path too: nothing to protect
                return None, []
        elif isinstance(tool, bash_tool):
            if not tool.is_sequential(args):  # the bash tool's own read-only classification
                return None, []
            if tool.sandboxed and not tool.write_allowed():
                return None, []
            return self._tree(tool), []
        if named is None:
            return None, []
        inside: list[str] = []
        outside: list[str] = []
        hidden = self._hidden_now()
        for path in named:
            rel = self._relative(path)
            if rel is None or any(within(os.path.realpath(path), h) for h in hidden):
                outside.append(path if rel is None else rel)
            else:
                inside.append(rel)
        return (inside if inside or outside else None), outside

    def _tree(self, tool: BashTool) -> _Tree:
        """What a ``bash`` call may change under the root: all of it, unless the command
        runs sandboxed, where only its workspace is writable: then that folder when it is
        below the root (a worktree's), and never the worktrees when it is the root and
        the sandbox keeps ``.ketch`` read-only."""
        if not tool.sandboxed:
            return _Tree("", frozenset())
        rel = self._relative(os.fspath(tool.workspace.root))
        if rel is not None:
            return _Tree(rel, frozenset())
        if os.path.realpath(tool.workspace.root) == os.fspath(self.root) and ".ketch" in tool.protected:
            return _Tree("", frozenset({WORKTREES}))
        return _Tree("", frozenset())

    def _hidden_now(self) -> list[str]:
        """The real paths ``hidden`` names now."""
        return [os.path.realpath(p) for pattern in self.hidden for p in expand_pattern(pattern)]

    def _relative(self, path: str) -> str | None:
        real = os.path.realpath(path)
        root = os.fspath(self.root)
        if not real.startswith(root.rstrip(os.sep) + os.sep):
            return None
        return Path(os.path.relpath(real, root)).as_posix()

    # -- scanning ---------------------------------------------------------------------------
    async def _scan(self, plan: list[str] | _Tree, *, before: bool) -> _Scan:
        """Stat (and read what changed of) the planned files, and save new content.

        Content that cannot be saved makes the entries holding it unsaved (digest None)
        ``before`` the call; after it, the digest is kept (it only serves to notice later
        changes) and the failure is logged.
        """
        scan = await asyncio.to_thread(self._scan_sync, plan, self._known)
        entries = scan.entries
        for digest, content in scan.new.items():
            try:
                if isinstance(content, str):
                    data = await asyncio.to_thread(self._reread, content, digest)
                    if data is None:
                        raise OSError(f"{content} changed while it was being saved")
                else:
                    data = content
                stored = await self.blobs.put_blob(data)
                if stored != digest:
                    raise ValueError(f"the blob store answered digest {stored!r}, not sha256 {digest}")
                self._known.add(digest)
            except Exception as exc:
                log.warning("checkpoint: cannot save content %s: %s", digest[:12], exc)
                if not before:
                    continue
                for rel, entry in list(entries.items()):
                    if entry.digest == digest:
                        entries[rel] = entry._replace(digest=None)
                        self._cache.pop(rel, None)
        return scan

    def _reread(self, rel: str, digest: str) -> bytes | None:
        data, _ = _read_regular(os.path.join(self.root, rel))
        return data if _sha256(data) == digest else None

    def _scan_sync(self, plan: list[str] | _Tree, known: set[str]) -> _Scan:
        entries: dict[str, _Entry] = {}
        new: dict[str, bytes | str] = {}
        kept = 0
        now = time.time_ns()
        try:
            listing = self._walk(plan) if isinstance(plan, _Tree) else self._stat_paths(plan)
            for rel, st in listing:
                if st is None:  # not a regular file (a folder, a socket): nothing to save
                    entries[rel] = _Entry(0, 0, 0, 0, None)
                    continue
                key = (st.st_mtime_ns, st.st_size, st.st_ino)
                mode = _stat.S_IMODE(st.st_mode)
                cached = self._cache.get(rel)
                if cached is not None and cached[:3] == key:
                    entries[rel] = _Entry(*key, mode, cached[3])
                    continue
                self._cache.pop(rel, None)
                if st.st_size > self.max_file_bytes:
                    entries[rel] = _Entry(*key, mode, None)
                    continue
                try:
                    data, st = _read_regular(os.path.join(self.root, rel))
                except OSError as exc:  # reported in ``skipped`` if the call changes it
                    log.debug("checkpoint: cannot read %s: %s", rel, exc)
                    entries[rel] = _Entry(*key, mode, None)
                    continue
                key = (st.st_mtime_ns, st.st_size, st.st_ino)
                digest = _sha256(data)
                entries[rel] = _Entry(*key, _stat.S_IMODE(st.st_mode), digest)
                if st.st_mtime_ns < now - _RACY_NS:
                    self._cache[rel] = (*key, digest)
                if digest not in known and digest not in new:
                    if kept + len(data) <= _KEEP_BYTES:
                        new[digest] = data
                        kept += len(data)
                    else:
                        new[digest] = rel
        except Exception as exc:
            log.warning("checkpoint: cannot scan %s: %s", self.root, exc)
            return _Scan({}, {}, True)
        if isinstance(plan, _Tree):
            under = plan.scope + "/" if plan.scope else ""
            for rel in [r for r in self._cache if r not in entries and r.startswith(under)]:
                del self._cache[rel]
        return _Scan(entries, new, False)

    def _stat_paths(self, rels: list[str]) -> Iterable[tuple[str, os.stat_result | None]]:
        for rel in rels:
            try:
                st = os.lstat(os.path.join(self.root, rel))
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("checkpoint: cannot stat %s: %s", rel, exc)
                yield rel, None
                continue
            yield rel, (st if _stat.S_ISREG(st.st_mode) else None)

    def _walk(self, tree: _Tree) -> Iterable[tuple[str, os.stat_result | None]]:
        ignore = self.ignore
        hidden = self._hidden_now()
        skip = tree.skip
        stack = [tree.scope]
        while stack:
            prefix = stack.pop()
            try:
                with os.scandir(os.path.join(self.root, prefix) if prefix else self.root) as it:
                    items = list(it)
            except OSError as exc:
                if prefix != tree.scope:
                    log.warning("checkpoint: cannot list %s: %s", prefix, exc)
                    continue
                raise
            for item in items:
                rel = f"{prefix}/{item.name}" if prefix else item.name
                if hidden and any(within(item.path, h) for h in hidden):
                    continue
                try:
                    if item.is_dir(follow_symlinks=False):
                        if item.name not in ignore and rel not in skip:
                            stack.append(rel)
                    elif item.is_file(follow_symlinks=False):
                        yield rel, item.stat(follow_symlinks=False)
                except OSError:  # vanished while listed
                    continue


def _compare(before: dict[str, _Entry], after: dict[str, _Entry]) -> tuple[list[dict[str, Any]], list[str]]:
    files: list[dict[str, Any]] = []
    skipped: list[str] = []
    for rel in sorted(before.keys() | after.keys()):
        b = before.get(rel)
        a = after.get(rel)
        if b is not None and a is not None:
            if b.digest is not None and b.digest == a.digest and b.mode == a.mode:
                continue
            if (b.digest is None or a.digest is None) and b[:3] == a[:3]:
                continue  # content not known on one side, and the file looks untouched
        if (b is not None and b.digest is None) or (a is not None and a.digest is None):
            skipped.append(rel)
            continue
        change: dict[str, Any] = {
            "path": rel,
            "before": b.digest if b is not None else None,
            "after": a.digest if a is not None else None,
        }
        if b is not None:
            change["mode"] = b.mode
        files.append(change)
    return files, skipped


# -- rewind ---------------------------------------------------------------------------------

_OTHER = "\x00other"  # the current file is not a regular file, or cannot be read


class _Unsafe(Exception):
    """The path leads through a symlink or a non-folder, or out of the root."""


def _parts(path: Any) -> list[str] | None:
    if not isinstance(path, str) or not path or "\x00" in path or path.startswith("/"):
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def _open_parent(root: str, parts: list[str], *, create: bool) -> int:
    """A descriptor of the folder holding ``parts[-1]``, walked without following any
    symlink; folders are created when ``create``. Raises :class:`_Unsafe` or
    ``FileNotFoundError`` (a missing folder, not ``create``)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o777, dir_fd=fd)
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _Unsafe(name) from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _current(root: str, parts: list[str]) -> tuple[str | None, int | None]:
    """The sha256 of the file now (None: absent; ``_OTHER``: not a regular file) and its mode."""
    try:
        fd = _open_parent(root, parts, create=False)
    except FileNotFoundError:
        return None, None
    try:
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None, None
        if not _stat.S_ISREG(st.st_mode):
            return _OTHER, None
        data, st = _read_regular(parts[-1], dir_fd=fd)
        return _sha256(data), _stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def _delete(root: str, parts: list[str]) -> None:
    fd = _open_parent(root, parts, create=False)
    try:
        os.unlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def _write(root: str, parts: list[str], data: bytes, mode: int | None) -> None:
    """Replace the file atomically (a temporary file in the same folder, then rename)."""
    fd = _open_parent(root, parts, create=True)
    try:
        tmp = f".{parts[-1][:100]}.ketch-rewind-{secrets.token_hex(4)}"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666, dir_fd=fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
                if mode is not None:
                    os.fchmod(out, mode)
            finally:
                os.close(out)
            os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


async def restore_files(root: Path, checkpoints: Sequence[dict[str, Any]], blobs: BlobSink) -> RewindReport:
    """Undo the file changes of ``checkpoints`` (``checkpoint`` payloads, oldest first).

    Each file they name goes back to its earliest ``before`` content (deleted when that
    is None), byte for byte and with the mode it had, but only while its current content
    is still the latest ``after`` the checkpoints recorded for it: a file changed outside
    the agent since then is left untouched and listed in ``conflicts``. A file already
    at its earlier content and mode is left alone and not listed. Paths are relative posix paths
    under ``root``; one that leads out of it (``..``, absolute, or through a symlink) is
    never written and is listed in ``conflicts``. A file that any of the checkpoints
    lists in ``skipped`` (or whose content cannot be fetched from ``blobs``) is left as
    it is and listed in ``skipped``. Files are replaced atomically (a temporary file in
    the same folder renamed over it); folders created for the agent's files are kept.
    Nothing raises for a bad payload or a file-system error: it is logged and reported.
    """
    base = await asyncio.to_thread(os.path.realpath, os.fspath(root))
    earliest: dict[str, tuple[str | None, int | None]] = {}
    latest: dict[str, str | None] = {}
    not_saved: set[str] = set()
    for payload in checkpoints:
        files = payload.get("files") if isinstance(payload, dict) else None
        skipped = payload.get("skipped") if isinstance(payload, dict) else None
        if not isinstance(files, list) or not isinstance(skipped, list):
            log.warning("rewind: ignoring a malformed checkpoint payload")
            continue
        not_saved.update(s for s in skipped if isinstance(s, str))
        for change in files:
            path = change.get("path") if isinstance(change, dict) else None
            before = change.get("before") if isinstance(change, dict) else None
            after = change.get("after") if isinstance(change, dict) else None
            mode = change.get("mode") if isinstance(change, dict) else None
            if not isinstance(path, str) or not isinstance(before, str | None) or not isinstance(after, str | None):
                log.warning("rewind: ignoring a malformed checkpoint file record %r", change)
                continue
            earliest.setdefault(path, (before, mode if isinstance(mode, int) and not isinstance(mode, bool) else None))
            latest[path] = after
    report = RewindReport()
    report.skipped.extend(not_saved)
    for path in sorted(earliest):
        if path in not_saved:
            continue
        target, mode = earliest[path]
        parts = _parts(path)
        if parts is None:
            report.conflicts.append(path)
            continue
        try:
            current, current_mode = await asyncio.to_thread(_current, base, parts)
            if current == target and (target is None or mode is None or current_mode == mode):
                continue
            if current != latest[path]:
                report.conflicts.append(path)
                continue
            if target is None:
                await asyncio.to_thread(_delete, base, parts)
                report.deleted.append(path)
                continue
            try:
                data = await blobs.get_blob(target)
            except Exception as exc:
                log.warning("rewind: cannot fetch the content of %s: %s", path, exc)
                report.skipped.append(path)
                continue
            if _sha256(data) != target:
                log.warning("rewind: the stored content of %s does not match its digest", path)
                report.skipped.append(path)
                continue
            await asyncio.to_thread(_write, base, parts, data, (mode if mode is not None else current_mode))
            report.restored.append(path)
        except _Unsafe:
            report.conflicts.append(path)
        except OSError as exc:
            log.warning("rewind: cannot restore %s: %s", path, exc)
            report.skipped.append(path)
    for field in (report.restored, report.deleted, report.conflicts, report.skipped):
        field.sort()
    return report
