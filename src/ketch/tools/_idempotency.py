"""Exactly-once side effects for the built-in file tools under a durable runner.

A runner that may execute the same call again (``ketch.temporal`` retries an activity
whose worker died, or whose result was lost, after the write) sets
``ToolContext.idempotency_key``: unique per call within a run, the same for every
attempt of that call. The ``write`` and ``edit`` tools then keep a record per key in the
*journal*:

1. before they change the file, an *intent*: the file, the sha256 of the content it
   will have and the result the call will give;
2. once the file changed, the result (*done*).

A call whose key has a *done* record returns that result and changes nothing. A call
whose key has only an *intent* (the attempt before it died between the write and the
record) checks the file: holding the intended content, it returns the intended result;
otherwise it runs again. Without a record it runs. A failed call records nothing.

The journal is where the records live (:class:`Journal`): by default a folder of small
files, ``$KETCH_IDEMPOTENCY_DIR`` or ``<tmp>/ketch-idempotency`` (:class:`DirJournal`).
Every worker that may retry a call must see the same journal: a folder on a file system
they share, or :class:`StoreJournal` over a :class:`~ketch.sessions.SessionStore` they
share (:func:`use_journal`; ``build_worker(journal=...)``). :func:`journal_warning` says
when the journal is on this machine only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import Literal
from typing import NamedTuple
from typing import Protocol

import msgspec

from ..loop import ToolContext
from ..loop import ToolResult
from ._workspace import Workspace
from ._workspace import WorkspaceTool

log = logging.getLogger("ketch.tools")

JOURNAL_ENV = "KETCH_IDEMPOTENCY_DIR"
"""The environment variable naming the journal's folder."""


class Journal(Protocol):
    """Where the file tools keep their records by idempotency key (bytes per key)."""

    async def get(self, key: str) -> bytes | None:
        """The record kept under ``key``, or None."""
        ...

    async def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key`` (replacing what was there)."""
        ...


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _replace(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class DirJournal:
    """A journal in a folder: one small file per key (named by the key's sha256),
    replaced atomically."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    async def get(self, key: str) -> bytes | None:
        """The record kept under ``key``, or None (small files: read inline)."""
        return _read(self.path / (_digest(key) + ".json"))

    async def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key`` (small files: written inline)."""
        _replace(self.path / (_digest(key) + ".json"), data)

    def __repr__(self) -> str:
        return f"DirJournal({str(self.path)!r})"


_STORE_CWD = "ketch-journal:"
_STORE_ENTRY = "ketch.idempotency"


class StoreJournal:
    """A journal in a :class:`~ketch.sessions.SessionStore`: a record is a small session
    of its own (working directory ``ketch-journal:<sha256 of the key>``), so every
    worker that shares the store shares the journal. Give it a store of its own: the
    records are listed among its sessions."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def get(self, key: str) -> bytes | None:
        """The record kept under ``key``, or None."""
        info = await self.store.latest(_STORE_CWD + _digest(key))
        if info is None:
            return None
        for entry in reversed(await self.store.load(info.id)):
            if entry.type == _STORE_ENTRY:
                return msgspec.json.encode(entry.payload["record"])
        return None

    async def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key``."""
        writer = await self.store.create(cwd=_STORE_CWD + _digest(key))
        try:
            head = writer.entries[-1]  # the session entry: its class is the store's Entry
            entry = type(head)(
                id=os.urandom(16).hex(), parent_id=head.id, timestamp=time.time(), type=_STORE_ENTRY,
                payload={"record": msgspec.json.decode(data)},
            )
            await writer.append(entry)
        finally:
            await writer.close()

    def __repr__(self) -> str:
        return f"StoreJournal({self.store!r})"


def journal_dir() -> Path:
    """The default journal's folder: ``$KETCH_IDEMPOTENCY_DIR``, else ``<tmp>/ketch-idempotency``."""
    return Path(os.environ.get(JOURNAL_ENV) or Path(tempfile.gettempdir()) / "ketch-idempotency")


_journal: Journal | None = None


def use_journal(journal: Journal | None) -> None:
    """Make ``journal`` the journal of the file tools in this process (None: the default
    :class:`DirJournal` at :func:`journal_dir`)."""
    global _journal
    _journal = journal


def current_journal() -> Journal:
    """The journal the file tools use now."""
    return _journal if _journal is not None else DirJournal(journal_dir())


def journal_warning() -> str | None:
    """Why the journal may not be seen by other workers (one line), or None: the default
    folder in this machine's temp folder is; a folder named by ``$KETCH_IDEMPOTENCY_DIR``
    or a journal given to :func:`use_journal` is taken to be shared."""
    if _journal is not None or os.environ.get(JOURNAL_ENV):
        return None
    return (
        f"the write and edit tools keep their exactly-once records in {journal_dir()}, on this machine only: "
        f"a call retried on another machine would run again; set {JOURNAL_ENV} to a folder every worker "
        "shares, or give build_worker(journal=StoreJournal(store)) a session store they share"
    )


class _Record(msgspec.Struct, kw_only=True):
    state: Literal["intent", "done"]
    result: ToolResult
    path: str | None = None
    sha256: str | None = None


def _decode(data: bytes | None) -> _Record | None:
    if data is None:
        return None
    try:
        return msgspec.json.decode(data, type=_Record)
    except msgspec.ValidationError:
        try:  # a record written before intents: the result alone
            return _Record(state="done", result=msgspec.json.decode(data, type=ToolResult))
        except msgspec.DecodeError:
            return None
    except msgspec.DecodeError:
        return None


async def _put(key: str, record: _Record) -> None:
    try:
        await current_journal().put(key, msgspec.json.encode(record))
    except Exception:  # best effort: without the record a repeat runs again, as without a key
        log.warning("Could not record tool call %s in the idempotency journal", key, exc_info=True)


async def replayed(ctx: ToolContext[object]) -> ToolResult | None:
    """The result recorded as *done* for this call's key, if the call already ran."""
    key = ctx.idempotency_key
    if key is None:
        return None
    try:
        record = _decode(await current_journal().get(key))
    except Exception:
        log.warning("Could not read the idempotency journal for %s", key, exc_info=True)
        return None
    return record.result if record is not None and record.state == "done" else None


async def remember(ctx: ToolContext[object], result: ToolResult) -> None:
    """Record ``result`` as *done* under this call's key (a successful change only)."""
    key = ctx.idempotency_key
    if key is None or result.is_error:
        return
    await _put(key, _Record(state="done", result=result))


async def once(ctx: ToolContext[object], run: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    """``run()``'s result, recorded under the call's key; a call repeated with the same
    key gets the recorded result and ``run`` is not called. (For a change that cannot say
    what it will write before it writes; :class:`FileChangeTool` also records an intent.)"""
    done = await replayed(ctx)
    if done is not None:
        return done
    result = await run()
    await remember(ctx, result)
    return result


class Change(NamedTuple):
    """A change a file tool is about to make: ``data`` becomes the content of ``path``;
    ``write()`` writes it (returning an error result if it could not) and the call's
    result is then ``result``."""

    path: Path
    data: bytes
    result: ToolResult
    write: Callable[[], Awaitable[ToolResult | None]]


def _holds(path: str, sha256: str) -> bool:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() == sha256
    except OSError:
        return False


class FileChangeTool(WorkspaceTool):
    """Base of the tools that change files (``write``, ``edit``): sequential, and each call
    changes the files exactly once per ``ctx.idempotency_key`` (see the module
    documentation)."""

    __slots__ = ()
    journaled = True
    """A durable worker warns when the journal these tools record in is machine-local."""

    def __init__(self, workspace: Workspace, name: str, description: str, parameters: dict[str, Any], label: str) -> None:
        super().__init__(workspace, name, description, parameters, label=label, sequential=True)

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Make the change. A call repeated with the same ``ctx.idempotency_key`` returns
        the first one's result and changes nothing."""
        key = ctx.idempotency_key
        if key is not None:
            try:
                record = _decode(await current_journal().get(key))
            except Exception:
                log.warning("Could not read the idempotency journal for %s", key, exc_info=True)
                record = None
            if record is not None and record.state == "done":
                return record.result
            if record is not None and record.path is not None and record.sha256 is not None:
                if _holds(record.path, record.sha256):  # written before the attempt ended
                    await remember(ctx, record.result)
                    return record.result
        change = await self._change(args, ctx)
        if isinstance(change, ToolResult):
            return change
        if key is not None:
            digest = hashlib.sha256(change.data).hexdigest()
            await _put(key, _Record(state="intent", result=change.result, path=str(change.path), sha256=digest))
        failed = await change.write()
        if failed is not None:
            return failed
        await remember(ctx, change.result)
        return change.result

    async def _change(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult | Change:
        """The change ``args`` ask for (not made yet), or the error result."""
        raise NotImplementedError
