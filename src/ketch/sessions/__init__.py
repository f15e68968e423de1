"""Sessions: conversations persisted entry by entry, to resume, list, fork, rewind and delete.

With an agent::

    store = JsonlStore()                      # ~/.local/share/ketch/sessions
    session = await Session.create(store)     # or Session.open(store, id), Session.latest(store)
    agent = Agent(model, tools=..., session=session)
    await agent.prompt("...")                 # each message is appended as it commits
    await session.rewind(session.message_ids[0])   # files and conversation back to there
    await session.close()

The store underneath:

A store keeps sessions as append-only logs of :class:`Entry` records plus
content-addressed blobs::

    store = JsonlStore()                      # or SqliteStore(), or your own SessionStore
    writer = await store.create(cwd=os.getcwd())
    await writer.append(new_entry("message", {...}, parent_id=writer.entries[-1].id))
    await writer.close()
    page = await store.list(cwd=os.getcwd())  # newest first, with title, count and cost

``ketch.sessions.conformance`` checks that a store keeps the contract.
"""

from ._checkpoints import BlobSink
from ._checkpoints import FileCheckpoints
from ._checkpoints import RewindReport
from ._checkpoints import TouchesFiles
from ._checkpoints import restore_files
from ._entries import Entry
from ._entries import SessionInfo
from ._entries import SessionLockedError
from ._entries import SessionNotFoundError
from ._entries import SessionPage
from ._entries import new_entry
from ._export import export_json
from ._export import export_markdown
from ._jsonl import JsonlStore
from ._jsonl import default_store
from ._session import Session
from ._sqlite import SqliteStore
from ._store import SessionStore
from ._store import SessionWriter
from ._store import default_sessions_dir

__all__ = [
    "BlobSink",
    "Entry",
    "FileCheckpoints",
    "JsonlStore",
    "RewindReport",
    "Session",
    "SessionInfo",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionPage",
    "SessionStore",
    "SessionWriter",
    "SqliteStore",
    "TouchesFiles",
    "default_sessions_dir",
    "default_store",
    "export_json",
    "export_markdown",
    "new_entry",
    "restore_files",
]
