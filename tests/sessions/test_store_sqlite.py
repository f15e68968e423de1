"""SqliteStore: WAL mode, blobs stored once per database, connection lifetime, locks."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from ketch.sessions import SessionLockedError
from ketch.sessions import SqliteStore
from ketch.sessions import new_entry


def _count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        count: int = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return count


async def test_the_database_is_in_wal_mode_and_made_on_first_use(tmp_path: Path) -> None:
    db = tmp_path / "data" / "sessions.db"
    store = SqliteStore(db)
    assert not db.parent.exists()
    writer = await store.create(cwd="/p")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert sorted(p.name for p in (tmp_path / "data" / "sessions.db.locks").iterdir()) == [f"{writer.id}.lock"]
    await writer.close()
    store.close()


async def test_a_blob_is_stored_once_per_database_and_freed_with_its_last_session(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SqliteStore(db)
    one = await store.create(cwd="/p")
    two = await store.create(cwd="/p")
    digest = await one.put_blob(b"shared content")
    assert await two.put_blob(b"shared content") == digest
    await one.put_blob(b"shared content")
    assert (_count(db, "blobs"), _count(db, "session_blobs")) == (1, 2)
    fork = await store.fork(one.id, one.entries[0].id)
    assert (_count(db, "blobs"), _count(db, "session_blobs")) == (1, 3)
    await one.close()
    await two.close()
    await store.delete(one.id)
    await store.delete(two.id)
    assert await store.get_blob(fork.id, digest) == b"shared content"
    await store.delete(fork.id)
    assert (_count(db, "blobs"), _count(db, "session_blobs"), _count(db, "entries")) == (0, 0, 0)
    store.close()


async def test_closing_the_store_closes_its_connections_and_they_reopen_on_use(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    writer = await store.create(cwd="/p")
    store.close()
    assert len(await store.load(writer.id)) == 1
    await writer.append(new_entry("model_change", {"model": "m"}, parent_id=writer.entries[-1].id))
    store.close()
    with pytest.raises(SessionLockedError):  # the writer holds the lock until it is closed
        await store.open(writer.id)
    await writer.close()
    with pytest.raises(RuntimeError) as caught:
        await writer.append(new_entry("model_change", {"model": "m"}, parent_id=writer.entries[-1].id))
    assert str(caught.value) == f"Session {writer.id}: the writer is closed; open the session again to append"
    assert len(await store.load(writer.id)) == 2
    store.close()


async def test_fsync_always_appends_in_call_order_from_a_worker_thread(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", fsync="always")
    writer = await store.create(cwd="/p")
    batch = [new_entry("model_change", {"model": f"m{i}"}, parent_id=None) for i in range(20)]
    await asyncio.gather(*(writer.append(e) for e in batch))
    assert writer.entries[1:] == batch
    assert await store.load(writer.id) == writer.entries
    await writer.close()
    store.close()


async def test_titles_and_cwds_with_lone_surrogates_are_kept_readable(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    writer = await store.create(cwd="/home/\udcff")
    message = {"role": "user", "content": [{"type": "text", "text": "bad \ud800"}], "timestamp": 1.0}
    await writer.append(new_entry("message", {"message": message}, parent_id=writer.entries[-1].id))
    await writer.close()
    info = await store.info(writer.id)
    assert (info.cwd, info.title) == ("/home/\ufffd", "bad \ufffd")
    assert [i.id for i in (await store.list(cwd="/home/\udcff")).sessions] == [writer.id]
    store.close()


def test_an_invalid_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        SqliteStore(tmp_path / "s.db", fsync="often")  # type: ignore[arg-type]
    assert str(caught.value) == "Invalid fsync policy 'often': use 'never' or 'always'"


async def test_close_waits_for_the_appends_under_way(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", fsync="always")
    writer = await store.create(cwd="/p")
    entries = [new_entry("model_change", {"model": f"m{i}"}, parent_id=None) for i in range(3)]
    await asyncio.gather(*(writer.append(e) for e in entries), writer.close())
    again = await store.open(writer.id)
    assert again.entries[1:] == entries
    await again.close()
    store.close()
