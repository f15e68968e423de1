"""SqliteStore: every session in one SQLite database (stdlib ``sqlite3``, WAL mode).

Tables: ``sessions`` (one row per session with its summary), ``entries`` (session id,
sequence number, the entry's JSON), ``blobs`` (content by sha256, stored once for the
whole database) and ``session_blobs`` (which session holds which blob). Each append is
one short transaction: the entry row and the session's summary together.

The write lock of a session is an ``flock`` on ``<database>.locks/<id>.lock``, as in
:class:`JsonlStore`: the kernel drops it when the writer's process dies, so a crash
never leaves a session locked.

Where the calls run (measured with benchmarks/bench_sessions.py): an append is one small
transaction (~0.1 ms without fsync), less than the cost of handing it to a thread plus
the work, so it runs on the event loop's thread; with ``fsync="always"`` a commit waits
for the disk (~4 ms), so appends and blobs go to a worker thread, one at a time per
writer and in call order. Loading a session (~0.2 s for 10,000 messages) and forking
run in a worker thread on a second, read-only connection, so they do not hold up the
appends. ``busy_timeout`` bounds the wait for another process's transaction.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import TypeVar

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

_T = TypeVar("_T")
_SESSION_ID = re.compile(r"[0-9A-Za-z_-]{1,128}")
_entry_decoder = msgspec.json.Decoder(Entry)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    cwd TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    title TEXT NOT NULL,
    message_count INTEGER NOT NULL,
    cost REAL NOT NULL,
    forked_session TEXT,
    forked_entry TEXT
);
CREATE INDEX IF NOT EXISTS sessions_by_updated ON sessions (updated, id);
CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, updated, id);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS blobs (
    digest TEXT NOT NULL UNIQUE,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS session_blobs (
    session_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (session_id, digest)
) WITHOUT ROWID;
"""

_INFO_COLUMNS = "id, cwd, created, updated, title, message_count, cost, forked_session, forked_entry"


def _info_of(row: tuple[Any, ...]) -> SessionInfo:
    return SessionInfo(
        id=row[0],
        cwd=row[1],
        created=row[2],
        updated=row[3],
        title=row[4],
        message_count=row[5],
        cost=row[6],
        forked_from=None if row[7] is None else (row[7], row[8]),
    )


class SqliteStore:
    """Sessions in one SQLite database at ``path`` (default
    ``default_sessions_dir() / "sessions.db"``), safe for several processes on one machine.

    WAL mode; ``fsync="never"`` is ``synchronous=NORMAL`` (a process crash loses no
    committed append, a power loss may lose the last ones), ``"always"`` is
    ``synchronous=FULL``. ``busy_timeout`` (seconds) is how long a statement waits for
    another connection's write. Connections open on first use; :meth:`close` closes them
    (they reopen if the store is used again).
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        fsync: Literal["never", "always"] = "never",
        busy_timeout: float = 30.0,
    ) -> None:
        check_fsync(fsync)
        if path is None:
            from ._store import default_sessions_dir

            path = default_sessions_dir() / "sessions.db"
        self.path = Path(path)
        self.fsync = fsync
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        # One user of each connection at a time (the loop's thread or a worker thread).
        self._guard = threading.Lock()
        self._reader_guard = threading.Lock()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r}, fsync={self.fsync!r})"

    def close(self) -> None:
        """Close the database connections (they reopen if the store is used again)."""
        with self._guard:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
        with self._reader_guard:
            reader, self._reader = self._reader, None
            if reader is not None:
                reader.close()

    # ---- connections and locks ----

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _db(self) -> sqlite3.Connection:
        """The read-write connection (call with ``_guard`` held)."""
        conn = self._conn
        if conn is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            conn = self._connect()
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {'FULL' if self.fsync == 'always' else 'NORMAL'}")
                _write(conn, [(statement, ()) for statement in _SCHEMA.split(";") if statement.strip()])
            except BaseException:
                conn.close()
                raise
            try:
                os.chmod(self.path, 0o600)
            except OSError:
                pass
            self._conn = conn
        return conn

    def _use(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn`` with the read-write connection."""
        with self._guard:
            return fn(self._db())

    def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn`` with the second, read-only connection (for long reads)."""
        if self._conn is None:
            self._use(lambda conn: None)  # the database and its schema exist
        with self._reader_guard:
            if self._reader is None:
                self._reader = self._connect()
                self._reader.execute("PRAGMA query_only = ON")
            return fn(self._reader)

    def _lock(self, session_id: str) -> FileLock:
        """Take the session's write lock (SessionLockedError if another writer holds it)."""
        locks = self.path.with_name(self.path.name + ".locks")
        locks.mkdir(mode=0o700, exist_ok=True)
        return FileLock(locks / f"{session_id}.lock", session_id).acquire()

    def _check_id(self, session_id: str) -> None:
        if not isinstance(session_id, str) or _SESSION_ID.fullmatch(session_id) is None:
            raise SessionNotFoundError(session_id)

    # ---- the protocol ----

    async def create(self, *, cwd: str) -> SessionWriter:
        """Start a session for ``cwd``: writes its ``session`` entry; returns its writer
        (holding the lock)."""
        return self._create(normal_cwd(cwd))

    def _create(self, cwd: str) -> _SqliteWriter:
        session_id = uuid.uuid4().hex
        self._use(lambda conn: None)
        lock = self._lock(session_id)
        with lock.released_on_error(unlink=True):
            entry = Entry(
                id=uuid.uuid4().hex, parent_id=None, timestamp=time.time(), type="session", payload=session_payload(cwd)
            )
            summary = Summary.over([entry])
            statements = [
                ("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(session_id, summary)),
                ("INSERT INTO entries VALUES (?, ?, ?)", (session_id, 0, encode_entry(entry))),
            ]
            self._use(lambda conn: _write(conn, statements))
        return _SqliteWriter(self, session_id, lock, [entry], summary, 1)

    async def open(self, session_id: str) -> SessionWriter:
        """Open ``session_id`` for appending (takes its lock)."""
        self._check_id(session_id)
        self._info(session_id)  # SessionNotFoundError before a lock file is made
        lock = self._lock(session_id)
        with lock.released_on_error():
            entries, seq = await asyncio.to_thread(self._read, lambda conn: _entries(conn, session_id))
        return _SqliteWriter(self, session_id, lock, entries, Summary.over(entries), seq)

    async def load(self, session_id: str) -> builtins.list[Entry]:
        """Every entry of the session, in order."""
        self._check_id(session_id)
        entries, _ = await asyncio.to_thread(self._read, lambda conn: _entries(conn, session_id))
        return entries

    async def info(self, session_id: str) -> SessionInfo:
        """The session's summary."""
        self._check_id(session_id)
        return self._info(session_id)

    def _info(self, session_id: str) -> SessionInfo:
        row = self._use(
            lambda conn: conn.execute(f"SELECT {_INFO_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        )
        if row is None:
            raise SessionNotFoundError(session_id)
        return _info_of(row)

    async def latest(self, cwd: str) -> SessionInfo | None:
        """The most recently updated session of ``cwd``, or None."""
        page = await self.list(cwd=cwd, limit=1)
        return page.sessions[0] if page.sessions else None

    async def fork(self, session_id: str, at_entry_id: str) -> SessionInfo:
        """A new session with the entries up to and including ``at_entry_id`` (its
        ``session`` entry records ``forked_from``); blobs are shared, not copied."""
        copied = fork_entries(await self.load(session_id), session_id, at_entry_id)
        summary = Summary.over(copied)
        new_id = uuid.uuid4().hex
        statements = [
            ("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(new_id, summary)),
            ("INSERT INTO session_blobs SELECT ?, digest FROM session_blobs WHERE session_id = ?", (new_id, session_id)),
            *[("INSERT INTO entries VALUES (?, ?, ?)", (new_id, seq, encode_entry(e))) for seq, e in enumerate(copied)],
        ]
        await asyncio.to_thread(self._use, lambda conn: _write(conn, statements))
        return summary.info(new_id)

    async def delete(self, session_id: str) -> None:
        """Remove the session and the blobs no other session holds
        (SessionLockedError while it is open)."""
        self._check_id(session_id)
        self._info(session_id)
        lock = self._lock(session_id)
        try:
            gone = self._use(lambda conn: _write(conn, _delete_statements(session_id)))
            if not gone:
                raise SessionNotFoundError(session_id)
        finally:
            lock.release(unlink=True)

    async def get_blob(self, session_id: str, digest: str) -> bytes:
        """A blob of the session."""
        self._check_id(session_id)
        return self._use(lambda conn: _get_blob(conn, session_id, digest))

    async def list(self, *, cwd: str | None = None, limit: int = 50, cursor: str | None = None) -> SessionPage:
        """A page of sessions (of ``cwd`` if given), newest ``updated`` first."""
        check_limit(limit)
        where: builtins.list[str] = []
        args: builtins.list[Any] = []
        if cwd is not None:
            where.append("cwd = ?")
            args.append(normal_cwd(cwd))
        if cursor is not None:
            updated, after = decode_cursor(cursor)
            where.append("(updated < ? OR (updated = ? AND id < ?))")
            args += [updated, updated, after]
        sql = f"SELECT {_INFO_COLUMNS} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated DESC, id DESC LIMIT ?"
        rows = self._use(lambda conn: conn.execute(sql, (*args, limit + 1)).fetchall())
        page = [_info_of(row) for row in rows[:limit]]
        return SessionPage(sessions=page, next_cursor=encode_cursor(page[-1]) if len(rows) > limit else None)


def _entries(conn: sqlite3.Connection, session_id: str) -> tuple[builtins.list[Entry], int]:
    """The session's entries and the next sequence number."""
    rows = conn.execute("SELECT seq, data FROM entries WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
    if not rows:
        raise SessionNotFoundError(session_id)
    decode = _entry_decoder.decode
    return [decode(row[1]) for row in rows], rows[-1][0] + 1


def _delete_statements(session_id: str) -> builtins.list[tuple[str, tuple[Any, ...]]]:
    return [
        ("DELETE FROM sessions WHERE id = ?", (session_id,)),
        ("DELETE FROM entries WHERE session_id = ?", (session_id,)),
        ("CREATE TEMP TABLE IF NOT EXISTS dropped (digest TEXT)", ()),
        ("DELETE FROM temp.dropped", ()),
        ("INSERT INTO temp.dropped SELECT digest FROM session_blobs WHERE session_id = ?", (session_id,)),
        ("DELETE FROM session_blobs WHERE session_id = ?", (session_id,)),
        (
            "DELETE FROM blobs WHERE digest IN (SELECT digest FROM temp.dropped)"
            " AND digest NOT IN (SELECT digest FROM session_blobs)",
            (),
        ),
        ("DELETE FROM temp.dropped", ()),
    ]


def _row(session_id: str, summary: Summary) -> tuple[Any, ...]:
    forked = summary.forked_from
    return (
        session_id,
        summary.cwd,
        summary.created,
        summary.updated,
        summary.title,
        summary.message_count,
        summary.cost,
        None if forked is None else forked[0],
        None if forked is None else forked[1],
    )


def _write(conn: sqlite3.Connection, statements: Sequence[tuple[str, tuple[Any, ...]]]) -> int:
    """Run ``statements`` in one write transaction; the rows the first one changed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        changed = -1
        for statement, values in statements:
            cursor = conn.execute(statement, values)
            if changed < 0:
                changed = cursor.rowcount
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return changed


def _get_blob(conn: sqlite3.Connection, session_id: str, digest: str) -> bytes:
    row = conn.execute(
        "SELECT b.data FROM session_blobs s JOIN blobs b ON b.digest = s.digest WHERE s.session_id = ? AND s.digest = ?",
        (session_id, digest),
    ).fetchone()
    if row is None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise SessionNotFoundError(session_id)
        raise LookupError(f"Blob {digest!r} not found in session {session_id}")
    data: bytes = row[0]
    return data


class _SqliteWriter(LockedWriter):
    """The writer of one SQLite session (holds its lock until :meth:`close`)."""

    store_name = "SqliteStore"

    def __init__(
        self,
        store: SqliteStore,
        session_id: str,
        lock: FileLock,
        entries: builtins.list[Entry],
        summary: Summary,
        seq: int,
    ) -> None:
        super().__init__(session_id, lock, entries, summary)
        self._store = store
        self._seq = seq
        self._in_thread = store.fsync == "always"
        self._order = asyncio.Lock()  # appends sent to a thread commit in call order

    async def append(self, entry: Entry) -> None:
        """Append ``entry`` and update the session's summary in one transaction."""
        self._check_open()
        if self._in_thread:
            async with self._order:
                self._check_open()
                await asyncio.to_thread(self._append, entry)
        else:
            self._append(entry)

    def _append(self, entry: Entry) -> None:
        summary = self._summary
        before = (summary.updated, summary.title, summary.message_count, summary.cost)
        summary.add(entry)
        statements = [
            ("INSERT INTO entries VALUES (?, ?, ?)", (self.id, self._seq, encode_entry(entry))),
            (
                "UPDATE sessions SET updated = ?, title = ?, message_count = ?, cost = ? WHERE id = ?",
                (summary.updated, summary.title, summary.message_count, summary.cost, self.id),
            ),
        ]
        try:
            self._store._use(lambda conn: _write(conn, statements))
        except BaseException:
            summary.updated, summary.title, summary.message_count, summary.cost = before
            raise
        self._seq += 1
        self.entries.append(entry)

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` once under its sha256 hex digest."""
        self._check_open()
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        statements = [
            ("INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)", (digest, data)),
            ("INSERT OR IGNORE INTO session_blobs VALUES (?, ?)", (self.id, digest)),
        ]
        if self._in_thread or len(data) > 1 << 16:
            await asyncio.to_thread(self._store._use, lambda conn: _write(conn, statements))
        else:
            self._store._use(lambda conn: _write(conn, statements))
        return digest

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``."""
        return self._store._use(lambda conn: _get_blob(conn, self.id, digest))

    async def close(self) -> None:
        """Release the lock (idempotent), after the appends under way."""
        async with self._order:
            lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


if TYPE_CHECKING:

    def _implements_the_protocol(store: SqliteStore) -> SessionStore:
        return store
