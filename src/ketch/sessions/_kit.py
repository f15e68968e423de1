"""The conformance kit for session stores (public as ``ketch.sessions.conformance``).

Each check is a coroutine function taking a store factory and raising
:class:`AssertionError` with a message that names what was wrong. The factory returns a
store over the storage under test (a store or an awaitable of one); every call must give
a store over the *same* storage, because some checks use a second instance to see what
the first wrote. Checks do not need an empty store: each works in its own working
directory. If a store has a ``close()`` method (plain or async), the kit calls it when a
check is done with the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
import uuid
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from typing import Protocol
from typing import TypeVar
from typing import runtime_checkable

from ketch import AssistantMessage
from ketch import TextContent
from ketch import ThinkingContent
from ketch import ToolCall
from ketch import ToolResultMessage
from ketch import Usage
from ketch import UserMessage
from ketch import message_to_dict

from ..llm import exception_text
from ._entries import Entry
from ._entries import SessionInfo
from ._entries import SessionLockedError
from ._entries import SessionNotFoundError
from ._store import SessionStore
from ._store import SessionWriter

StoreFactory = Callable[[], "SessionStore | Awaitable[SessionStore]"]
"""Returns a store over the storage under test (a store, or an awaitable of one)."""

_E = TypeVar("_E", bound=BaseException)


@dataclass(frozen=True)
class Check:
    """One named conformance check: ``await check(make_store)``."""

    name: str
    run: Callable[[StoreFactory], Coroutine[Any, Any, None]]

    @property
    def doc(self) -> str:
        """What the check verifies (the first line of its docstring)."""
        return (inspect.getdoc(self.run) or "").split("\n")[0]

    async def __call__(self, make_store: StoreFactory) -> None:
        """Run the check; AssertionError on a failure."""
        await self.run(make_store)


async def check_store(make_store: StoreFactory) -> None:
    """Run every check in :data:`CHECKS`; one AssertionError lists all that failed."""
    failures: list[str] = []
    for check in CHECKS:
        try:
            await check(make_store)
        except AssertionError as exc:
            failures.append(f"{check.name}: {exc}")
        except Exception as exc:
            failures.append(f"{check.name}: raised {exception_text(exc)}")
    if failures:
        raise AssertionError(
            f"{len(failures)} of {len(CHECKS)} session store checks failed:\n" + "\n".join(f"- {f}" for f in failures)
        )


# ---- plumbing ----


class _Env:
    """Stores and writers of one check, closed when it ends; a working directory of its own."""

    def __init__(self, make_store: StoreFactory) -> None:
        self._make = make_store
        self._stores: list[SessionStore] = []
        self._writers: list[SessionWriter] = []
        self.cwd = f"/ketch-conformance/{uuid.uuid4().hex}"
        self.clock = time.time() + 100_000.0

    async def store(self) -> SessionStore:
        made = self._make()
        store: SessionStore = await made if inspect.isawaitable(made) else made
        self._stores.append(store)
        return store

    def track(self, writer: SessionWriter) -> SessionWriter:
        self._writers.append(writer)
        return writer

    async def create(self, store: SessionStore, cwd: str | None = None) -> SessionWriter:
        return self.track(await store.create(cwd=self.cwd if cwd is None else cwd))

    def tick(self) -> float:
        """Increasing timestamps ahead of the clock, so `updated` is known exactly."""
        self.clock += 1.0
        return self.clock

    async def close(self) -> None:
        for writer in self._writers:
            await writer.close()
        for store in self._stores:
            if isinstance(store, _Closes):
                result = store.close()
                if inspect.isawaitable(result):
                    await result


@runtime_checkable
class _Closes(Protocol):
    """A store with a ``close`` (not part of :class:`SessionStore`; sync or async, as
    :class:`SqliteStore`'s is sync): the kit closes the stores it made with it."""

    def close(self) -> object:
        """Release the store's resources (the result is awaited when awaitable)."""
        ...


@asynccontextmanager
async def _env(make_store: StoreFactory) -> AsyncIterator[_Env]:
    env = _Env(make_store)
    try:
        yield env
    finally:
        await env.close()


def _entry(parent: SessionWriter | Entry | None, type: str, payload: dict[str, Any], timestamp: float) -> Entry:
    if isinstance(parent, Entry):
        parent_id: str | None = parent.id
    elif parent is None:
        parent_id = None
    else:
        parent_id = parent.entries[-1].id
    return Entry(id=uuid.uuid4().hex, parent_id=parent_id, timestamp=timestamp, type=type, payload=payload)


async def _add(env: _Env, writer: SessionWriter, type: str, payload: dict[str, Any]) -> Entry:
    entry = _entry(writer, type, payload, env.tick())
    await writer.append(entry)
    return entry


def _user(text: str) -> dict[str, Any]:
    return {"message": message_to_dict(UserMessage(content=[TextContent(text=text)], timestamp=1.5))}


async def _add_users(env: _Env, writer: SessionWriter, label: str, count: int) -> None:
    """Append ``count`` user messages, ``"<label> 0"`` onwards, one after another."""
    for i in range(count):
        await _add(env, writer, "message", _user(f"{label} {i}"))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "…"


def _equal(actual: object, expected: object, what: str) -> None:
    if actual == expected:
        return
    if isinstance(actual, list) and isinstance(expected, list):
        index = next((i for i, (a, e) in enumerate(zip(actual, expected, strict=False)) if a != e), min(len(actual), len(expected)))
        got = _short(actual[index]) if index < len(actual) else "nothing"
        want = _short(expected[index]) if index < len(expected) else "nothing"
        raise AssertionError(
            f"{what}: got {len(actual)} items, expected {len(expected)}; first difference at index {index}: "
            f"expected {want}, got {got}"
        )
    raise AssertionError(f"{what}: expected {_short(expected)}, got {_short(actual)}")


def _true(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


async def _raises(kind: type[_E], call: Awaitable[object], what: str) -> _E:
    try:
        result = await call
    except kind as exc:
        return exc
    except Exception as exc:
        raise AssertionError(f"{what}: expected {kind.__name__}, got {exception_text(exc)}") from exc
    raise AssertionError(f"{what}: expected {kind.__name__}, got a result: {result!r}")


def _ids(entries: list[Entry]) -> list[str]:
    return [e.id for e in entries]


def _every_entry_type() -> list[tuple[str, dict[str, Any]]]:
    usage = Usage(input=1200, output=340, cache_read=1000, total_tokens=1540)
    assistant = AssistantMessage(
        content=[
            ThinkingContent(thinking="Let me look.", signature="sig=="),
            TextContent(text="Reading it now.\nLine two with \"quotes\", \\ and \u2028."),
            ToolCall(id="call_1", name="read", args={"path": "src/a.py", "limit": 20}),
        ],
        provider="openai",
        model="gpt-x",
        usage=usage,
        stop_reason="tool_use",
        timestamp=2.25,
    )
    result = ToolResultMessage(
        tool_call_id="call_1", tool_name="read", content=[TextContent(text="print('hi')\n")], timestamp=3.0
    )
    return [
        ("message", _user("Fix the bug in parser.py \N{PARTY POPPER}")),
        ("message", {"message": message_to_dict(assistant)}),
        ("message", {"message": message_to_dict(result)}),
        ("message", {"message": {"role": "note", "text": "a custom message", "timestamp": 4.0}}),
        ("message", {"message": message_to_dict(UserMessage(content="Summary so far", timestamp=5.0)), "detached": True}),
        ("compaction", {"message_ids": ["a", "b"], "reason": "threshold", "tokens_before": 120000, "tokens_after": 9000}),
        ("model_change", {"model": "anthropic:claude-x"}),
        ("thinking_change", {"level": "high"}),
        ("permission_mode_change", {"mode": "accept_edits"}),
        (
            "checkpoint",
            {
                "tool_call_id": "call_2",
                "files": [{"path": "src/a.py", "before": "ab" * 32, "after": None}],
                "skipped": ["big.bin"],
            },
        ),
        (
            "run_summary",
            {
                "end_reason": "stop",
                "usage": {"input": 1200, "output": 340, "cost": {"total": 0.0125}},
                "cost": 0.0125,
                "duration": 2.5,
                "turns": 3,
            },
        ),
        ("run_state", {"state": {"version": 1, "pending": [{"id": "call_3", "args": {}}], "nested": [[1, 2.5, None]]}}),
        ("rewind", {"to": "a", "message_ids": ["a"]}),
        ("x-unknown-kind", {"anything": [True, False, None, 2**53, -0.5, "\x00\t\r\n", {}], "": ""}),
    ]


# ---- the checks ----


async def round_trip(make_store: StoreFactory) -> None:
    """Every entry type comes back from load exactly as appended."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        _equal(len(writer.entries), 1, "entries of a new session")
        head = writer.entries[0]
        _equal(head.type, "session", "type of the first entry")
        _equal(head.parent_id, None, "parent_id of the first entry")
        _equal(head.payload, {"cwd": env.cwd, "version": 1, "forked_from": None}, "payload of the session entry")
        for kind, payload in _every_entry_type():
            await _add(env, writer, kind, payload)
        expected = list(writer.entries)
        _equal(len(expected), 15, "entries after the appends")
        _equal(await store.load(writer.id), expected, "load while the writer is open")
        await writer.close()
        _equal(await store.load(writer.id), expected, "load after close")
        other = await env.store()
        _equal(await other.load(writer.id), expected, "load from a second store instance")


async def ordering(make_store: StoreFactory) -> None:
    """Appends load in the order they were made, also when started concurrently on one writer."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        await _add_users(env, writer, "message", 300)
        batch = [_entry(writer, "message", _user(f"concurrent {i}"), env.tick()) for i in range(50)]
        await asyncio.gather(*(writer.append(e) for e in batch))
        loaded = await store.load(writer.id)
        _equal(len(loaded), 351, "entries loaded")
        _equal(loaded, writer.entries, "loaded entries against writer.entries")
        _equal([e.payload for e in loaded[1:301]], [_user(f"message {i}") for i in range(300)], "sequential order")
        _equal(sorted(_ids(loaded[301:])), sorted(_ids(batch)), "the concurrent appends")


async def concurrent_sessions(make_store: StoreFactory) -> None:
    """Many tasks appending to different sessions at once: each session holds exactly its own entries."""
    async with _env(make_store) as env:
        store = await env.store()
        writers = [env.track(w) for w in await asyncio.gather(*(store.create(cwd=env.cwd) for _ in range(20)))]
        _equal(len({w.id for w in writers}), 20, "distinct session ids")

        async def fill(writer: SessionWriter, n: int) -> None:
            for i in range(25):
                await writer.append(_entry(writer, "message", _user(f"session {n} entry {i}"), env.tick()))
                await asyncio.sleep(0)

        await asyncio.gather(*(fill(w, n) for n, w in enumerate(writers)))
        for n, writer in enumerate(writers):
            loaded = await store.load(writer.id)
            _equal(loaded, writer.entries, f"entries of session {n}")
            _equal(
                [e.payload for e in loaded[1:]], [_user(f"session {n} entry {i}") for i in range(25)], f"session {n}"
            )


async def reopen(make_store: StoreFactory) -> None:
    """A closed session reopens (also from another store instance) with every entry, and takes more."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        await _add_users(env, writer, "first", 5)
        await writer.close()
        expected = list(writer.entries)
        second = await env.store()
        again = env.track(await second.open(writer.id))
        _equal(again.id, writer.id, "id of the reopened writer")
        _equal(again.entries, expected, "entries of the reopened writer")
        more = await _add(env, again, "message", _user("after reopening"))
        _equal(more.parent_id, expected[-1].id, "parent of the new entry")
        await again.close()
        third = await env.store()
        _equal(await third.load(writer.id), [*expected, more], "entries after reopening")


async def one_writer(make_store: StoreFactory) -> None:
    """A second open of an open session raises SessionLockedError naming it; after close it opens."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        exc = await _raises(SessionLockedError, store.open(writer.id), "open of an open session")
        _true(writer.id in str(exc), f"the lock error names the session: {exc}")
        other = await env.store()
        await _raises(SessionLockedError, other.open(writer.id), "open from a second store instance")
        await _raises(SessionLockedError, store.delete(writer.id), "delete of an open session")
        await _add(env, writer, "message", _user("still the writer"))
        await writer.close()
        await writer.close()
        again = env.track(await other.open(writer.id))
        _equal(again.entries, writer.entries, "entries after the lock was released")
        await _raises(SessionLockedError, store.open(writer.id), "open while the second writer holds it")
        await again.close()


async def closed_writer(make_store: StoreFactory) -> None:
    """A closed writer refuses appends with RuntimeError and stores nothing."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        await writer.close()
        await _raises(RuntimeError, writer.append(_entry(writer, "message", _user("late"), env.tick())), "append after close")
        _equal(len(await store.load(writer.id)), 1, "entries after a refused append")


async def info_fields(make_store: StoreFactory) -> None:
    """info(): cwd, created, updated, title (first user text, one line, 80 chars), message_count, cost, forked_from."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        head = writer.entries[0]
        expected = SessionInfo(
            id=writer.id,
            cwd=env.cwd,
            created=head.timestamp,
            updated=head.timestamp,
            title="",
            message_count=0,
            cost=0.0,
            forked_from=None,
        )
        _equal(await store.info(writer.id), expected, "info of a new session")
        await _add(env, writer, "message", {"message": message_to_dict(AssistantMessage(content=[TextContent(text="hi")]))})
        long_text = "  Fix the\n\tbug in   parser.py " + "x" * 100
        await _add(env, writer, "message", _user(long_text))
        await _add(env, writer, "message", _user("a later prompt"))
        await _add(env, writer, "message", {**_user("a summary"), "detached": True})
        await _add(env, writer, "run_summary", {"end_reason": "stop", "usage": {}, "cost": 0.25, "duration": 1.0, "turns": 1})
        await _add(env, writer, "model_change", {"model": "openai:gpt-x"})
        last = await _add(env, writer, "run_summary", {"end_reason": "stop", "usage": {}, "cost": 0.5, "duration": 1.0, "turns": 2})
        title = ("Fix the bug in parser.py " + "x" * 100)[:80]
        expected = SessionInfo(
            id=writer.id,
            cwd=env.cwd,
            created=head.timestamp,
            updated=last.timestamp,
            title=title,
            message_count=3,
            cost=0.75,
            forked_from=None,
        )
        _equal(await store.info(writer.id), expected, "info while the writer is open")
        page = await store.list(cwd=env.cwd)
        _equal(page.sessions, [expected], "list of the session's directory")
        await writer.close()
        other = await env.store()
        _equal(await other.info(writer.id), expected, "info from a second store instance after close")


async def paging(make_store: StoreFactory) -> None:
    """list(): newest `updated` first, pages by limit and cursor with no duplicates or misses."""
    async with _env(make_store) as env:
        store = await env.store()
        writers = [await env.create(store) for _ in range(7)]
        tie = env.tick() + 50.0
        for n, writer in enumerate(writers):
            stamp = tie if n >= 5 else env.tick()
            await writer.append(_entry(writer, "message", _user(f"session {n}"), stamp))
            await writer.close()
        expected = sorted(
            [await store.info(w.id) for w in writers], key=lambda i: (i.updated, i.id), reverse=True
        )
        _equal([i.id for i in expected[2:]], [w.id for w in reversed(writers[:5])], "test setup order")

        everything = await store.list(cwd=env.cwd, limit=100)
        _equal(everything.sessions, expected, "one page of the whole directory")
        _equal(everything.next_cursor, None, "next_cursor of a complete page")
        exact = await store.list(cwd=env.cwd, limit=7)
        _equal(exact.next_cursor, None, "next_cursor when the page holds exactly the rest")
        _equal(len(exact.sessions), 7, "sessions in a page of exactly 7")

        seen: list[SessionInfo] = []
        cursor: str | None = None
        sizes: list[int] = []
        while True:
            page = await store.list(cwd=env.cwd, limit=3, cursor=cursor)
            sizes.append(len(page.sessions))
            seen += page.sessions
            cursor = page.next_cursor
            if cursor is None or len(sizes) > 10:
                break
        _equal(sizes, [3, 3, 1], "page sizes with limit 3")
        _equal(seen, expected, "sessions read page by page")

        ours = {w.id for w in writers}
        global_ids: list[str] = []
        cursor = None
        for _ in range(100_000):
            page = await store.list(limit=4, cursor=cursor)
            global_ids += [i.id for i in page.sessions]
            cursor = page.next_cursor
            if cursor is None:
                break
        _equal(len(global_ids), len(set(global_ids)), "duplicates in the listing of every directory")
        _equal([i for i in global_ids if i in ours], [i.id for i in expected], "this directory's sessions in the full listing")

        await _raises(ValueError, store.list(limit=0), "list(limit=0)")
        await _raises(ValueError, store.list(cursor="garbage"), "list(cursor='garbage')")
        empty = await store.list(cwd=f"{env.cwd}-nothing-here")
        _equal((empty.sessions, empty.next_cursor), ([], None), "list of a directory without sessions")


async def latest(make_store: StoreFactory) -> None:
    """latest(cwd) is the directory's most recently updated session, None without sessions."""
    async with _env(make_store) as env:
        store = await env.store()
        _equal(await store.latest(env.cwd), None, "latest of a directory without sessions")
        first = await env.create(store)
        second = await env.create(store)
        elsewhere = await env.create(store, cwd=env.cwd + "-other")
        await _add(env, second, "message", _user("second"))
        await _add(env, first, "message", _user("first, touched last"))
        await _add(env, elsewhere, "message", _user("another directory"))
        found = await store.latest(env.cwd)
        _equal(None if found is None else found.id, first.id, "latest session")
        _equal(found, await store.info(first.id), "latest against info")


async def fork_isolation(make_store: StoreFactory) -> None:
    """fork() copies the entries up to the given one and the blobs; later appends to either stay apart."""
    async with _env(make_store) as env:
        store = await env.store()
        parent = await env.create(store)
        await _add_users(env, parent, "parent", 5)
        digest = await parent.put_blob(b"file content before the edit")
        at = parent.entries[3]
        info = await store.fork(parent.id, at.id)
        _true(info.id != parent.id, "the fork has a new id")
        _equal(info.forked_from, (parent.id, at.id), "forked_from of the fork")
        _equal((info.cwd, info.title, info.message_count), (env.cwd, "parent 0", 3), "fork's cwd, title and count")
        forked = await store.load(info.id)
        _equal(forked[0].type, "session", "type of the fork's first entry")
        _equal(
            forked[0].payload,
            {"cwd": env.cwd, "version": 1, "forked_from": {"session_id": parent.id, "entry_id": at.id}},
            "the fork's session entry",
        )
        _equal(forked[1:], parent.entries[1:4], "entries copied into the fork")
        _equal(await store.get_blob(info.id, digest), b"file content before the edit", "blob read from the fork")

        later = await _add(env, parent, "message", _user("parent after the fork"))
        _equal(await store.load(info.id), forked, "the fork after an append to the parent")
        child = env.track(await store.open(info.id))
        _equal(child.entries, forked, "entries of the fork's writer")
        mine = await _add(env, child, "message", _user("only in the fork"))
        other = await child.put_blob(b"only in the fork")
        _equal(await store.load(parent.id), parent.entries, "the parent after an append to the fork")
        _true(mine.id not in _ids(await store.load(parent.id)), "the fork's entry is not in the parent")
        _true(later.id not in _ids(await store.load(child.id)), "the parent's later entry is not in the fork")
        await _raises(LookupError, store.get_blob(parent.id, other), "the fork's blob read from the parent")
        await child.close()

        grandchild = await store.fork(info.id, mine.id)
        _equal(grandchild.forked_from, (info.id, mine.id), "forked_from of a fork of a fork")
        _equal((await store.load(grandchild.id))[1:], [*forked[1:], mine], "entries of a fork of a fork")

        await parent.close()
        await store.delete(parent.id)
        _equal(await store.get_blob(info.id, digest), b"file content before the edit", "fork's blob after deleting the parent")
        await _raises(ValueError, store.fork(info.id, "no-such-entry"), "fork at an unknown entry")


async def delete(make_store: StoreFactory) -> None:
    """delete() removes the session, its entries and blobs from every read."""
    async with _env(make_store) as env:
        store = await env.store()
        keep = await env.create(store)
        doomed = await env.create(store)
        digest = await doomed.put_blob(b"bytes")
        await _add(env, doomed, "message", _user("to be deleted"))
        await doomed.close()
        await store.delete(doomed.id)
        await _raises(SessionNotFoundError, store.load(doomed.id), "load of a deleted session")
        await _raises(SessionNotFoundError, store.info(doomed.id), "info of a deleted session")
        await _raises(SessionNotFoundError, store.open(doomed.id), "open of a deleted session")
        await _raises(SessionNotFoundError, store.get_blob(doomed.id, digest), "blob of a deleted session")
        await _raises(SessionNotFoundError, store.delete(doomed.id), "delete of a deleted session")
        _equal([i.id for i in (await store.list(cwd=env.cwd)).sessions], [keep.id], "list after delete")
        latest = await store.latest(env.cwd)
        _equal(None if latest is None else latest.id, keep.id, "latest after delete")
        _equal(len(await store.load(keep.id)), 1, "the other session")


async def not_found(make_store: StoreFactory) -> None:
    """Unknown session ids raise SessionNotFoundError (a LookupError) naming the id."""
    async with _env(make_store) as env:
        store = await env.store()
        missing = uuid.uuid4().hex
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("load", lambda: store.load(missing)),
            ("info", lambda: store.info(missing)),
            ("open", lambda: store.open(missing)),
            ("delete", lambda: store.delete(missing)),
            ("fork", lambda: store.fork(missing, "x")),
            ("get_blob", lambda: store.get_blob(missing, "0" * 64)),
        ]
        for name, call in calls:
            exc = await _raises(SessionNotFoundError, call(), f"{name} of an unknown session")
            _true(missing in str(exc), f"{name}: the error names the session: {exc}")
            _true(isinstance(exc, LookupError), f"{name}: SessionNotFoundError is a LookupError")
        await _raises(SessionNotFoundError, store.load("../../etc/passwd"), "load of a path-like id")


async def blobs(make_store: StoreFactory) -> None:
    """put_blob() returns the sha256 hex digest, stores the same bytes once, and get_blob() returns them."""
    async with _env(make_store) as env:
        store = await env.store()
        writer = await env.create(store)
        big = bytes(range(256)) * 4096
        cases = [b"hello", b"", big, b"\x00\xff" * 10]
        digests = [await writer.put_blob(data) for data in cases]
        _equal(digests, [hashlib.sha256(d).hexdigest() for d in cases], "digests")
        _equal(await writer.put_blob(b"hello"), digests[0], "digest of the same bytes again")
        for data, digest in zip(cases, digests, strict=True):
            _equal(await writer.get_blob(digest), data, f"writer.get_blob({digest[:12]}…)")
            _equal(await store.get_blob(writer.id, digest), data, f"store.get_blob({digest[:12]}…)")
        missing = hashlib.sha256(b"never stored").hexdigest()
        exc = await _raises(LookupError, store.get_blob(writer.id, missing), "get_blob of an unknown digest")
        _true(not isinstance(exc, SessionNotFoundError), f"an unknown blob is not an unknown session: {exc}")
        await writer.close()
        other = await env.store()
        _equal(await other.get_blob(writer.id, digests[2]), big, "a blob from a second store instance after close")


CHECKS: tuple[Check, ...] = tuple(
    Check(fn.__name__, fn)
    for fn in (
        round_trip,
        ordering,
        concurrent_sessions,
        reopen,
        one_writer,
        closed_writer,
        info_fields,
        paging,
        latest,
        fork_isolation,
        delete,
        not_found,
        blobs,
    )
)
"""Every check, in order; parametrize a test over it (``ids=lambda c: c.name``)."""
