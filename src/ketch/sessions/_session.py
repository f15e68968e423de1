"""A session bound to an Agent: restore its state, persist each message as it commits.

:class:`Session` wraps a :class:`SessionWriter`. Opening one replays the session's
entries into the state they describe (transcript, model, thinking level, permission
mode, a run paused for approval, file checkpoints); :meth:`Session.attach` (called by
``Agent(session=...)``) restores the transcript into the agent and subscribes to its
events, so that every committed message is appended before the run goes on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import msgspec

from ketch import Agent
from ketch import Message
from ketch import RunState
from ketch import message_from_dict
from ketch import message_to_dict
from ketch.llm import scrub_surrogates
from ketch.loop import AgentEvent

from ._checkpoints import FileCheckpoints
from ._checkpoints import RewindReport
from ._checkpoints import _builtin_tools
from ._checkpoints import restore_files
from ._entries import TITLE_CHARS
from ._entries import Entry
from ._entries import SessionInfo
from ._entries import new_entry
from ._store import SessionStore
from ._store import SessionWriter

log = logging.getLogger("ketch.sessions")


_HANDLED = frozenset({"message_end", "agent_start", "agent_end", "compaction_end"})


def _message(data: dict[str, Any]) -> Message:
    """A stored message; ketch's own custom kinds (the compaction summary, tool search's
    activations) load without the caller importing them first."""
    try:
        return message_from_dict(data)
    except ValueError:
        import ketch.context  # registers ContextSummary
        import ketch.tools._search_tools  # noqa: F401  (registers ToolActivations)

        return message_from_dict(data)


def _absolute(cwd: str | os.PathLike[str] | None) -> str:
    return os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())


class Session:
    """A session open for writing, and the agent state its entries describe.

    Make one with :meth:`create`, :meth:`open`, :meth:`latest` or :meth:`fork`; pass it
    as ``Agent(..., session=session)``; :meth:`close` it when done (``async with`` works
    too). ``checkpoints`` (default True) records the prior content of files that the
    agent's file-changing tools touch under the session's directory, for :meth:`rewind`.
    """

    def __init__(self, store: SessionStore, writer: SessionWriter, *, checkpoints: bool = True) -> None:
        self.store = store
        self._writer = writer
        self.id = writer.id
        self.cwd = ""
        self.model: str | None = None
        """The ``provider:id`` of the model last recorded (None if none was)."""
        self.thinking: str | None = None
        """The thinking level last recorded."""
        self.permission_mode: str | None = None
        """The permission mode last recorded (:meth:`record_permission_mode`)."""
        self.pending_state: RunState | None = None
        """The state of a run that paused for approval and was not resumed since."""
        self.messages: list[Message] = []
        """The transcript the entries describe (the agent's, once attached)."""
        self.message_ids: list[str] = []
        """The entry id of each message of :attr:`messages`, aligned."""
        self._by_id: dict[str, Message] = {}
        self._checkpoints: list[tuple[int, str, dict[str, Any]]] = []  # (log position, entry id, payload)
        self._undone: set[str] = set()
        self._position: dict[str, int] = {}
        self._last_id: str | None = None
        self._agent: Agent[Any] | None = None
        self._compaction: dict[str, Any] | None = None
        self._resumed_cost = 0.0
        self._want_checkpoints = checkpoints
        self._replay(writer.entries)

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    async def create(
        cls, store: SessionStore, *, cwd: str | os.PathLike[str] | None = None, checkpoints: bool = True
    ) -> Session:
        """A new session for the directory ``cwd`` (default: the current directory)."""
        writer = await store.create(cwd=_absolute(cwd))
        return cls(store, writer, checkpoints=checkpoints)

    @classmethod
    async def open(cls, store: SessionStore, session_id: str, *, checkpoints: bool = True) -> Session:
        """Resume the session ``session_id`` (takes its write lock)."""
        return cls(store, await store.open(session_id), checkpoints=checkpoints)

    @classmethod
    async def latest(
        cls, store: SessionStore, *, cwd: str | os.PathLike[str] | None = None, checkpoints: bool = True
    ) -> Session | None:
        """The most recently updated session of ``cwd`` (default: the current directory), or None."""
        info = await store.latest(_absolute(cwd))
        if info is None:
            return None
        return await cls.open(store, info.id, checkpoints=checkpoints)

    async def fork(self, at: str | None = None) -> Session:
        """A new session with this one's entries up to and including the message ``at``
        (default: everything so far), opened for writing; this session stays as it is."""
        target = at if at is not None else self._last_id
        if target is None:
            raise ValueError(f"Session {self.id} is empty: nothing to fork")
        if at is not None and at not in self._position:
            raise ValueError(f"Message {at!r} is not in session {self.id}")
        info = await self.store.fork(self.id, target)
        return await Session.open(self.store, info.id, checkpoints=self._want_checkpoints)

    async def info(self) -> SessionInfo:
        """The store's summary of this session (title, message count, cost …)."""
        return await self.store.info(self.id)

    # -- the agent ------------------------------------------------------------------------------
    def attach(self, agent: Agent[Any]) -> None:
        """Bind to ``agent`` (called by ``Agent(session=...)``): restore the transcript,
        persist from now on, and record file checkpoints."""
        if self._agent is not None:
            raise RuntimeError(f"Session {self.id} is already attached to an agent")
        if agent.messages and self.messages:
            raise ValueError(
                "Agent(messages=...) and a session that has messages: pass one of them "
                f"(session {self.id} has {len(self.messages)})"
            )
        self._agent = agent
        if self.messages:
            agent.messages = list(self.messages)
        # The agent's messages are now either the restored ones (same objects) or its own,
        # which the first sync appends.
        agent.subscribe(self._on_event)
        if self._want_checkpoints and self.cwd:
            hidden: list[Path] = []  # what the bash sandbox hides, checkpoints leave alone
            if any(t.name == "bash" for t in agent.tools):
                _, bash_tool = _builtin_tools()
                hidden = [p for t in agent.tools if isinstance(t, bash_tool) for p in t.hidden]
            checkpoints = FileCheckpoints(
                Path(self.cwd), self._writer, record=self._record_checkpoint, hidden=hidden
            )
            agent.config.middlewares = (*agent.config.middlewares, checkpoints.middleware)

    def _on_event(self, event: AgentEvent) -> Awaitable[None] | None:
        # A plain function: the events that change nothing here (streaming updates above
        # all) cost a set lookup, not a coroutine.
        if event.type in _HANDLED:
            return self._handle(event)
        return None

    async def _handle(self, event: AgentEvent) -> None:
        match event.type:
            case "message_end":
                await self.sync()
            case "agent_start":
                await self._record_settings()
                await self.sync()
            case "compaction_end":
                if event.error is None:
                    self._compaction = {
                        "reason": event.reason,
                        "tokens_before": event.tokens_before,
                        "tokens_after": event.tokens_after,
                    }
                await self.sync()
            case "agent_end":
                await self.sync()
                summary = event.summary
                cost = summary.cost - self._resumed_cost
                self._resumed_cost = 0.0
                await self._append("run_summary", {
                    "end_reason": summary.end_reason,
                    "usage": msgspec.to_builtins(summary.usage),
                    "cost": cost,
                    "duration": summary.duration,
                    "turns": summary.turns,
                })
                state = event.state
                if state is not None:
                    await self.record_run_state(state)

    async def sync(self) -> None:
        """Append the agent's messages committed since the last sync (a transcript that was
        rewritten, by compaction or by hand, is recorded as a ``compaction`` entry)."""
        agent = self._agent
        if agent is None:
            return
        current = agent.messages
        known = self.messages
        n = len(known)
        if len(current) >= n and (n == 0 or (current[n - 1] is known[-1] and current[0] is known[0])):
            for m in current[n:]:
                entry = await self._append("message", {"message": m})
                self._by_id[entry.id] = m
                known.append(m)
                self.message_ids.append(entry.id)
                self.pending_state = None
            return
        ids_of = {id(m): eid for m, eid in zip(known, self.message_ids, strict=True)}
        new_ids: list[str] = []
        for m in current:
            eid = ids_of.get(id(m))
            if eid is None:
                entry = await self._append("message", {"message": message_to_dict(m), "detached": True})
                self._by_id[entry.id] = m
                eid = entry.id
            new_ids.append(eid)
        payload: dict[str, Any] = {"message_ids": new_ids, "reason": "rewrite", "tokens_before": 0, "tokens_after": 0}
        if self._compaction is not None:
            payload.update(self._compaction)
            self._compaction = None
        await self._append("compaction", payload)
        self.messages = list(current)
        self.message_ids = new_ids

    async def _record_settings(self) -> None:
        agent = self._agent
        assert agent is not None
        model = f"{agent.model.provider}:{agent.model.id}"
        if model != self.model:
            await self._append("model_change", {"model": model})
            self.model = model
        if agent.thinking != self.thinking:
            await self._append("thinking_change", {"level": agent.thinking})
            self.thinking = agent.thinking
        if self.pending_state is not None:
            # A resumed run reports the paused part's cost again: count it once.
            self._resumed_cost = self.pending_state.usage.cost.total

    async def record_permission_mode(self, mode: str) -> None:
        """Record a permission-mode change (the CLI calls this when the mode changes)."""
        if mode != self.permission_mode:
            await self._append("permission_mode_change", {"mode": mode})
            self.permission_mode = mode

    async def rename(self, title: str) -> str:
        """Name the session: ``title`` on one line, at most 80 characters, is what the
        stores list it under from now on (instead of its first message); returns it.
        ``ValueError`` for a title with no text."""
        name = scrub_surrogates(" ".join(title.split())[:TITLE_CHARS])
        if not name:
            raise ValueError("a session's title needs some text")
        await self._append("title", {"title": name})
        return name

    async def record_run_state(self, state: RunState) -> None:
        """Record the state of a run paused for approval (done for you when an attached
        agent's run pauses); :attr:`pending_state` returns it until the run resumes."""
        await self._append("run_state", {"state": state.to_dict()})
        self.pending_state = state

    async def _record_checkpoint(self, payload: dict[str, Any]) -> None:
        entry = await self._append("checkpoint", payload)
        self._checkpoints.append((self._position[entry.id], entry.id, payload))

    async def _append(self, type: str, payload: dict[str, Any]) -> Entry:
        entry = new_entry(type, payload, parent_id=self._last_id)
        await self._writer.append(entry)
        self._position[entry.id] = len(self._position)
        self._last_id = entry.id
        return entry

    # -- rewind -------------------------------------------------------------------------------
    async def rewind(self, to_message_id: str, *, files: bool = True, conversation: bool = True) -> RewindReport:
        """Go back to just after the message ``to_message_id``.

        ``files``: restore the files the agent's tools changed since then (a file changed
        outside the agent since its checkpoint is left as it is and reported in
        ``conflicts``). ``conversation``: drop the later messages from the transcript
        (the agent's too, when attached; not while it runs).
        """
        if to_message_id not in self.message_ids:
            raise ValueError(f"Message {to_message_id!r} is not in the transcript of session {self.id}")
        agent = self._agent
        if agent is not None and agent.is_running:
            raise RuntimeError("Cannot rewind while the agent is running; abort() or wait_for_idle() first")
        await self.sync()
        report = RewindReport(restored=[], deleted=[], conflicts=[])
        undone: list[str] = []
        if files:
            since = self._position[to_message_id]
            later = [(eid, p) for pos, eid, p in self._checkpoints if pos > since and eid not in self._undone]
            if later and self.cwd:
                report = await restore_files(Path(self.cwd), [p for _, p in later], self._writer)
            undone = [eid for eid, _ in later]
            self._undone.update(undone)
        keep = self.message_ids
        if conversation:
            keep = self.message_ids[: self.message_ids.index(to_message_id) + 1]
        await self._append("rewind", {"to": to_message_id, "message_ids": keep, "undone_checkpoints": undone})
        if conversation:
            self.messages = self.messages[: len(keep)]
            self.message_ids = list(keep)
            self.pending_state = None
            if agent is not None:
                agent.messages = list(self.messages)
        return report

    # -- closing ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Persist anything not yet synced and release the session's write lock."""
        try:
            await self.sync()
        finally:
            await self._writer.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, messages={len(self.messages)})"

    # -- replay -------------------------------------------------------------------------------
    def _replay(self, entries: list[Entry]) -> None:
        by_id = self._by_id
        for pos, e in enumerate(entries):
            self._position[e.id] = pos
            self._last_id = e.id
            p = e.payload
            match e.type:
                case "message":
                    m = _message(p["message"])
                    by_id[e.id] = m
                    if not p.get("detached"):
                        self.messages.append(m)
                        self.message_ids.append(e.id)
                        self.pending_state = None
                case "compaction" | "rewind":
                    ids = [i for i in p.get("message_ids", []) if i in by_id]
                    self.messages = [by_id[i] for i in ids]
                    self.message_ids = ids
                    if e.type == "rewind":
                        self._undone.update(p.get("undone_checkpoints", []))
                        self.pending_state = None
                case "session":
                    self.cwd = str(p.get("cwd", ""))
                case "model_change":
                    self.model = p.get("model")
                case "thinking_change":
                    self.thinking = p.get("level")
                case "permission_mode_change":
                    self.permission_mode = p.get("mode")
                case "checkpoint":
                    self._checkpoints.append((pos, e.id, p))
                case "run_state":
                    try:
                        self.pending_state = RunState.from_dict(p["state"])
                    except (KeyError, ValueError, TypeError, msgspec.ValidationError) as exc:
                        log.warning("Session %s: skipping an unreadable run state (%s)", self.id, exc)

