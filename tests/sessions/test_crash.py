"""Reliability with real processes: kill -9 while appending, lock errors across
processes, two processes writing one SQLite database.

The writers run in a helper process (tests/sessions/_crash_child.py) that forks one
writer per kill, so 200 kills take seconds; every kill point comes from a seeded RNG.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ketch
from ketch.sessions import Entry
from ketch.sessions import JsonlStore
from ketch.sessions import SessionStore
from ketch.sessions import SqliteStore

CHILD = Path(__file__).with_name("_crash_child.py")
sys.path.insert(0, str(CHILD.parent))
from _crash_child import entry_id  # noqa: E402
from _crash_child import payload  # noqa: E402


def _env() -> dict[str, str]:
    # The helper imports the same ketch as this test (the sources under test).
    return {**os.environ, "PYTHONPATH": str(Path(ketch.__file__).parents[1])}


def _store(kind: str, root: Path) -> SessionStore:
    return JsonlStore(root) if kind == "jsonl" else SqliteStore(root / "sessions.db")


def _close(store: SessionStore) -> None:
    if isinstance(store, SqliteStore):
        store.close()


def _create_sessions(kind: str, root: Path, count: int) -> list[str]:
    async def create() -> list[str]:
        store = _store(kind, root)
        ids = []
        for _ in range(count):
            writer = await store.create(cwd="/project")
            ids.append(writer.id)
            await writer.close()
        _close(store)
        return ids

    return asyncio.run(create())


def _check_entries(entries: list[Entry], expected: int, session: str) -> None:
    assert entries[0].type == "session"
    assert len(entries) - 1 == expected, (session, len(entries) - 1, expected)
    for n, entry in enumerate(entries[1:]):
        assert entry.id == entry_id(n)
        assert entry.parent_id == entries[n].id
        assert entry.payload == payload(n)


@pytest.fixture
def zygote() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), "zygote"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def _kill_job(zygote: subprocess.Popen[str], job: dict[str, Any]) -> dict[str, Any]:
    assert zygote.stdin is not None and zygote.stdout is not None
    zygote.stdin.write(json.dumps(job) + "\n")
    zygote.stdin.flush()
    answer: dict[str, Any] = json.loads(zygote.stdout.readline())
    return answer


async def _check_after_kill(kind: str, root: Path, session: str, allowed: set[int]) -> int:
    """Load the session: it holds every reported entry, intact; its summary is right."""
    store = _store(kind, root)
    try:
        entries = await store.load(session)
        count = len(entries) - 1
        assert count in allowed, (session, count, allowed)
        _check_entries(entries, count, session)
        info = await store.info(session)
        assert (info.message_count, info.updated) == (count, entries[-1].timestamp)
        return count
    finally:
        _close(store)


@pytest.mark.parametrize(("kind", "kills"), [("jsonl", 200), ("sqlite", 100)])
def test_kill_9_while_appending_loses_at_most_the_entry_being_written(
    kind: str, kills: int, tmp_path: Path, zygote: subprocess.Popen[str]
) -> None:
    rng = random.Random(1414)
    sessions = _create_sessions(kind, tmp_path, 6)
    stored = dict.fromkeys(sessions, 0)  # entries after the session entry, as last loaded
    for kill in range(kills):
        session = sessions[kill % len(sessions)]
        # 0: kill at once (often during start-up or open); else after that many reports.
        kill_after = 0 if rng.random() < 0.1 else rng.randint(1, 25)
        answer = _kill_job(zygote, {"kind": kind, "root": str(tmp_path), "session": session, "kill_after": kill_after})
        assert answer["errors"] == [], (kill, answer)
        before = stored[session]
        if answer["ready"] is None:
            allowed = {before}
        else:
            assert answer["ready"] == before, (kill, answer)
            reported = answer["reported"]
            assert reported == list(range(before, before + len(reported)))
            done = before + len(reported)
            allowed = {done, done + 1}  # the append in flight may or may not have landed

        stored[session] = asyncio.run(_check_after_kill(kind, tmp_path, session, allowed))

    async def listing() -> dict[str, int]:
        store = _store(kind, tmp_path)
        try:
            page = await store.list(cwd="/project", limit=100)
            return {info.id: info.message_count for info in page.sessions}
        finally:
            _close(store)

    assert asyncio.run(listing()) == stored
    assert sum(stored.values()) > kills  # the writers did append
    if kind == "sqlite":
        with sqlite3.connect(tmp_path / "sessions.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_writer_killed_with_its_session_open_leaves_it_unlocked(
    kind: str, tmp_path: Path, zygote: subprocess.Popen[str]
) -> None:
    [session] = _create_sessions(kind, tmp_path, 1)
    answer = _kill_job(zygote, {"kind": kind, "root": str(tmp_path), "session": session, "kill_after": 3})
    assert (answer["ready"], answer["errors"]) == (0, [])

    async def reopen() -> int:
        store = _store(kind, tmp_path)
        writer = await store.open(session)  # no SessionLockedError: the lock died with its holder
        count = len(writer.entries) - 1
        await writer.close()
        _close(store)
        return count

    assert asyncio.run(reopen()) in (len(answer["reported"]), len(answer["reported"]) + 1)


async def _hold(kind: str, root: Path, session: str) -> str:
    """What a second process says when it opens the session."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), "hold", kind, str(root), session, stdout=asyncio.subprocess.PIPE, env=_env()
    )
    out, _ = await proc.communicate()
    return out.decode()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_a_second_process_gets_the_lock_error(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    writer = await store.create(cwd="/project")
    try:
        assert await _hold(kind, tmp_path, writer.id) == (
            f"SessionLockedError: Session {writer.id} is open in another process (pid {os.getpid()}); "
            "close it there or fork it\n"
        )
    finally:
        await writer.close()
    assert await _hold(kind, tmp_path, writer.id) == "opened\n"
    _close(store)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_two_processes_write_two_sessions_of_one_store_at_once(kind: str, tmp_path: Path) -> None:
    sessions = _create_sessions(kind, tmp_path, 2)
    count = 1500
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), "fill", kind, str(tmp_path), session, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for session in sessions
    ]
    for proc in procs:  # both hold their session before either starts
        assert proc.stdout is not None
        assert proc.stdout.readline() == "opened\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert (out, proc.returncode) == ("done\n", 0)

    async def check() -> None:
        store = _store(kind, tmp_path)
        try:
            for session in sessions:
                entries = await store.load(session)
                _check_entries(entries, count, session)
                assert (await store.info(session)).message_count == count
        finally:
            _close(store)

    asyncio.run(check())
    if kind == "sqlite":
        with sqlite3.connect(tmp_path / "sessions.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
