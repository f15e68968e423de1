"""JsonlStore: file layout, torn lines, summaries after a crash, blobs on disk, fsync."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from ketch.sessions import Entry
from ketch.sessions import JsonlStore
from ketch.sessions import SessionLockedError
from ketch.sessions import SessionNotFoundError
from ketch.sessions import SessionWriter
from ketch.sessions import default_sessions_dir
from ketch.sessions import default_store
from ketch.sessions import new_entry


def _message(text: str, role: str = "user") -> dict[str, Any]:
    return {"message": {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1.0}}


async def _add(writer: SessionWriter, kind: str, payload: dict[str, Any]) -> Entry:
    entry = new_entry(kind, payload, parent_id=writer.entries[-1].id)
    await writer.append(entry)
    return entry


def _append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _log_of(root: Path, session_id: str) -> Path:
    [path] = root.glob(f"*/{session_id}.jsonl")
    return path


async def test_one_file_per_session_under_a_directory_per_project(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/home/ann/my project")
    await _add(writer, "message", _message("two\nlines"))
    digest = await writer.put_blob(b"data")
    await writer.close()
    cwd_hash = hashlib.sha256(b"/home/ann/my project").hexdigest()[:10]
    project = tmp_path / f"home-ann-my-project-{cwd_hash}"
    assert sorted(p.name for p in project.iterdir()) == sorted(
        [f"{writer.id}.jsonl", f"{writer.id}.info", f"{writer.id}.lock", f"{writer.id}.blobs"]
    )
    assert [p.name for p in (project / f"{writer.id}.blobs").iterdir()] == [digest]
    lines = (project / f"{writer.id}.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    first = json.loads(lines[0])
    assert list(first) == ["id", "parent_id", "timestamp", "type", "payload"]
    assert first["payload"] == {"cwd": "/home/ann/my project", "version": 1, "forked_from": None}
    assert json.loads(lines[1])["payload"] == _message("two\nlines")
    # Conversations are private: files 0600, directories 0700.
    assert stat.S_IMODE(os.stat(project / f"{writer.id}.jsonl").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(project).st_mode) == 0o700


async def test_a_torn_last_line_is_skipped_with_a_warning_and_cut_off_by_the_next_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    kept = [await _add(writer, "message", _message(f"m{i}")) for i in range(3)]
    await writer.close()
    path = _log_of(tmp_path, writer.id)
    good = path.read_bytes()
    _append_bytes(path, b'{"id":"torn","parent_id":"x","timest')
    with caplog.at_level(logging.WARNING, logger="ketch.sessions"):
        loaded = await store.load(writer.id)
    assert loaded == [writer.entries[0], *kept]
    assert [r.getMessage() for r in caplog.records] == [
        f"Session {writer.id}: skipped a torn last line (36 bytes at offset {len(good)})"
    ]
    assert (await store.info(writer.id)).message_count == 3
    caplog.clear()
    again = await store.open(writer.id)
    assert path.read_bytes() == good  # cut off before anything is appended
    more = await _add(again, "message", _message("after"))
    await again.close()
    caplog.clear()
    assert await store.load(writer.id) == [writer.entries[0], *kept, more]
    assert caplog.records == []


async def test_an_unreadable_line_in_the_middle_is_skipped_and_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    first = await _add(writer, "message", _message("before"))
    await writer.close()
    path = _log_of(tmp_path, writer.id)
    offset = path.stat().st_size
    _append_bytes(path, b"not json\n")
    writer = await store.open(writer.id)
    last = await _add(writer, "message", _message("after"))
    await writer.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ketch.sessions"):
        loaded = await store.load(writer.id)
    assert loaded == [writer.entries[0], first, last]
    assert [r.getMessage() for r in caplog.records] == [
        f"Session {writer.id}: skipped an unreadable line (8 bytes at offset {offset})"
    ]


async def test_listing_is_right_when_the_summary_file_is_stale_missing_or_broken(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    await _add(writer, "message", _message("the title"))
    info_path = _log_of(tmp_path, writer.id).with_suffix(".info")
    stale = info_path.read_bytes()  # written when the title became known
    for i in range(4):
        await _add(writer, "message", _message(f"m{i}"))
    await _add(writer, "run_summary", {"end_reason": "stop", "usage": {}, "cost": 0.5, "duration": 1.0, "turns": 1})
    last = await _add(writer, "message", _message("last"))
    # As after kill -9: the summary file covers only a prefix of the log.
    info_path.write_bytes(stale)
    expected = (6, 0.5, last.timestamp, "the title")
    page = await store.list(cwd="/p")
    assert [(i.message_count, i.cost, i.updated, i.title) for i in page.sessions] == [expected]
    info_path.unlink()
    info = await store.info(writer.id)
    assert (info.message_count, info.cost, info.updated, info.title) == expected
    info_path.write_bytes(b"{broken")
    info = await store.info(writer.id)
    assert (info.message_count, info.cost, info.updated, info.title) == expected
    await writer.close()
    assert json.loads(info_path.read_bytes())["size"] == _log_of(tmp_path, writer.id).stat().st_size


async def test_blobs_are_stored_once_and_written_whole(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    a = await writer.put_blob(b"same bytes")
    b = await writer.put_blob(b"same bytes")
    c = await writer.put_blob(b"other bytes")
    blobs = _log_of(tmp_path, writer.id).with_suffix(".blobs")
    assert a == b and sorted(p.name for p in blobs.iterdir()) == sorted([a, c])  # no temporary files left
    assert (blobs / a).read_bytes() == b"same bytes"
    info = await store.fork(writer.id, writer.entries[0].id)
    forked = _log_of(tmp_path, info.id).with_suffix(".blobs")
    assert os.stat(forked / a).st_ino == os.stat(blobs / a).st_ino  # shared by a hard link
    with pytest.raises(LookupError) as caught:
        await store.get_blob(writer.id, "../../x")
    assert str(caught.value) == f"Blob '../../x' not found in session {writer.id}: digests are sha256 hex"
    await writer.close()


async def test_delete_leaves_no_file_behind(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    keep = await store.create(cwd="/p")
    writer = await store.create(cwd="/p")
    await writer.put_blob(b"x")
    await writer.close()
    await store.delete(writer.id)
    assert sorted(p.name for p in _log_of(tmp_path, keep.id).parent.iterdir()) == sorted(
        [f"{keep.id}.jsonl", f"{keep.id}.info", f"{keep.id}.lock"]
    )
    await keep.close()


async def test_a_second_writer_in_the_same_process_is_refused(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    with pytest.raises(SessionLockedError) as caught:
        await JsonlStore(tmp_path).open(writer.id)
    assert str(caught.value) == (
        f"Session {writer.id} is open in this process (pid {os.getpid()}); close that writer first or fork it"
    )
    assert caught.value.session_id == writer.id and caught.value.pid == os.getpid()
    await writer.close()


async def test_fsync_always_syncs_every_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    writer = await JsonlStore(tmp_path, fsync="always").create(cwd="/p")
    synced.clear()
    for i in range(3):
        await _add(writer, "model_change", {"model": f"m{i}"})
    assert len(synced) == 3
    await writer.close()
    synced.clear()
    writer = await JsonlStore(tmp_path).open(writer.id)
    await _add(writer, "model_change", {"model": "m"})
    assert synced == []
    await writer.close()
    with pytest.raises(ValueError) as caught:
        JsonlStore(tmp_path, fsync="sometimes")  # type: ignore[arg-type]
    assert str(caught.value) == "Invalid fsync policy 'sometimes': use 'never' or 'always'"


async def test_a_lone_surrogate_is_stored_as_a_replacement_character(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    await _add(writer, "message", _message("bad \ud800 text"))
    await writer.close()
    assert (await store.load(writer.id))[1].payload == _message("bad \ufffd text")


def test_the_default_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KETCH_HOME", str(tmp_path / "kh"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_sessions_dir() == tmp_path / "kh" / "sessions"
    assert default_store().root == tmp_path / "kh" / "sessions"
    monkeypatch.delenv("KETCH_HOME")
    assert default_sessions_dir() == tmp_path / "xdg" / "ketch" / "sessions"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_sessions_dir() == tmp_path / "home" / ".local" / "share" / "ketch" / "sessions"
    assert not (tmp_path / "home").exists()  # nothing is created before a session is


async def test_close_while_an_fsync_is_under_way_keeps_the_append(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path, fsync="always")
    writer = await store.create(cwd="/p")
    entry = new_entry("model_change", {"model": "m"}, parent_id=writer.entries[-1].id)
    await asyncio.gather(writer.append(entry), writer.close())
    assert (await store.load(writer.id))[1:] == [entry]


async def test_a_log_without_its_session_entry_yet_is_not_listed(tmp_path: Path) -> None:
    # As while another process creates it, or after a crash cut its first line short.
    store = JsonlStore(tmp_path)
    writer = await store.create(cwd="/p")
    await writer.close()
    half = _log_of(tmp_path, writer.id).with_name("0123abcd.jsonl")
    half.write_bytes(b'{"id":"x","par')
    assert [i.id for i in (await store.list()).sessions] == [writer.id]
    with pytest.raises(SessionNotFoundError):
        await store.info("0123abcd")
