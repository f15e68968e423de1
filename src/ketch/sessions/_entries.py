"""Session entries, session summaries and the stores' errors."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from ketch.llm import encode_json
from ketch.llm import scrub_surrogates


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One record of a session: a JSON object per line in a JSONL file, a row in SQLite.

    ``type`` names the kind of entry (``session``, ``message``, ``title``, ``compaction``,
    ``model_change``, ``thinking_change``, ``permission_mode_change``, ``checkpoint``,
    ``run_summary``, ``run_state``, ``rewind``); stores keep unknown types as they are.
    ``payload`` must be JSON-able. ``parent_id`` is the id of the entry before it in the
    session (``None`` for the first).
    """

    id: str
    parent_id: str | None
    timestamp: float
    type: str
    payload: dict[str, Any]


def new_entry(type: str, payload: dict[str, Any], *, parent_id: str | None) -> Entry:
    """An :class:`Entry` with a fresh id (32 random hex digits, like ``uuid4().hex``)
    stamped with ``time.time()``. ``payload`` may hold msgspec Structs (messages): they
    are encoded as :func:`ketch.message_to_dict` would write them."""
    return Entry(id=os.urandom(16).hex(), parent_id=parent_id, timestamp=time.time(), type=type, payload=payload)


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a store tells about a session without loading it.

    ``title`` is the text of the first user message (its text parts joined, runs of
    whitespace made one space, stripped, at most 80 characters), or the latest name the
    session was given (a ``title`` entry, :meth:`ketch.sessions.Session.rename`),
    ``message_count`` the number of messages in the transcript (what resuming it gives:
    the ``message`` entries that are not detached, as a rewind or a compaction left them), ``cost``
    the sum of the run summaries' costs, ``created`` the time of the ``session`` entry,
    ``updated`` the time of the newest entry, and ``forked_from`` the (session id, entry
    id) the session was forked at.
    """

    id: str
    cwd: str
    created: float
    updated: float
    title: str
    message_count: int
    cost: float
    forked_from: tuple[str, str] | None


class SessionPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a listing: sessions newest ``updated`` first; ``next_cursor`` fetches
    the next page and is ``None`` when there are no more sessions."""

    sessions: list[SessionInfo]
    next_cursor: str | None


class SessionNotFoundError(LookupError):
    """No session with this id in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session {session_id!r} not found")
        self.session_id = session_id


class SessionLockedError(RuntimeError):
    """The session is open for writing elsewhere; a session has one writer at a time."""

    def __init__(self, session_id: str, pid: int | None = None) -> None:
        if pid is not None and pid == os.getpid():
            message = f"Session {session_id} is open in this process (pid {pid}); close that writer first or fork it"
        else:
            where = "another process" if pid is None else f"another process (pid {pid})"
            message = f"Session {session_id} is open in {where}; close it there or fork it"
        super().__init__(message)
        self.session_id = session_id
        self.pid = pid


# ---- helpers shared by the stores (private) ----

_encoder = msgspec.json.Encoder()
TITLE_CHARS = 80




def encode_entry(entry: Entry) -> bytes:
    """The entry's JSON (no newline). A lone surrogate in a string becomes U+FFFD
    instead of failing the write."""
    return encode_json(entry, _encoder)


def content_text(content: Any) -> str:
    """The text of a message's ``content`` as :func:`ketch.message_to_dict` writes it: the
    string itself, or its text blocks joined ("" for anything else)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def message_title(message: Any) -> str:
    """A session's title from one of its messages: a user message's text on one line, at
    most 80 characters ("" for other messages and for a user message without text)."""
    if isinstance(message, msgspec.Struct):  # a message appended as it is (encoded on write)
        message = msgspec.to_builtins(message)
    if not isinstance(message, dict) or message.get("role") != "user":
        return ""
    return scrub_surrogates(" ".join(content_text(message.get("content")).split())[:TITLE_CHARS])


class Summary:
    """The derived fields of a session, folded entry by entry (private to the stores).
    Its slots are the fields of :class:`SessionInfo` but ``id``."""

    __slots__ = ("cost", "created", "cwd", "forked_from", "message_count", "title", "updated")

    def __init__(self) -> None:
        self.cwd = ""
        self.created = 0.0
        self.updated = 0.0
        self.title = ""
        self.message_count = 0
        self.cost = 0.0
        self.forked_from: tuple[str, str] | None = None

    def add(self, entry: Entry) -> bool:
        """Fold one entry in; True when the title or the cost changed."""
        if entry.timestamp > self.updated:
            self.updated = entry.timestamp
        kind = entry.type
        payload = entry.payload
        if kind == "message":
            if not payload.get("detached"):
                self.message_count += 1
            if not self.title:
                self.title = message_title(payload.get("message"))
                return bool(self.title)
        elif kind == "title":  # a name given to the session wins over its first message
            title = payload.get("title")
            self.title = title if isinstance(title, str) else ""
            return True
        elif kind == "rewind" or kind == "compaction":  # the transcript is these messages now
            ids = payload.get("message_ids")
            if isinstance(ids, list):
                self.message_count = len(ids)
        elif kind == "run_summary":
            cost = payload.get("cost")
            if isinstance(cost, (int, float)) and not isinstance(cost, bool):
                self.cost += cost
            return True
        elif kind == "session" and not self.cwd:
            cwd = payload.get("cwd")
            self.cwd = cwd if isinstance(cwd, str) else ""
            self.created = entry.timestamp
            forked = payload.get("forked_from")
            if isinstance(forked, dict):
                self.forked_from = (str(forked.get("session_id")), str(forked.get("entry_id")))
        return False

    def info(self, session_id: str) -> SessionInfo:
        """This summary as a :class:`SessionInfo`."""
        return SessionInfo(id=session_id, **{name: getattr(self, name) for name in self.__slots__})

    @classmethod
    def of(cls, info: SessionInfo) -> Summary:
        """A summary that continues from ``info``."""
        out = cls()
        for name in cls.__slots__:
            setattr(out, name, getattr(info, name))
        return out

    @classmethod
    def over(cls, entries: Iterable[Entry]) -> Summary:
        """The summary of ``entries``, folded in order."""
        out = cls()
        for entry in entries:
            out.add(entry)
        return out


def encode_cursor(info: SessionInfo) -> str:
    """The cursor after ``info`` in a listing (newest ``updated`` first, then id)."""
    return f"{info.updated!r}:{info.id}"


def decode_cursor(cursor: str) -> tuple[float, str]:
    """(updated, id) of a cursor; ValueError naming a malformed one."""
    updated, sep, session_id = cursor.partition(":")
    try:
        if not sep or not session_id:
            raise ValueError
        return float(updated), session_id
    except ValueError:
        raise ValueError(f"Invalid session list cursor {cursor!r}: pass a next_cursor from a previous page") from None


def check_fsync(fsync: str) -> None:
    """ValueError for an fsync policy other than ``"never"`` or ``"always"``."""
    if fsync not in ("never", "always"):
        raise ValueError(f"Invalid fsync policy {fsync!r}: use 'never' or 'always'")


def check_limit(limit: int) -> None:
    """ValueError for a page size below 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"Invalid session list limit {limit!r}: must be an integer >= 1")


def session_payload(cwd: str, forked_from: tuple[str, str] | None = None) -> dict[str, Any]:
    """The payload of a ``session`` entry."""
    return {
        "cwd": cwd,
        "version": 1,
        "forked_from": None if forked_from is None else {"session_id": forked_from[0], "entry_id": forked_from[1]},
    }


def index_of(entries: list[Entry], entry_id: str, session_id: str) -> int:
    """The position of ``entry_id`` in ``entries``; ValueError naming it if absent."""
    for index, entry in enumerate(entries):
        if entry.id == entry_id:
            return index
    raise ValueError(f"Entry {entry_id!r} is not in session {session_id}")


def fork_entries(entries: list[Entry], session_id: str, at_entry_id: str) -> list[Entry]:
    """The entries of a fork of ``session_id`` at ``at_entry_id``: its ``session`` entry
    stamped now and recording ``forked_from``, then the entries up to and including
    ``at_entry_id`` (ValueError naming it if absent)."""
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
    return [head, *entries[1 : index + 1]]


def normal_cwd(cwd: str) -> str:
    """The absolute form of ``cwd`` that stores keep and match (lone surrogates, as
    ``os`` makes from undecodable bytes, become U+FFFD)."""
    return scrub_surrogates(os.path.abspath(cwd))
