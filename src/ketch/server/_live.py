"""One open session on the server: its agent, its run, its event buffer and subscribers.

Every agent event is encoded once into an SSE frame (``id: <epoch>.<seq>``, ``data:
<json>``) that all subscribers share; the consecutive deltas of a tool call's arguments
go out joined, up to 1024 characters a frame (:class:`~ketch.llm.ToolCallDeltaJoiner`).
The last ``buffer`` frames are kept so a client
that reconnects with ``Last-Event-ID`` gets what it missed; an id the buffer no longer
covers (or one from before a server restart, another epoch) gets a ``reset`` frame:
reload the session and subscribe again. A subscriber whose queue grows past
``queue_limit`` frames (a client that stopped reading) gets a last ``reset`` frame with
``"reason": "slow_client"`` and its stream ends: it reloads the session and subscribes
again (a resync the client can tell, never a silent cut).

:meth:`LiveSession.state` is consistent with :attr:`LiveSession.last_event_id`: its
``messages`` are those whose ``message_end`` went out, and ``streaming`` is the
assistant message being streamed as far as its published deltas go, so a client that
loads the state and subscribes from its ``last_event_id`` shows exactly what streamed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Awaitable
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ketch import Agent
from ketch import AgentEvent
from ketch import RunResult
from ketch import RunState
from ketch import message_to_dict
from ketch.llm import ToolCallDeltaJoiner
from ketch.llm import encode_json

log = logging.getLogger("ketch.server")


Elicit = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Ask the user a server's question (``server``, ``message``, ``mode`` ``"url"`` or
``"form"``, ``url``, ``requested_schema``); answers ``{"action": "accept"|"decline"|"cancel",
"content": {...} | None}``."""

ELICITATION_ACTIONS = ("accept", "decline", "cancel")


@dataclass(slots=True)
class Hosted:
    """What a server's agent factory returns for a session: the agent and, optionally,
    how the host runs a prompt (hooks), switches the model, measures the context and
    cleans up. Fields left None use the agent directly."""

    agent: Agent[Any]
    prompt: Callable[[str], Awaitable[RunResult]] | None = None
    """Run a prompt (default ``agent.prompt``)."""
    set_model: Callable[[str], Any] | None = None
    """Switch to the model ``provider:id`` (default: ``agent.model = spec``); raise
    ``ValueError`` (or any exception) with a one-line message for a bad spec."""
    context: Callable[[], Any] | None = None
    """The context usage (``tokens``, ``window``; default ``agent.context_usage()``)."""
    close: Callable[[], Awaitable[None]] | None = None
    """Called once when the server closes the session."""
    commands: tuple[dict[str, str], ...] = ()
    """The slash commands ``prompt`` understands (custom commands), each a dict with
    ``name``, ``usage``, ``description`` and ``origin``: the session state lists them as
    ``commands`` and the page's ``/help`` shows them."""
    bind_elicitation: Callable[[Elicit], None] | None = None
    """Called once with the session's :meth:`LiveSession.elicit`, the function through
    which the host asks the user a question of a tool's server (an MCP elicitation: a
    URL to open, or a form): the page shows it in its approval bar and the answer comes
    from ``POST /api/sessions/{id}/elicitations``."""


class Conflict(Exception):
    """A command the session's state does not allow now (HTTP 409)."""


class BadRequest(Exception):
    """A command with a bad value (HTTP 400)."""


_CLOSED = b""

# the events after which the transcript the page has seen is the agent's whole transcript
_SYNC_EVENTS = frozenset({"message_end", "agent_start", "agent_end", "compaction_end"})


class _Partial:
    """The assistant message being streamed, as its published deltas show it (the text
    and thinking of each block kept as a list of parts: appending is O(1))."""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}

    def feed(self, stream_event: Any) -> None:
        kind = getattr(stream_event, "type", "")
        index = getattr(stream_event, "index", None)
        if not isinstance(index, int):
            return
        if kind == "text_delta" or kind == "thinking_delta":
            block = self.blocks.get(index)
            if block is None:
                block = self.blocks[index] = {"type": kind[:-6], "parts": []}
            block["parts"].append(stream_event.delta)
        elif kind == "text_start" or kind == "thinking_start":
            self.blocks.setdefault(index, {"type": kind[:-6], "parts": []})
        elif kind == "toolcall_start":
            call = stream_event.partial.content[index]
            self.blocks[index] = {"type": "tool_call", "id": call.id, "name": call.name}

    def as_dict(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            kind = block["type"]
            if kind == "text":
                content.append({"type": "text", "text": "".join(block["parts"])})
            elif kind == "thinking":
                content.append({"type": "thinking", "thinking": "".join(block["parts"])})
            else:
                content.append({"type": "tool_call", "id": block["id"], "name": block["name"], "args": {}})
        return {"role": "assistant", "content": content}


def _frame(event_id: str, data: bytes, event: str | None = None) -> bytes:
    head = f"id: {event_id}\n" + (f"event: {event}\n" if event else "")
    return head.encode() + b"data: " + data + b"\n\n"


class LiveSession:
    """A session the server has open (holds the store's write lock until closed)."""

    def __init__(
        self,
        session: Any,
        hosted: Hosted,
        encode: Callable[[AgentEvent], bytes],
        *,
        buffer: int = 2000,
        queue_limit: int = 10000,
    ) -> None:
        self.session = session
        self.hosted = hosted
        self.agent = hosted.agent
        self.epoch = secrets.token_hex(4)
        self._encode = encode
        self._seq = 0
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer)
        self._subscribers: set[asyncio.Queue[bytes]] = set()
        self._queue_limit = queue_limit
        self.task: asyncio.Task[None] | None = None
        self.decisions: dict[str, Any] = {}
        self.last_end: dict[str, Any] | None = None
        self._join: ToolCallDeltaJoiner[AgentEvent] = ToolCallDeltaJoiner()
        self._partial: _Partial | None = None
        self._shown = len(self.agent.messages)
        self._unsubscribe = self.agent.subscribe(self._on_event)
        self._elicitations: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        if hosted.bind_elicitation is not None:
            hosted.bind_elicitation(self.elicit)

    # -- events --------------------------------------------------------------------------------
    @property
    def last_event_id(self) -> str:
        """The id of the latest event (``<epoch>.<seq>``)."""
        return f"{self.epoch}.{self._seq}"

    def _on_event(self, event: AgentEvent) -> None:
        # A tool call's consecutive deltas go out joined (one frame, not one per fragment).
        for item in self._join.feed(event):
            self._publish_event(item)

    def _publish_event(self, event: AgentEvent) -> None:
        try:
            data = self._encode(event)
        except Exception:  # never break the run over an event that cannot be encoded
            log.exception("cannot encode a %s event", event.type)
            return
        self._track(event)
        self.publish(data)

    def _track(self, event: AgentEvent) -> None:
        """Keep what the published events show: the streaming message and how many
        messages of the transcript have ended."""
        if event.type == "message_update":
            if self._partial is not None:
                self._partial.feed(event.event)
            return
        if event.type == "message_start":
            if event.message.role == "assistant":
                self._partial = _Partial()
        elif event.type in _SYNC_EVENTS:
            if event.type != "agent_start":
                self._partial = None
            self._shown = len(self.agent.messages)
        elif event.type == "retry" and getattr(event, "discard_partial", False):
            self._partial = None

    def publish(self, data: bytes, event: str | None = None) -> None:
        """Send one JSON payload to every subscriber (and keep it in the buffer)."""
        self._seq += 1
        frame = _frame(f"{self.epoch}.{self._seq}", data, event)
        self._buffer.append((self._seq, frame))
        for queue in list(self._subscribers):
            if queue.qsize() >= self._queue_limit:
                self._drop(queue, slow=True)
            else:
                queue.put_nowait(frame)

    def publish_json(self, obj: Any, event: str | None = None) -> None:
        """:meth:`publish` of a plain JSON object (after the tool-call delta held for
        joining, if any)."""
        for held in self._join.flush():
            self._publish_event(held)
        self.publish(encode_json(obj), event)

    def _reset_frame(self, reason: str) -> bytes:
        reset = msgspec.json.encode({"type": "reset", "reason": reason, "last_event_id": self.last_event_id})
        return _frame(self.last_event_id, reset, "reset")

    def _drop(self, queue: asyncio.Queue[bytes], *, slow: bool = False) -> None:
        self._subscribers.discard(queue)
        if slow:  # the client gets told why its stream ends: it reloads and subscribes again
            queue.put_nowait(self._reset_frame("slow_client"))
        queue.put_nowait(_CLOSED)

    def subscribe(self, last_event_id: str | None) -> asyncio.Queue[bytes]:
        """A queue of frames from now on, starting with the frames after
        ``last_event_id`` (or a ``reset`` frame when the buffer no longer has them)."""
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        if last_event_id:
            epoch, _, seq_text = last_event_id.strip().partition(".")
            try:
                seq = int(seq_text)
            except ValueError:
                seq = -1
            oldest = self._buffer[0][0] if self._buffer else self._seq + 1
            if epoch != self.epoch or seq < oldest - 1 or seq > self._seq:
                reason = "restarted" if epoch != self.epoch else "behind"
                queue.put_nowait(self._reset_frame(reason))
            else:
                for number, frame in self._buffer:
                    if number > seq:
                        queue.put_nowait(frame)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[bytes]) -> None:
        """Stop sending to ``queue``."""
        self._subscribers.discard(queue)

    @property
    def subscriber_count(self) -> int:
        """How many clients are subscribed."""
        return len(self._subscribers)

    # -- state ---------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether a run (prompt or resume) is in progress."""
        return self.task is not None

    def pending(self) -> list[dict[str, Any]]:
        """The calls a paused run waits on, with the decisions given so far."""
        state: RunState | None = self.session.pending_state
        if state is None or self.running:
            return []
        return [
            {
                "tool_call_id": p.tool_call_id,
                "tool_name": p.tool_name,
                "args": dict(p.args),
                "reason": p.reason or "",
                "decided": p.tool_call_id in self.decisions,
            }
            for p in state.awaiting
        ]

    def context(self) -> dict[str, int]:
        """Tokens in the context and the window."""
        measure = self.hosted.context or self.agent.context_usage
        usage = measure()
        return {"tokens": int(usage.tokens), "window": int(usage.window)}

    async def state(self, *, messages: bool = True) -> dict[str, Any]:
        """The session as the API returns it (``messages``: with the transcript)."""
        info = await self.session.info()
        model = self.agent.model
        out: dict[str, Any] = {
            "id": self.session.id,
            "title": info.title,
            "cwd": self.session.cwd,
            "model": f"{model.provider}:{model.id}",
            "thinking": self.agent.thinking,
            "running": self.running,
            "phase": self.agent.phase.kind,
            "pending_approvals": self.pending(),
            "pending_elicitations": [question for question, _ in self._elicitations.values()],
            "context": self.context(),
            "cost": info.cost,
            "last_end": self.last_end,
            "writable": True,
            "last_event_id": self.last_event_id,
            "commands": [dict(c) for c in self.hosted.commands],
        }
        if messages:
            shown = self.agent.messages if not self.running else self.agent.messages[: self._shown]
            out["messages"] = [message_to_dict(m) for m in shown]
            out["streaming"] = self._partial.as_dict() if self._partial is not None and self.running else None
        return out

    async def push_state(self) -> None:
        """Publish a ``session_state`` event (no transcript)."""
        try:
            state = await self.state(messages=False)
        except Exception:
            log.exception("cannot read the state of session %s", self.session.id)
            return
        state["type"] = "session_state"
        self.publish_json(state)

    # -- commands ------------------------------------------------------------------------------
    def _check_idle(self) -> None:
        if self.running:
            raise Conflict(
                f"session {self.session.id} is running; steer it (POST .../steer), queue a follow-up "
                "(POST .../follow_up) or abort it (POST .../abort) first"
            )
        waiting = self.pending()
        if waiting:
            calls = ", ".join(f"{p['tool_call_id']} ({p['tool_name']})" for p in waiting)
            raise Conflict(
                f"session {self.session.id} is paused for approval of {calls}: "
                "approve or deny them (POST .../approvals) first"
            )

    def _start(self, make: Callable[[], Awaitable[RunResult]]) -> None:
        self.task = asyncio.create_task(self._drive(make), name=f"ketch-server-run-{self.session.id}")

    async def _drive(self, make: Callable[[], Awaitable[RunResult]]) -> None:
        try:
            result = await make()
            self.last_end = {"end_reason": result.end_reason, "error": result.summary.error}
        except asyncio.CancelledError:
            self.last_end = {"end_reason": "aborted", "error": "the server stopped"}
            raise
        except Exception as exc:  # a factory or resume error: reported, the session stays usable
            message = str(exc) or type(exc).__name__
            self.last_end = {"end_reason": "error", "error": message}
            self.publish_json({"type": "run_error", "error": message})
        finally:
            self.task = None
            self.decisions = {}
            await self.push_state()

    def prompt(self, text: str) -> None:
        """Start a run on ``text`` (:class:`Conflict` while running or paused)."""
        self._check_idle()
        run = self.hosted.prompt or self.agent.prompt
        self._start(lambda: run(text))

    async def seed(self, history: list[Any]) -> None:
        """Make ``history`` (ketch messages) the transcript of this session, which must
        have none yet, and record it (what an API client sends before its last message)."""
        if self.running or self.agent.messages:
            raise Conflict(f"session {self.session.id} already has a transcript")
        self.agent.messages = history
        await self.session.sync()
        self._shown = len(self.agent.messages)

    def steer(self, text: str) -> None:
        """Queue ``text`` for the running agent's next turn."""
        if not self.running:
            raise Conflict(f"session {self.session.id} is not running: send a prompt (POST .../prompt) instead")
        self.agent.steer(text)

    def follow_up(self, text: str) -> None:
        """Queue ``text`` to run when the running agent would stop."""
        if not self.running:
            raise Conflict(f"session {self.session.id} is not running: send a prompt (POST .../prompt) instead")
        self.agent.follow_up(text)

    def abort(self) -> None:
        """Abort the run and drop the queued steering and follow-up messages (what the
        control protocol's ``interrupt`` does)."""
        if not self.running:
            raise Conflict(f"session {self.session.id} is not running: nothing to abort")
        self._cancel_elicitations()
        self.agent.abort()
        self.agent.clear_queues()

    async def elicit(self, question: dict[str, Any]) -> dict[str, Any]:
        """Ask the user ``question`` (see :data:`Elicit`) during a run: it is listed in the
        state's ``pending_elicitations`` (with an ``id``) until :meth:`answer` answers it;
        an abort or the session's close answers ``cancel``."""
        ident = f"el_{secrets.token_hex(6)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._elicitations[ident] = ({"id": ident, **question}, future)
        await self.push_state()
        try:
            return await future
        finally:
            self._elicitations.pop(ident, None)
            if not future.done():
                future.cancel()
            await self.push_state()

    def answer(self, ident: str, action: str, content: dict[str, Any] | None = None) -> None:
        """Answer the pending elicitation ``ident`` (``accept``, with ``content`` for a form,
        ``decline`` or ``cancel``)."""
        if action not in ELICITATION_ACTIONS:
            raise BadRequest(f'"action": expected one of {", ".join(ELICITATION_ACTIONS)}, got {action!r}')
        entry = self._elicitations.get(ident)
        if entry is None or entry[1].done():
            waiting = ", ".join(self._elicitations) or "none"
            raise Conflict(f"session {self.session.id} has no pending elicitation {ident!r} (pending: {waiting})")
        entry[1].set_result({"action": action, "content": content if action == "accept" else None})

    def _cancel_elicitations(self) -> None:
        for _, future in self._elicitations.values():
            if not future.done():
                future.set_result({"action": "cancel", "content": None})

    def decide(self, decisions: dict[str, Any]) -> list[str]:
        """Record decisions (``ketch.approve()``/``deny()`` per call id); once every
        waiting call has one, resume the run. Returns the ids still undecided."""
        if self.running:
            raise Conflict(f"session {self.session.id} is running; it waits on no approval")
        state: RunState | None = self.session.pending_state
        if state is None:
            raise Conflict(f"session {self.session.id} is not paused for approval")
        waiting = [p.tool_call_id for p in state.awaiting]
        for call_id in decisions:
            if call_id not in waiting:
                raise BadRequest(f"no waiting call {call_id!r}; the run waits on {', '.join(waiting)}")
        self.decisions.update(decisions)
        left = [c for c in waiting if c not in self.decisions]
        if not left:
            chosen = dict(self.decisions)
            self._start(lambda: self.agent.resume(state, decisions=chosen))
        return left

    async def rename(self, title: str) -> str:
        """Name the session (what the list shows); returns the title as stored."""
        try:
            name: str = await self.session.rename(title)
        except ValueError as exc:
            raise BadRequest(f"title: {exc}") from None
        await self.push_state()
        return name

    async def set_model(self, spec: str) -> str:
        """Switch the model (:class:`Conflict` while running)."""
        if self.running:
            raise Conflict(f"session {self.session.id} is running: change the model when it is idle")
        try:
            if self.hosted.set_model is not None:
                out = self.hosted.set_model(spec)
                if asyncio.iscoroutine(out):
                    await out
            else:
                self.agent.model = spec
        except Exception as exc:
            raise BadRequest(f"model {spec!r}: {str(exc) or type(exc).__name__}") from None
        model = self.agent.model
        await self.push_state()
        return f"{model.provider}:{model.id}"

    async def close(self) -> None:
        """Abort a run, wait for it, stop the subscribers and close the session."""
        self._cancel_elicitations()
        if self.task is not None:
            self.agent.abort()
            try:
                await asyncio.wait_for(asyncio.shield(self.task), 10)
            except Exception:
                self.task.cancel()
        for queue in list(self._subscribers):
            self._drop(queue)
        self._unsubscribe()
        try:
            if self.hosted.close is not None:
                await self.hosted.close()
        finally:
            await self.session.close()
