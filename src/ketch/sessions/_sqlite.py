"""SqliteStore: every session in one SQLite database (stdlib ``sqlite3``, WAL mode).

Tables: ``sessions`` (one row per session with its summary), ``entries`` (session id,
sequence number, the entry's JSON), ``blobs`` (content by sha256, stored once for the
whole database) and ``session_blobs`` (which session holds which blob). Each append is
one short transaction: the entry row and the session's summary together.

The write lock of a session is an ``flock`` on ``<database>.locks/<id>.lock``, as in
:class:`JsonlStore`: the kernel drops it when the writer's process dies, so a crash
never leaves a session locked. SQLite calls run on the event loop's thread: they are
short (an append is one small transaction), and ``busy_timeout`` bounds the wait for
another process's transaction.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from ._entries import (
    Entry,
    SessionInfo,
    SessionNotFoundError,
    SessionPage,
    Summary,
    check_limit,
    decode_cursor,
    encode_cursor,
    encode_entry,
    index_of,
    normal_cwd,
    session_payload,
)
from ._lockfile import FileLock

__all__ = ["SqliteStore"]

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
) WITHOUT ROWID;
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
    another connection's write. The connection opens on first use; :meth:`close` closes it.
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        fsync: Literal["never", "always"] = "never",
        busy_timeout: float = 30.0,
    ) -> None:
        if fsync not in ("never", "always"):
            raise ValueError(f"Invalid fsync policy {fsync!r}: use 'never' or 'always'")
        if path is None:
            from ._store import default_sessions_dir

            path = default_sessions_dir() / "sessions.db"
        self.path = Path(path)
        self.fsync = fsync
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r}, fsync={self.fsync!r})"

    def close(self) -> None:
        """Close the database connection (it reopens on next use). Writers still open
        are not closed: close them first."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ---- connection and locks ----

    def _db(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {'FULL' if self.fsync == 'always' else 'NORMAL'}")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except BaseException:
                conn.close()
                raise
            try:
                os.chmod(self.path, 0o600)
            except OSError:
                pass
            self._conn = conn
        return conn

    def _lock(self, session_id: str) -> FileLock:
        locks = self.path.with_name(self.path.name + ".locks")
        locks.mkdir(mode=0o700, exist_ok=True)
        return FileLock(locks / f"{session_id}.lock", session_id)

    def _check_id(self, session_id: str) -> None:
        if not isinstance(session_id, str) or _SESSION_ID.fullmatch(session_id) is None:
            raise SessionNotFoundError(session_id)

    def _exists(self, conn: sqlite3.Connection, session_id: str) -> bool:
        return conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None

    # ---- the protocol ----

    async def create(self, *, cwd: str) -> _SqliteWriter:
        """Start a session for ``cwd``; returns its writer (holding the lock)."""
        cwd = normal_cwd(cwd)
        conn = self._db()
        session_id = uuid.uuid4().hex
        lock = self._lock(session_id)
        lock.acquire()
        try:
            entry = Entry(
                id=uuid.uuid4().hex, parent_id=None, timestamp=time.time(), type="session", payload=session_payload(cwd)
            )
            summary = Summary()
            summary.add(entry)
            _write(conn, "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(session_id, summary), [
                ("INSERT INTO entries VALUES (?, ?, ?)", (session_id, 0, encode_entry(entry)))
            ])
        except BaseException:
            lock.release(unlink=True)
            raise
        return _SqliteWriter(self, conn, session_id, lock, [entry], summary)

    async def open(self, session_id: str) -> _SqliteWriter:
        """Open ``session_id`` for appending (takes its lock)."""
        self._check_id(session_id)
        conn = self._db()
        if not self._exists(conn, session_id):
            raise SessionNotFoundError(session_id)
        lock = self._lock(session_id)
        lock.acquire()
        try:
            entries = self._entries(conn, session_id)
        except BaseException:
            lock.release()
            raise
        summary = Summary()
        for entry in entries:
            summary.add(entry)
        return _SqliteWriter(self, conn, session_id, lock, entries, summary)

    def _entries(self, conn: sqlite3.Connection, session_id: str) -> builtins.list[Entry]:
        rows = conn.execute("SELECT data FROM entries WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
        if not rows:
            raise SessionNotFoundError(session_id)
        decode = _entry_decoder.decode
        return [decode(row[0]) for row in rows]

    async def load(self, session_id: str) -> builtins.list[Entry]:
        """Every entry of the session, in order."""
        self._check_id(session_id)
        return self._entries(self._db(), session_id)

    async def info(self, session_id: str) -> SessionInfo:
        """The session's summary."""
        self._check_id(session_id)
        row = self._db().execute(f"SELECT {_INFO_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return _info_of(row)

    async def latest(self, cwd: str) -> SessionInfo | None:
        """The most recently updated session of ``cwd``, or None."""
        page = await self.list(cwd=cwd, limit=1)
        return page.sessions[0] if page.sessions else None

    async def fork(self, session_id: str, at_entry_id: str) -> SessionInfo:
        """A new session with the entries up to ``at_entry_id``; blobs are shared."""
        entries = await self.load(session_id)
        index = index_of(entries, at_entry_id, session_id)
        first = entries[0]
        cwd = first.payload.get("cwd") if first.type == "session" else None
        head = Entry(
            id=first.id,
            parent_id=None,
            timestamp=time.time(),
            type="session",
            payload=session_payload(cwd if isinstance(cwd, str) else "", (session_id, at_entry_id)),
        )
        copied = [head, *entries[1 : index + 1]]
        summary = Summary()
        for entry in copied:
            summary.add(entry)
        new_id = uuid.uuid4().hex
        conn = self._db()
        _write(conn, "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(new_id, summary), [
            ("INSERT INTO session_blobs SELECT ?, digest FROM session_blobs WHERE session_id = ?", (new_id, session_id)),
            *[
                ("INSERT INTO entries VALUES (?, ?, ?)", (new_id, seq, encode_entry(entry)))
                for seq, entry in enumerate(copied)
            ],
        ])
        return summary.info(new_id)

    async def delete(self, session_id: str) -> None:
        """Remove the session and its blobs (SessionLockedError while it is open)."""
        self._check_id(session_id)
        conn = self._db()
        if not self._exists(conn, session_id):
            raise SessionNotFoundError(session_id)
        lock = self._lock(session_id)
        lock.acquire()
        try:
            _write(conn, "DELETE FROM sessions WHERE id = ?", (session_id,), [
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
            ])
        finally:
            lock.release(unlink=True)

    async def get_blob(self, session_id: str, digest: str) -> bytes:
        """A blob of the session."""
        self._check_id(session_id)
        return _get_blob(self._db(), session_id, digest)

    async def list(self, *, cwd: str | None = None, limit: int = 50, cursor: str | None = None) -> SessionPage:
        """A page of sessions, newest ``updated`` first."""
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
        rows = self._db().execute(sql, (*args, limit + 1)).fetchall()
        page = [_info_of(row) for row in rows[:limit]]
        return SessionPage(sessions=page, next_cursor=encode_cursor(page[-1]) if len(rows) > limit else None)


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


def _write(
    conn: sqlite3.Connection, sql: str, args: tuple[Any, ...], more: Sequence[tuple[str, tuple[Any, ...]]] = ()
) -> None:
    """Run statements in one write transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(sql, args)
        for statement, values in more:
            conn.execute(statement, values)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


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


class _SqliteWriter:
    """The writer of one SQLite session (holds its lock until :meth:`close`)."""

    def __init__(
        self,
        store: SqliteStore,
        conn: sqlite3.Connection,
        session_id: str,
        lock: FileLock,
        entries: builtins.list[Entry],
        summary: Summary,
    ) -> None:
        self.id = session_id
        self.entries = entries
        self._store = store
        self._conn: sqlite3.Connection | None = conn
        self._lock = lock
        self._summary = summary
        self._seq = len(entries)
        seq = conn.execute("SELECT max(seq) FROM entries WHERE session_id = ?", (session_id,)).fetchone()[0]
        if seq is not None:
            self._seq = seq + 1

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"<SqliteStore writer {self.id} {state}, {len(self.entries)} entries>"

    def _check_open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"Session {self.id}: the writer is closed; open the session again to append")
        if self._store._conn is not self._conn:
            raise RuntimeError(f"Session {self.id}: the store's connection was closed; open the session again")
        return self._conn

    async def append(self, entry: Entry) -> None:
        """Append ``entry`` and update the session's summary in one transaction."""
        conn = self._check_open()
        data = encode_entry(entry)
        summary = self._summary
        before = (summary.updated, summary.title, summary.message_count, summary.cost)
        summary.add(entry)
        try:
            _write(
                conn,
                "INSERT INTO entries VALUES (?, ?, ?)",
                (self.id, self._seq, data),
                [
                    (
                        "UPDATE sessions SET updated = ?, title = ?, message_count = ?, cost = ? WHERE id = ?",
                        (summary.updated, summary.title, summary.message_count, summary.cost, self.id),
                    )
                ],
            )
        except BaseException:
            summary.updated, summary.title, summary.message_count, summary.cost = before
            raise
        self._seq += 1
        self.entries.append(entry)

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` once under its sha256 hex digest."""
        conn = self._check_open()
        digest = hashlib.sha256(data).hexdigest()
        _write(conn, "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)", (digest, bytes(data)), [
            ("INSERT OR IGNORE INTO session_blobs VALUES (?, ?)", (self.id, digest))
        ])
        return digest

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``."""
        return _get_blob(self._store._db(), self.id, digest)

    async def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._conn is None:
            return
        self._conn = None
        self._lock.release()
