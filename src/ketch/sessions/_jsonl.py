"""JsonlStore: one append-only JSON-lines file per session, under a per-project directory.

Layout under the root (one directory per working directory, named by a readable slug of
it and a short hash)::

    <root>/<slug>-<hash>/<id>.jsonl    the entries, one JSON object per line
    <root>/<slug>-<hash>/<id>.info     summary for listing: {"size": bytes covered, "info": ...}
    <root>/<slug>-<hash>/<id>.lock     flock'ed by the writer, holds its pid
    <root>/<slug>-<hash>/<id>.blobs/   content-addressed blobs, one file per sha256

Each append is one ``write`` of the whole line (so a kill loses at most the line being
written). A line counts once its newline is written: an unterminated last line is
skipped with a warning on load and cut off by the next writer before it appends. The
summary file covers a prefix of the log; a listing that finds the log longer folds in
only the lines after that prefix, so a listing is right after a crash too.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Literal

import msgspec

from ._entries import Entry
from ._entries import SessionInfo
from ._entries import SessionNotFoundError
from ._entries import SessionPage
from ._entries import Summary
from ._entries import check_fsync
from ._entries import check_limit
from ._entries import decode_cursor
from ._entries import encode_cursor
from ._entries import encode_entry
from ._entries import fork_entries
from ._entries import normal_cwd
from ._entries import session_payload
from ._lockfile import FileLock
from ._store import LockedWriter
from ._store import SessionStore
from ._store import SessionWriter
from ._store import default_sessions_dir

log = logging.getLogger("ketch.sessions")

_SESSION_ID = re.compile(r"[0-9A-Za-z_-]{1,128}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_SLUG_CHARS = re.compile(r"[^0-9A-Za-z._]+")
_entry_decoder = msgspec.json.Decoder(Entry)


class _Sidecar(msgspec.Struct, frozen=True):
    size: int
    info: SessionInfo


_sidecar_decoder = msgspec.json.Decoder(_Sidecar)
_sidecar_encoder = msgspec.json.Encoder()


def project_dir_name(cwd: str) -> str:
    """The directory name of a working directory: a readable slug and a short hash."""
    digest = hashlib.sha256(cwd.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    slug = _SLUG_CHARS.sub("-", cwd).strip("-.")[-60:].lstrip("-.") or "root"
    return f"{slug}-{digest}"


def _parse(data: bytes, where: str) -> tuple[list[Entry], int]:
    """The entries of a log and the length of its complete lines."""
    end = data.rfind(b"\n") + 1
    if end < len(data):
        log.warning(
            "%s: skipped a torn last line (%d bytes at offset %d)", where, len(data) - end, end
        )
    if end == 0:
        return [], 0
    body = data if end == len(data) else data[:end]
    try:
        return _entry_decoder.decode_lines(body), end
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    entries: list[Entry] = []
    offset = 0
    for line in body.split(b"\n")[:-1]:
        if line.strip():
            try:
                entries.append(_entry_decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.warning("%s: skipped an unreadable line (%d bytes at offset %d)", where, len(line), offset)
        offset += len(line) + 1
    return entries, end


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_file(path: Path, data: bytes, *, fsync: bool) -> None:
    """Write ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Paths:
    __slots__ = ("blobs", "dir", "info", "lock", "log")

    def __init__(self, directory: Path, session_id: str) -> None:
        self.dir = directory
        self.log = directory / f"{session_id}.jsonl"
        self.info = directory / f"{session_id}.info"
        self.lock = directory / f"{session_id}.lock"
        self.blobs = directory / f"{session_id}.blobs"


class JsonlStore:
    """The default session store: JSON-lines files under ``root`` (default
    :func:`default_sessions_dir`).

    ``fsync="always"`` makes every append (and blob) reach the disk before it returns;
    ``"never"`` (the default) leaves that to the OS: a process crash loses nothing that
    was appended, a power loss may lose the last appends. One writer per session is
    enforced with an ``flock`` on ``<id>.lock``; the kernel releases it if the writer's
    process dies.
    """

    def __init__(self, root: Path | None = None, *, fsync: Literal["never", "always"] = "never") -> None:
        check_fsync(fsync)
        if root is None:
            root = default_sessions_dir()
        self.root = Path(root)
        self.fsync = fsync
        self._dirs: dict[str, Path] = {}

    def __repr__(self) -> str:
        return f"JsonlStore({str(self.root)!r}, fsync={self.fsync!r})"

    # ---- locating sessions ----

    def _project_dir(self, cwd: str) -> Path:
        return self.root / project_dir_name(cwd)

    def _find(self, session_id: str) -> _Paths:
        if not isinstance(session_id, str) or _SESSION_ID.fullmatch(session_id) is None:
            raise SessionNotFoundError(session_id)
        known = self._dirs.get(session_id)
        if known is not None and (known / f"{session_id}.jsonl").exists():
            return _Paths(known, session_id)
        try:
            project_dirs = list(os.scandir(self.root))
        except FileNotFoundError:
            project_dirs = []
        for entry in project_dirs:
            if entry.is_dir() and os.path.exists(os.path.join(entry.path, f"{session_id}.jsonl")):
                directory = Path(entry.path)
                self._dirs[session_id] = directory
                return _Paths(directory, session_id)
        raise SessionNotFoundError(session_id)

    def _mkdir(self, directory: Path) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    # ---- the protocol ----

    async def create(self, *, cwd: str) -> SessionWriter:
        """Start a session for ``cwd``: writes its ``session`` entry; returns its writer
        (holding the lock)."""
        return self._create(cwd=cwd)

    async def open(self, session_id: str) -> SessionWriter:
        """Open ``session_id`` for appending: takes its lock, reads its entries and cuts
        off a torn last line."""
        return await asyncio.to_thread(self._open, session_id)

    async def load(self, session_id: str) -> builtins.list[Entry]:
        """Every entry of the session, in order (a torn last line is skipped with a
        warning)."""
        return await asyncio.to_thread(self._load, session_id)

    async def info(self, session_id: str) -> SessionInfo:
        """The session's summary."""
        return self._info_of(session_id)

    async def latest(self, cwd: str) -> SessionInfo | None:
        """The most recently updated session of ``cwd``, or None."""
        page = await self.list(cwd=cwd, limit=1)
        return page.sessions[0] if page.sessions else None

    async def fork(self, session_id: str, at_entry_id: str) -> SessionInfo:
        """A new session with the entries up to and including ``at_entry_id`` (its
        ``session`` entry records ``forked_from``) and the blobs (hard links)."""
        return await asyncio.to_thread(self._fork, session_id, at_entry_id)

    async def delete(self, session_id: str) -> None:
        """Remove the session and its blobs (SessionLockedError while it is open)."""
        self._delete(session_id)

    async def get_blob(self, session_id: str, digest: str) -> bytes:
        """A blob of the session."""
        return self._get_blob(session_id, digest)

    async def list(self, *, cwd: str | None = None, limit: int = 50, cursor: str | None = None) -> SessionPage:
        """A page of sessions (of ``cwd`` if given), newest ``updated`` first."""
        return await asyncio.to_thread(self._list, cwd=cwd, limit=limit, cursor=cursor)

    # ---- implementations ----

    def _create(self, *, cwd: str) -> _JsonlWriter:
        cwd = normal_cwd(cwd)
        session_id = uuid.uuid4().hex
        paths = _Paths(self._project_dir(cwd), session_id)
        self._mkdir(paths.dir)
        lock = FileLock(paths.lock, session_id).acquire()
        with lock.released_on_error(unlink=True):
            entry = Entry(
                id=uuid.uuid4().hex,
                parent_id=None,
                timestamp=time.time(),
                type="session",
                payload=session_payload(cwd),
            )
            line = encode_entry(entry) + b"\n"
            fd = os.open(paths.log, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, line)
                if self.fsync == "always":
                    os.fsync(fd)
                    _fsync_dir(paths.dir)
            except BaseException:
                os.close(fd)
                paths.log.unlink(missing_ok=True)
                raise
        self._dirs[session_id] = paths.dir
        writer = _JsonlWriter(self, session_id, paths, lock, fd, [entry], Summary.over([entry]), len(line))
        writer._write_sidecar()
        return writer

    def _open(self, session_id: str) -> _JsonlWriter:
        """Open ``session_id`` for appending (takes its lock)."""
        paths = self._find(session_id)
        lock = FileLock(paths.lock, session_id).acquire()
        with lock.released_on_error():
            try:
                fd = os.open(paths.log, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            except FileNotFoundError:
                raise SessionNotFoundError(session_id) from None  # deleted meanwhile
            try:
                with open(fd, "rb", closefd=False) as f:
                    data = f.read()
                entries, end = _parse(data, f"Session {session_id}")
                if end < len(data):
                    os.ftruncate(fd, end)
                    if self.fsync == "always":
                        os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
        writer = _JsonlWriter(self, session_id, paths, lock, fd, entries, Summary.over(entries), end)
        sidecar = self._read_sidecar(paths)
        if sidecar is None or sidecar.size != end:
            writer._write_sidecar()
        return writer

    def _load(self, session_id: str) -> builtins.list[Entry]:
        """Every entry of the session (a torn last line is skipped with a warning)."""
        paths = self._find(session_id)
        try:
            data = paths.log.read_bytes()
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        return _parse(data, f"Session {session_id}")[0]

    def _info_of(self, session_id: str) -> SessionInfo:
        """The session's summary."""
        paths = self._find(session_id)
        info = self._info(paths, session_id)
        if info is None:
            raise SessionNotFoundError(session_id)
        return info

    def _fork(self, session_id: str, at_entry_id: str) -> SessionInfo:
        """A new session with the entries up to ``at_entry_id`` and the blobs."""
        paths = self._find(session_id)
        copied = fork_entries(self._load(session_id), session_id, at_entry_id)
        new_id = uuid.uuid4().hex
        new = _Paths(paths.dir, new_id)
        lock = FileLock(new.lock, new_id).acquire()
        try:
            if paths.blobs.is_dir():
                self._mkdir(new.blobs)
                for blob in os.scandir(paths.blobs):
                    if _DIGEST.fullmatch(blob.name):
                        target = new.blobs / blob.name
                        try:
                            os.link(blob.path, target)
                        except FileExistsError:
                            pass
                        except OSError:
                            shutil.copyfile(blob.path, target)
            data = b"".join(encode_entry(e) + b"\n" for e in copied)
            info = Summary.over(copied).info(new_id)
            _write_file(new.info, _sidecar_encoder.encode(_Sidecar(len(data), info)), fsync=False)
            _write_file(new.log, data, fsync=self.fsync == "always")
            if self.fsync == "always":
                _fsync_dir(new.dir)
        except BaseException:
            new.log.unlink(missing_ok=True)
            new.info.unlink(missing_ok=True)
            shutil.rmtree(new.blobs, ignore_errors=True)
            lock.release(unlink=True)
            raise
        lock.release()
        self._dirs[new_id] = new.dir
        return info

    def _delete(self, session_id: str) -> None:
        """Remove the session and its blobs (SessionLockedError while it is open)."""
        paths = self._find(session_id)
        lock = FileLock(paths.lock, session_id).acquire()
        try:
            try:
                paths.log.unlink()
            except FileNotFoundError:
                raise SessionNotFoundError(session_id) from None
            paths.info.unlink(missing_ok=True)
            shutil.rmtree(paths.blobs, ignore_errors=True)
        finally:
            lock.release(unlink=True)
            self._dirs.pop(session_id, None)

    def _get_blob(self, session_id: str, digest: str) -> bytes:
        """A blob of the session."""
        return _read_blob(self._find(session_id), session_id, digest)

    def _list(self, *, cwd: str | None = None, limit: int = 50, cursor: str | None = None) -> SessionPage:
        """A page of sessions, newest ``updated`` first."""
        check_limit(limit)
        after = decode_cursor(cursor) if cursor is not None else None
        if cwd is not None:
            cwd = normal_cwd(cwd)
            dirs = [self._project_dir(cwd)]
        else:
            try:
                dirs = [Path(e.path) for e in os.scandir(self.root) if e.is_dir()]
            except FileNotFoundError:
                dirs = []
        found: builtins.list[SessionInfo] = []
        for directory in dirs:
            for paths, session_id in self._sessions_in(directory):
                info = self._info(paths, session_id)
                if info is None or (cwd is not None and info.cwd != cwd):
                    continue
                if after is not None and (info.updated, info.id) >= after:
                    continue
                found.append(info)
        found.sort(key=lambda i: (i.updated, i.id), reverse=True)
        page = found[:limit]
        more = len(found) > limit
        return SessionPage(sessions=page, next_cursor=encode_cursor(page[-1]) if more else None)

    # ---- summaries ----

    def _sessions_in(self, directory: Path) -> Iterator[tuple[_Paths, str]]:
        try:
            names = [e.name for e in os.scandir(directory)]
        except (FileNotFoundError, NotADirectoryError):
            return
        for name in names:
            if name.endswith(".jsonl") and not name.startswith("."):
                session_id = name[:-6]
                self._dirs.setdefault(session_id, directory)
                yield _Paths(directory, session_id), session_id

    def _read_sidecar(self, paths: _Paths) -> _Sidecar | None:
        try:
            return _sidecar_decoder.decode(paths.info.read_bytes())
        except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def _info(self, paths: _Paths, session_id: str) -> SessionInfo | None:
        """The summary from the sidecar, with the lines the sidecar does not cover yet
        folded in (the whole log if the sidecar is missing or does not fit)."""
        try:
            size = os.stat(paths.log).st_size
        except FileNotFoundError:
            return None
        sidecar = self._read_sidecar(paths)
        if sidecar is not None and sidecar.size == size:
            return sidecar.info
        start = 0
        summary = Summary()
        if sidecar is not None and sidecar.size < size:
            start = sidecar.size
            summary = Summary.of(sidecar.info)
        try:
            with open(paths.log, "rb") as f:
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return None
        end = data.rfind(b"\n") + 1
        for line in data[:end].split(b"\n")[:-1]:
            try:
                summary.add(_entry_decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
        if not summary.cwd:
            return None  # no `session` entry yet: being created (or its creation was cut short)
        return summary.info(session_id)


def _read_blob(paths: _Paths, session_id: str, digest: str) -> bytes:
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise LookupError(f"Blob {digest!r} not found in session {session_id}: digests are sha256 hex")
    try:
        return (paths.blobs / digest).read_bytes()
    except FileNotFoundError:
        if not paths.log.exists():
            raise SessionNotFoundError(session_id) from None
        raise LookupError(f"Blob {digest} not found in session {session_id}") from None


class _JsonlWriter(LockedWriter):
    """The writer of one JSONL session (holds its lock until :meth:`close`)."""

    store_name = "JsonlStore"

    def __init__(
        self,
        store: JsonlStore,
        session_id: str,
        paths: _Paths,
        lock: FileLock,
        fd: int,
        entries: builtins.list[Entry],
        summary: Summary,
        size: int,
    ) -> None:
        super().__init__(session_id, lock, entries, summary)
        self._store = store
        self._paths = paths
        self._fd = fd  # closed with the lock: use it only after _check_open()
        self._size = size
        self._fsync = store.fsync == "always"

    async def append(self, entry: Entry) -> None:
        """Append ``entry``: one write of its line (and an fsync with ``fsync="always"``)."""
        self._check_open()
        fd = self._fd
        line = encode_entry(entry) + b"\n"
        try:
            _write_all(fd, line)
        except BaseException:
            # Never leave a partial line that later appends would follow.
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            raise
        # Recorded before any await, so that writer.entries is in file order even when
        # appends run concurrently.
        self._size += len(line)
        self.entries.append(entry)
        if self._summary.add(entry):
            self._write_sidecar()
        if self._fsync:
            # On a duplicate that the thread closes: close() may close fd meanwhile.
            await asyncio.to_thread(_fsync_and_close, os.dup(fd))

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` once under its sha256 hex digest."""
        self._check_open()
        digest = hashlib.sha256(data).hexdigest()
        path = self._paths.blobs / digest
        if not path.exists():
            self._store._mkdir(self._paths.blobs)
            if self._fsync or len(data) > 1 << 16:
                await asyncio.to_thread(_write_file, path, bytes(data), fsync=self._fsync)
            else:
                _write_file(path, bytes(data), fsync=False)
        return digest

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``."""
        return _read_blob(self._paths, self.id, digest)

    async def close(self) -> None:
        """Write the summary and release the lock (idempotent)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            self._write_sidecar()
        finally:
            os.close(self._fd)
            lock.release()

    def _write_sidecar(self) -> None:
        sidecar = _Sidecar(self._size, self._summary.info(self.id))
        try:
            _write_file(self._paths.info, _sidecar_encoder.encode(sidecar), fsync=False)
        except OSError as exc:  # a listing rebuilds it from the log
            log.warning("Session %s: could not write its summary file: %s", self.id, exc)


if TYPE_CHECKING:

    def _implements_the_protocol(store: JsonlStore) -> SessionStore:
        return store


def default_store() -> JsonlStore:
    """A :class:`JsonlStore` at :func:`default_sessions_dir` (nothing is created until
    the first session is)."""
    return JsonlStore(default_sessions_dir())
