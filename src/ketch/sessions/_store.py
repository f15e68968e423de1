"""The session store protocols and the default store."""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import TYPE_CHECKING
from typing import ClassVar
from typing import Protocol
from typing import runtime_checkable

from .._paths import xdg_dir
from ._entries import Entry
from ._entries import SessionInfo
from ._entries import SessionPage
from ._entries import Summary

if TYPE_CHECKING:
    from ._lockfile import FileLock



@runtime_checkable
class SessionWriter(Protocol):
    """The one writer of an open session; it holds the session's write lock until
    :meth:`close`.

    ``entries`` is what the session held when it was opened (after ``create``: the
    ``session`` entry); every append is added to it.
    """

    id: str
    entries: builtins.list[Entry]

    async def append(self, entry: Entry) -> None:
        """Add ``entry`` at the end of the session; it is stored (durable per the store's
        fsync policy) when this returns. RuntimeError once the writer is closed."""
        ...

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` in the session's storage; returns its sha256 hex digest. The
        same bytes are stored once."""
        ...

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``; LookupError if there are none."""
        ...

    async def close(self) -> None:
        """Release the write lock. Idempotent."""
        ...


class LockedWriter:
    """What the stores' writers share: the session's id, its entries and summary, and
    its write lock, held until close (``None`` once closed)."""

    store_name: ClassVar[str]

    def __init__(self, session_id: str, lock: FileLock, entries: builtins.list[Entry], summary: Summary) -> None:
        self.id = session_id
        self.entries = entries
        self._lock: FileLock | None = lock
        self._summary = summary

    def __repr__(self) -> str:
        state = "closed" if self._lock is None else "open"
        return f"<{self.store_name} writer {self.id} {state}, {len(self.entries)} entries>"

    def _check_open(self) -> None:
        if self._lock is None:
            raise RuntimeError(f"Session {self.id}: the writer is closed; open the session again to append")


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live: append-only entry logs with content-addressed blobs.

    Every method is a coroutine. Reads (``load``, ``info``, ``list``, ``latest``,
    ``get_blob``, ``fork``) need no lock and may run while a writer appends. Unknown
    session ids raise :class:`SessionNotFoundError`.
    """

    async def create(self, *, cwd: str) -> SessionWriter:
        """Start a session for the working directory ``cwd``: writes its ``session``
        entry and returns its writer (which holds the lock)."""
        ...

    async def open(self, session_id: str) -> SessionWriter:
        """Open a session for appending; :class:`SessionLockedError` if another writer
        holds it."""
        ...

    async def load(self, session_id: str) -> builtins.list[Entry]:
        """Every entry of the session, in the order appended."""
        ...

    async def info(self, session_id: str) -> SessionInfo:
        """The session's summary (title, counts, cost, times)."""
        ...

    async def latest(self, cwd: str) -> SessionInfo | None:
        """The most recently updated session of ``cwd``, or None."""
        ...

    async def fork(self, session_id: str, at_entry_id: str) -> SessionInfo:
        """A new session holding the entries up to and including ``at_entry_id`` (same
        entry ids; its ``session`` entry records ``forked_from``) and the blobs; the two
        sessions are independent from then on. ValueError if the entry is not in the
        session."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove the session, its entries and its blobs; :class:`SessionLockedError`
        if it is open for writing."""
        ...

    async def get_blob(self, session_id: str, digest: str) -> bytes:
        """A blob of the session; LookupError if there is none under ``digest``."""
        ...

    async def list(self, *, cwd: str | None = None, limit: int = 50, cursor: str | None = None) -> SessionPage:
        """A page of sessions (of ``cwd`` if given), newest ``updated`` first; pass the
        page's ``next_cursor`` to get the next one. ValueError for a limit below 1 or a
        malformed cursor."""
        ...


def default_sessions_dir() -> Path:
    """Where sessions are kept by default: ``$KETCH_HOME/sessions`` if ``KETCH_HOME`` is
    set, else ``$XDG_DATA_HOME/ketch/sessions``, else ``~/.local/share/ketch/sessions``."""
    home = os.environ.get("KETCH_HOME")
    if home:
        return Path(home).expanduser() / "sessions"
    return xdg_dir("XDG_DATA_HOME", ".local/share", os.environ) / "ketch" / "sessions"
