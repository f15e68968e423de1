"""Sessions: conversations persisted entry by entry, to resume, list, fork and delete.

A store keeps sessions as append-only logs of :class:`Entry` records plus
content-addressed blobs::

    store = JsonlStore()                      # or SqliteStore(), or your own SessionStore
    writer = await store.create(cwd=os.getcwd())
    await writer.append(new_entry("message", {...}, parent_id=writer.entries[-1].id))
    await writer.close()
    page = await store.list(cwd=os.getcwd())  # newest first, with title, count and cost

``ketch.sessions.conformance`` checks that a store keeps the contract.
"""

from ._entries import Entry, SessionInfo, SessionLockedError, SessionNotFoundError, SessionPage, new_entry
from ._jsonl import JsonlStore
from ._sqlite import SqliteStore
from ._store import SessionStore, SessionWriter, default_sessions_dir, default_store

__all__ = [
    "Entry",
    "JsonlStore",
    "SessionInfo",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionPage",
    "SessionStore",
    "SessionWriter",
    "SqliteStore",
    "default_sessions_dir",
    "default_store",
    "new_entry",
]
