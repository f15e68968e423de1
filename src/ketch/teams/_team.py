"""A team of long-lived agents that talk through mailboxes: :class:`Team`, :class:`Teammate`.

How mail becomes turns
----------------------
Every teammate is an :class:`~ketch.Agent` with a mailbox. Posting a message (a
teammate's ``send_message``/``broadcast`` tool, or :meth:`Team.send` from the lead's code)
renders it as one user message, ``Message from <sender>:\\n<text>``, and:

- when the teammate is idle, appends it to the mailbox and starts the teammate's
  *driver*, a task that runs ``agent.prompt(<every message in the mailbox>)`` and, while
  more mail is waiting when a run ends, runs again; then it ends (an idle teammate has
  no task at all);
- when the teammate's run is in progress, hands it to the run as *steering*
  (``agent.steer``): the model reads it at its next turn, after the tool calls of the
  current one. A message steered in after the run's last look at its queue is taken
  back from the agent's queue when the run ends and starts the next run, so it is never
  lost and never read twice.

A message is *read* when it is committed to the teammate's transcript (a
:class:`MailRead` event, ``Teammate.received``); until then it is unread
(``Teammate.mailbox``, ``Teammate.unread``). Each teammate's messages reach its model
in posting order, so every sender's messages arrive in the order sent (``Mail.seq``),
each exactly once.

A run that does not end normally never stops the team: the teammate is recorded as
failed (:class:`TeammateFailed`, ``Teammate.errors``, :attr:`Team.failures`), and each
sender of the messages that run was given gets a message from ``team`` saying so.
:meth:`Team.shutdown` refuses new messages, waits for the runs in progress (or aborts
them) and leaves no task behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import itertools
import logging
import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from types import TracebackType
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeAlias
from typing import Unpack

from ketch import Agent
from ketch import AgentEvent
from ketch import AgentOptions
from ketch import Model
from ketch import RunResult
from ketch import Tool
from ketch import ToolResult
from ketch import Usage
from ketch import UserMessage

from ..llm import exception_text
from ..loop import derived_options
from ._events import Mail
from ._events import MailPosted
from ._events import MailRead
from ._events import TeamEvent
from ._events import TeammateEvent
from ._events import TeammateFailed
from ._events import TeammateState
from ._events import TeammateStateName
from ._tools import TeamTool

if TYPE_CHECKING:
    from ..worktrees import Worktree

log = logging.getLogger("ketch.teams")

TEAM_SENDER = "team"
"""The sender of the team's own notices (a teammate's failure); not a teammate's name."""

TeamListener: TypeAlias = Callable[[TeamEvent], "Awaitable[None] | None"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_NAME_RULE = "1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
_Entry: TypeAlias = tuple[UserMessage, Mail]
_CURRENT: contextvars.ContextVar[Teammate | None] = contextvars.ContextVar("ketch_teammate", default=None)
"""The teammate whose driver runs this code (tool tasks inherit it from the run)."""


def render(mail: Mail) -> str:
    """The text a teammate's model reads for ``mail``."""
    kind = "Broadcast" if mail.broadcast else "Message"
    return f"{kind} from {mail.sender}:\n{mail.text}"


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"invalid {what} name {name!r}: use {_NAME_RULE}")
    return name


class Teammate:
    """One member of a :class:`Team`: its agent, mailbox and counters (read them freely;
    the team changes them).

    ``sent`` counts the messages it sent, ``received`` those read into its transcript,
    ``unread`` those waiting (``mailbox``: oldest first). ``usage`` sums the runs the
    team started for it (``cost`` in US dollars); ``runs`` counts them, ``failures`` the
    ones that did not end normally, with ``errors`` saying why; ``failed`` is True while
    the last one failed.
    """

    __slots__ = (
        "_handed",
        "_in_run",
        "_note",
        "_outside",
        "_queue",
        "_run_mail",
        "_task",
        "_tools",
        "_unsubscribe",
        "agent",
        "description",
        "errors",
        "failed",
        "failures",
        "last_result",
        "name",
        "path",
        "received",
        "runs",
        "sent",
        "usage",
        "worktree",
    )

    def __init__(self, name: str, path: str, agent: Agent[Any], description: str) -> None:
        self.name = name
        self.path = path
        """``<team>/<name>``: the tag of this teammate's events."""
        self.agent = agent
        self.description = description
        self.sent = 0
        self.received = 0
        self.runs = 0
        self.failures = 0
        self.errors: list[str] = []
        self.failed = False
        """True when its last run failed (``last_error`` says why)."""
        self.usage = Usage()
        self.last_result: RunResult | None = None
        self.worktree: Worktree | None = None
        """The git worktree it works in (``Team.spawn(..., isolation="worktree")``), else None."""
        self._queue: list[_Entry] = []  # posted, not handed to the agent yet
        self._handed: dict[int, _Entry] = {}  # handed to the agent (prompt or steering), not read yet
        self._run_mail: list[Mail] = []  # every message handed to the current run
        self._task: asyncio.Task[None] | None = None
        self._in_run = False
        self._outside = False  # waiting for a run the team did not start
        self._tools: tuple[Tool, ...] = ()
        self._unsubscribe: Callable[[], None] | None = None
        self._note: tuple[str, str] | None = None  # (system prompt before, after the team's note)

    @property
    def state(self) -> TeammateStateName:
        """``working`` while the team runs it (or is about to), else ``idle``."""
        return "idle" if self._task is None else "working"

    @property
    def mailbox(self) -> tuple[Mail, ...]:
        """The unread messages, oldest first."""
        return tuple(e[1] for e in self._handed.values()) + tuple(e[1] for e in self._queue)

    @property
    def unread(self) -> int:
        """How many messages it has not read yet."""
        return len(self._handed) + len(self._queue)

    @property
    def cost(self) -> float:
        """The cost of its team runs in US dollars."""
        return self.usage.cost.total

    @property
    def last_error(self) -> str | None:
        """Why its latest failed run failed (None when none failed; see ``failed``)."""
        return self.errors[-1] if self.errors else None

    def __repr__(self) -> str:
        return f"Teammate({self.path!r}, state={self.state!r}, unread={self.unread}, sent={self.sent})"


class Team:
    """Long-lived named agents working together through messages.

    ``name`` tags events (``<name>/<teammate>``). ``lead`` is the name of whoever runs
    the team from code: :meth:`send` and :meth:`broadcast` post as ``lead`` by default,
    and teammates' messages to ``lead`` land in :attr:`inbox` (:meth:`receive`). A lead
    that is an agent is a teammate like the others (``team.add("manager", agent)``).

    Each teammate gets the tools ``send_message(to, text)``, ``broadcast(text)`` and
    ``list_teammates``, and (``instructions=True``) a paragraph at the end of its system
    prompt saying who it is and how mail works; :meth:`shutdown` takes both away again.
    ``notify_failures`` sends the senders of a failed run's messages a note from
    ``team``. :meth:`spawn` adds a teammate derived from another agent (through
    :data:`ketch.loop.INHERITANCE`). See the module documentation for how messages
    become turns::

        async with Team() as team:
            team.add("coder", Agent(model, tools=tools), description="writes the code")
            team.add("reviewer", Agent(model), description="reviews every change")
            await team.send("coder", "Add a --verbose flag; ask reviewer to review it.")
            while (mail := await team.receive()) is not None:
                print(mail.sender, mail.text)
    """

    def __init__(
        self,
        name: str = "team",
        *,
        lead: str = "lead",
        instructions: bool = True,
        notify_failures: bool = True,
    ) -> None:
        self.name = _check_name(name, "team")
        self.lead = _check_name(lead, "lead")
        if lead == TEAM_SENDER:
            raise ValueError(
                f"invalid lead name {lead!r}: it is the sender of the team's notices; choose another"
            )
        self.instructions = instructions
        self.notify_failures = notify_failures
        self._members: dict[str, Teammate] = {}
        self._listeners: list[TeamListener] = []
        self._log: list[Mail] = []
        self._inbox: list[Mail] = []
        self._inbox_read = 0
        self._ids = itertools.count(1)
        self._seqs: dict[tuple[str, str], int] = {}
        self._failures: list[TeammateFailed] = []
        self._usage = Usage()  # of teammates' runs (each also on its Teammate)
        self._active = 0  # running drivers
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._changed = asyncio.Event()  # the inbox grew or the team went idle
        self._closing = False
        self._aborting = False
        self._closed = False

    # -- members ------------------------------------------------------------------------------
    def add(self, name: str, agent: Agent[Any], *, description: str = "") -> Teammate:
        """Make ``agent`` the teammate ``name`` (its tools and system prompt gain the
        team's). Raises ``ValueError`` for a bad or taken name or an agent already in a
        team, ``RuntimeError`` after :meth:`shutdown`."""
        if self._closing:
            raise RuntimeError(f"team {self.name!r} is shut down; cannot add {name!r}")
        _check_name(name, "teammate")
        if name == self.lead:
            raise ValueError(
                f"teammate name {name!r} is the team's lead (the code running the team); choose another name"
            )
        if name == TEAM_SENDER:
            raise ValueError(
                f"teammate name {name!r} is reserved for the team's own notices; choose another name"
            )
        if name in self._members:
            raise ValueError(
                f"duplicate teammate name {name!r}: team {self.name!r} already has {', '.join(self._members)}"
            )
        if not isinstance(agent, Agent):
            raise TypeError(f"teammate {name!r} must be a ketch.Agent, got {type(agent).__name__}")
        for m in self._members.values():
            if m.agent is agent:
                raise ValueError(
                    f"this agent is already teammate {m.name!r}; give each teammate its own Agent"
                )
        taken = {"send_message", "broadcast", "list_teammates"} & {t.name for t in agent.tools}
        if taken:
            raise ValueError(
                f"the agent for {name!r} already has a tool named {sorted(taken)[0]!r} (is it in another team?)"
            )
        member = Teammate(name, f"{self.name}/{name}", agent, description)
        member._tools = (
            TeamTool("send_message", partial(self._send_message, name)),
            TeamTool("broadcast", partial(self._broadcast, name)),
            TeamTool("list_teammates", partial(self._list_teammates, name)),
        )
        agent.tools.extend(member._tools)
        if self.instructions:
            before = agent.system_prompt
            after = (before + "\n\n" if before else "") + self._note(member)
            agent.system_prompt = after
            member._note = (before, after)
        member._unsubscribe = agent.subscribe(self._listener(member))
        self._members[name] = member
        return member

    def spawn(
        self,
        name: str,
        parent: Agent[Any],
        *,
        description: str = "",
        model: Model | str | None = None,
        system_prompt: str | None = None,
        tools: Iterable[Tool] | None = None,
        isolation: str | None = None,
        **options: Unpack[AgentOptions[Any]],
    ) -> Teammate:
        """Add the teammate ``name`` with a new agent derived from ``parent`` (the lead's
        agent, or a teammate's): the agent options as :data:`ketch.loop.INHERITANCE` says
        (limits, guardrails, permission gate and hooks inherited; stop controls, the
        context manager and typed output not), then ``options`` on top. ``model``,
        ``system_prompt`` and ``tools`` default to the parent's (without the team's own
        tools and prompt note when the parent is a teammate); the transcript starts empty
        and the agent has no session. ``isolation="worktree"`` makes a new git worktree
        of the parent's workspace (:func:`ketch.worktrees.create_worktree`, named
        ``NAME-<hex>``) and roots the teammate's file tools and bash there
        (:attr:`Teammate.worktree`). Raises as :meth:`add` does, ``TypeError`` for an
        unknown option, ``ValueError`` for another ``isolation`` and
        :class:`~ketch.worktrees.WorktreeError` when no worktree can be made."""
        if isolation not in (None, "worktree"):
            raise ValueError(f"isolation must be 'worktree' or None, got {isolation!r}")
        derived = derived_options(
            parent.config,
            options,
            where="Team.spawn()",
            own=("name", "parent", "description", "model", "system_prompt", "tools", "isolation"),
        )
        member = next((m for m in self._members.values() if m.agent is parent), None)
        own_tools = {id(t) for t in member._tools} if member is not None else set()
        prompt = parent.system_prompt
        if member is not None and member._note is not None and prompt == member._note[1]:
            prompt = member._note[0]
        chosen = [t for t in parent.tools if id(t) not in own_tools] if tools is None else list(tools)
        worktree: Worktree | None = None
        if isolation == "worktree":
            from ..worktrees import create_worktree
            from ..worktrees import rebase_tools

            roots = [getattr(getattr(t, "workspace", None), "root", None) for t in chosen]
            root = next((r for r in roots if r is not None), ".")
            worktree = create_worktree(root, prefix=name[:50])
            chosen = rebase_tools(chosen, worktree.path)
        agent: Agent[Any] = Agent(
            parent.model if model is None else model,
            system_prompt=prompt if system_prompt is None else system_prompt,
            tools=chosen,
            **derived,
        )
        added = self.add(name, agent, description=description)
        added.worktree = worktree
        return added

    @property
    def members(self) -> Mapping[str, Teammate]:
        """The teammates by name, in the order added (a read-only view)."""
        return MappingProxyType(self._members)

    def __getitem__(self, name: str) -> Teammate:
        try:
            return self._members[name]
        except KeyError:
            raise KeyError(
                f"unknown teammate {name!r}; teammates: {', '.join(self._members) or '(none)'}"
            ) from None

    # -- inspection -------------------------------------------------------------------------
    @property
    def messages(self) -> tuple[Mail, ...]:
        """Every message posted in the team, in posting order."""
        return tuple(self._log)

    @property
    def mailboxes(self) -> dict[str, tuple[Mail, ...]]:
        """Each teammate's unread messages, oldest first (a snapshot)."""
        return {name: m.mailbox for name, m in self._members.items()}

    @property
    def inbox(self) -> tuple[Mail, ...]:
        """The messages sent to the lead (``lead``), in order."""
        return tuple(self._inbox)

    @property
    def failures(self) -> tuple[TeammateFailed, ...]:
        """Every failed teammate run, in order."""
        return tuple(self._failures)

    @property
    def usage(self) -> Usage:
        """Token usage and cost of all teammates' team runs together (a copy)."""
        total = Usage()
        total.add(self._usage)
        return total

    @property
    def cost(self) -> float:
        """The cost of all teammates' team runs in US dollars."""
        return self._usage.cost.total

    @property
    def is_idle(self) -> bool:
        """True when no teammate is working (nothing will happen until a message is sent)."""
        return self._active == 0

    @property
    def is_closed(self) -> bool:
        """True once :meth:`shutdown` has begun: new messages are refused."""
        return self._closing

    def subscribe(self, listener: TeamListener) -> Callable[[], None]:
        """Call ``listener(event)`` for every :data:`TeamEvent` (sync or async; awaited in
        order; a listener's exception is logged, never raised). Returns a function that
        unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):  # already unsubscribed
                self._listeners.remove(listener)

        return unsubscribe

    # -- messages ---------------------------------------------------------------------------
    async def send(self, to: str, text: str, *, sender: str | None = None) -> Mail:
        """Post ``text`` to teammate ``to`` (or to the lead's inbox) as ``sender`` (default:
        the lead). Returns at once; the teammate works on it in the background. Raises
        ``ValueError`` naming a bad recipient, sender or text, ``RuntimeError`` after
        :meth:`shutdown`."""
        sender = self.lead if sender is None else sender
        self._check_sender(sender)
        problem = self._problem(sender, to, text)
        if problem is not None:
            raise (RuntimeError if self._closing else ValueError)(problem)
        return await self._post(sender, to, text)

    async def broadcast(self, text: str, *, sender: str | None = None) -> list[Mail]:
        """Post ``text`` to every teammate except ``sender`` (default: the lead), in the
        order they were added. Raises as :meth:`send` does."""
        sender = self.lead if sender is None else sender
        self._check_sender(sender)
        problem = self._broadcast_problem(sender, text)
        if problem is not None:
            raise (RuntimeError if self._closing else ValueError)(problem)
        return [await self._post(sender, to, text, broadcast=True) for to in self._recipients(sender)]

    async def receive(self) -> Mail | None:
        """The next message sent to the lead, waiting for it while a teammate works;
        None when the team is idle and nothing is left to read (nothing more can come
        until a message is sent)."""
        while True:
            if self._inbox_read < len(self._inbox):
                mail = self._inbox[self._inbox_read]
                self._inbox_read += 1
                return mail
            if self._active == 0:
                return None
            self._changed.clear()
            await self._changed.wait()

    async def wait_idle(self) -> None:
        """Wait until no teammate is working: every run ended and no mail is waiting to
        start one (messages to the lead do not count). Raises ``RuntimeError`` inside a
        teammate's run (it would wait for itself)."""
        inside = _CURRENT.get()
        if inside is not None and self._members.get(inside.name) is inside:
            raise RuntimeError(
                f"wait_idle() called inside teammate {inside.name!r}'s run would wait for itself; "
                "call it from outside the team"
            )
        await self._quiet.wait()

    # -- shutdown -----------------------------------------------------------------------------
    async def shutdown(self, *, abort: bool = False) -> None:
        """Stop the team: refuse new messages (a teammate's ``send_message`` gets an
        error result), wait for the runs in progress to end (``abort=True`` aborts them
        first) and take the team's tools, prompt note and listeners off the agents. No
        new run starts; unread messages stay in the mailboxes. No task is left behind.
        Safe to call twice, also with ``abort=True`` while a first call waits. Called from
        inside a teammate's run, it does not wait for that run."""
        self._closing = True
        if abort:
            self._aborting = True
            for m in self._members.values():
                if m._in_run:
                    m.agent.abort()
        inside = _CURRENT.get()
        tasks: list[asyncio.Task[None]] = []
        for m in self._members.values():
            task = m._task
            if task is None or m is inside:  # a teammate's own tool: its run goes on
                continue
            if m._outside:  # waiting for a run the team did not start: nothing of ours runs
                task.cancel()
            tasks.append(task)
        if tasks:
            await asyncio.wait(tasks)
        if self._closed:
            return
        self._closed = True
        for m in self._members.values():
            self._detach(m)
        self._changed.set()

    async def __aenter__(self) -> Team:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown(abort=exc is not None)

    def __repr__(self) -> str:
        return f"Team({self.name!r}, members={list(self._members)}, messages={len(self._log)})"

    # -- internals ----------------------------------------------------------------------------
    def _note(self, m: Teammate) -> str:
        role = f" Your role: {m.description}." if m.description else ""
        return (
            f"You are {m.name!r}, a member of the team {self.name!r}.{role} Messages from your "
            "teammates reach you as user messages that start with 'Message from <name>:'. Use "
            f"send_message to write to one teammate or to {self.lead!r} (who runs the team), "
            "broadcast to write to every teammate, and list_teammates to see who is on the team. "
            "When you stop, your turn ends; a new message starts the next one."
        )

    def _check_sender(self, sender: str) -> None:
        if sender != self.lead and sender not in self._members:
            raise ValueError(f"unknown sender {sender!r}; senders: {', '.join([self.lead, *self._members])}")

    def _recipients(self, sender: str) -> list[str]:
        return [n for n in self._members if n != sender]

    def _addressable(self, sender: str) -> str:
        names = [n for n in (self.lead, *self._members) if n != sender]
        return ", ".join(names) or "(none)"

    def _problem(self, sender: str, to: Any, text: Any) -> str | None:
        """Why ``sender`` cannot send ``text`` to ``to`` (one line), or None."""
        if self._closing:
            return f"team {self.name!r} is shut down; message to {to!r} not sent"
        if not isinstance(to, str) or (to != self.lead and to not in self._members):
            return f"unknown teammate {to!r}; teammates: {self._addressable(sender)}"
        if to == sender:
            return f"cannot send a message to yourself ({to!r}); teammates: {self._addressable(sender)}"
        if not isinstance(text, str) or not text.strip():
            return f"empty message text {text!r}: write the message to send"
        return None

    def _broadcast_problem(self, sender: str, text: Any) -> str | None:
        if self._closing:
            return f"team {self.name!r} is shut down; broadcast not sent"
        if not isinstance(text, str) or not text.strip():
            return f"empty message text {text!r}: write the message to send"
        if not self._recipients(sender):
            return f"no teammates to broadcast to: team {self.name!r} has no member besides {sender!r}"
        return None

    async def _send_message(self, me: str, args: dict[str, Any]) -> ToolResult:
        """The ``send_message`` tool of teammate ``me``."""
        to, text = args.get("to"), args.get("text")
        problem = self._problem(me, to, text)
        if problem is not None:
            return ToolResult.error(problem)
        assert isinstance(to, str) and isinstance(text, str)
        mail = await self._post(me, to, text)
        note = ""
        target = self._members.get(to)
        if target is not None and target.failed:
            note = f" Note: {to}'s last run failed ({target.last_error}); this message starts a new one."
        return ToolResult(
            content=f"Message #{mail.id} sent to {to}.{note}",
            details={"id": mail.id, "to": to, "seq": mail.seq},
        )


    async def _broadcast(self, me: str, args: dict[str, Any]) -> ToolResult:
        """The ``broadcast`` tool of teammate ``me``."""
        text = args.get("text")
        problem = self._broadcast_problem(me, text)
        if problem is not None:
            return ToolResult.error(problem)
        assert isinstance(text, str)
        sent = [await self._post(me, to, text, broadcast=True) for to in self._recipients(me)]
        names = ", ".join(m.to for m in sent)
        return ToolResult(
            content=f"Message sent to {len(sent)} teammates: {names}.",
            details={"ids": [m.id for m in sent], "to": [m.to for m in sent]},
        )


    async def _list_teammates(self, me: str, args: dict[str, Any]) -> ToolResult:
        """The ``list_teammates`` tool of teammate ``me``."""
        lines = [f"Team {self.name!r} (you are {me!r}):"]
        rows: list[dict[str, Any]] = []
        lines.append(f"- {self.lead}: the team lead (runs the team; reads its messages itself)")
        for m in self._members.values():
            you = " (you)" if m.name == me else ""
            role = f": {m.description}" if m.description else ""
            failed = ", last run failed" if m.failed else ""
            lines.append(f"- {m.name}{you}{role} [{m.state}, {m.unread} unread{failed}]")
            rows.append(
                {
                    "name": m.name,
                    "description": m.description,
                    "state": m.state,
                    "unread": m.unread,
                    "failed": m.failed,
                }
            )
        return ToolResult(content="\n".join(lines), details=rows)

    async def _post(self, sender: str, to: str, text: str, *, broadcast: bool = False) -> Mail:
        key = (sender, to)
        seq = self._seqs.get(key, 0) + 1
        self._seqs[key] = seq
        mail = Mail(id=next(self._ids), sender=sender, to=to, text=text, seq=seq, broadcast=broadcast)
        self._log.append(mail)
        source = self._members.get(sender)
        if source is not None:
            source.sent += 1
        member = self._members.get(to)
        if member is None:  # the lead
            self._inbox.append(mail)
            self._changed.set()
        else:
            self._deliver(member, mail)
        if self._listeners:
            await self._emit(MailPosted(path=f"{self.name}/{to}", mail=mail))
        return mail

    def _deliver(self, m: Teammate, mail: Mail) -> None:
        """Hand ``mail`` to ``m``'s run as steering, or queue it and wake ``m``. Synchronous:
        nothing else runs between the decision and the hand-over."""
        entry = (UserMessage(content=render(mail)), mail)
        if m._in_run and m.agent.is_running:
            m._handed[id(entry[0])] = entry
            m._run_mail.append(mail)
            m.agent.steer(entry[0])
            return
        m._queue.append(entry)
        if m._task is None and not self._closing:
            self._active += 1
            self._quiet.clear()
            m._task = asyncio.get_running_loop().create_task(self._drive(m), name=f"ketch-team:{m.path}")

    async def _drive(self, m: Teammate) -> None:
        """Run ``m`` until its mailbox is empty; then end (see the module documentation)."""
        stalled = False
        _CURRENT.set(m)  # this task's own context: seen by the run's tool tasks
        try:
            await self._emit_state(m, "working")
            while True:
                if m.agent.is_running:  # someone else's run: wait for it
                    m._outside = True
                    try:
                        await m.agent.wait_for_idle()
                    finally:
                        m._outside = False
                    stalled = False
                    continue
                self._reclaim(m)
                if not self._closing and not stalled and m._queue:
                    if await self._run_once(m):
                        continue
                    # No message was read (the agent refused to run): stop, leaving the
                    # mail unread; the next message posted tries again.
                    stalled = True
                    continue
                await self._emit_state(m, "idle")
                self._reclaim(m)
                if self._closing or stalled or not m._queue:
                    break  # nothing awaits between this check and the end: no message is missed
                await self._emit_state(m, "working")
        except Exception:  # the team's own bookkeeping failed: never take the team down
            log.exception("Team %r: the driver of %r failed", self.name, m.name)
        finally:
            m._task = None
            m._in_run = False
            self._active -= 1
            if self._active == 0:
                self._quiet.set()
                self._changed.set()

    async def _run_once(self, m: Teammate) -> bool:
        """One run on everything in ``m``'s mailbox. True when it read at least one message."""
        batch = list(m._queue)
        m._queue.clear()
        for entry in batch:
            m._handed[id(entry[0])] = entry
        m._run_mail = [e[1] for e in batch]
        agent = m.agent
        start = len(agent.messages)
        before = m.received
        result: RunResult | None = None
        error: str | None = None
        m._in_run = True
        try:
            result = await agent.prompt([e[0] for e in batch])
        except Exception as exc:  # e.g. the agent was started by someone else meanwhile
            error = exception_text(exc)
        finally:
            m._in_run = False
        read = self._settle(m, start)
        m.runs += 1
        if result is not None:
            m.usage.add(result.usage)
            self._usage.add(result.usage)
            m.last_result = result
            reason = result.end_reason
            if reason != "stop" and not (reason == "aborted" and self._aborting):
                detail = f": {result.summary.error}" if result.summary.error else ""
                error = f"run ended with {reason}{detail}"
        m.failed = error is not None
        if self._listeners:
            for mail in read:
                await self._emit(MailRead(path=m.path, mail=mail))
        if error is not None:
            await self._fail(m, error, m._run_mail)
        m._run_mail = []
        return m.received > before

    def _settle(self, m: Teammate, start: int) -> list[Mail]:
        """After a run: the handed messages its transcript holds are read (in case their
        ``message_end`` was not seen); returns those."""
        if not m._handed:
            return []
        present = {id(x) for x in m.agent.messages[start:]}
        read: list[Mail] = []
        for key in [k for k in m._handed if k in present]:
            read.append(m._handed.pop(key)[1])
        m.received += len(read)
        return read

    def _reclaim(self, m: Teammate) -> None:
        """Take the handed messages a finished run did not read back from the agent's
        queues and put them first in the mailbox, in order."""
        mine = m._handed
        if not mine:
            return
        for queue in (m.agent.steering, m.agent.follow_ups):
            items = queue.peek()
            if any(id(x) in mine for x in items):
                queue.clear()
                for x in items:
                    if id(x) not in mine:
                        queue.push(x)
        m._queue[:0] = mine.values()
        mine.clear()

    async def _fail(self, m: Teammate, error: str, mails: list[Mail]) -> None:
        m.failures += 1
        m.errors.append(error)
        event = TeammateFailed(path=m.path, error=error, mail_ids=[x.id for x in mails])
        self._failures.append(event)
        log.warning("Team %r: teammate %r failed: %s", self.name, m.name, error)
        if self._listeners:
            await self._emit(event)
        if not self.notify_failures or self._closing:
            return
        senders: dict[str, list[int]] = {}
        for mail in mails:
            if mail.sender != TEAM_SENDER and mail.sender != m.name:
                senders.setdefault(mail.sender, []).append(mail.id)
        for sender, ids in senders.items():
            which = ", ".join(f"#{i}" for i in ids)
            text = f"Teammate {m.name!r} failed while handling your message {which}: {error}"
            await self._post(TEAM_SENDER, sender, text)

    def _listener(self, m: Teammate) -> Callable[[AgentEvent], Awaitable[None] | None]:
        def on_event(event: AgentEvent) -> Awaitable[None] | None:
            read: Mail | None = None
            if event.type == "message_end" and m._handed:
                entry = m._handed.pop(id(event.message), None)
                if entry is not None:
                    read = entry[1]
                    m.received += 1
            if not self._listeners:
                return None
            return self._forward(m, event, read)

        return on_event

    async def _forward(self, m: Teammate, event: AgentEvent, read: Mail | None) -> None:
        await self._emit(TeammateEvent(path=m.path, event=event))
        if read is not None:
            await self._emit(MailRead(path=m.path, mail=read))

    async def _emit_state(self, m: Teammate, state: TeammateStateName) -> None:
        if self._listeners:
            await self._emit(TeammateState(path=m.path, state=state))

    async def _emit(self, event: TeamEvent) -> None:
        for listener in list(self._listeners):
            try:
                out = listener(event)
                if out is not None and inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("Team listener failed on %s event", event.type)

    def _detach(self, m: Teammate) -> None:
        agent = m.agent
        if m._unsubscribe is not None:
            m._unsubscribe()
            m._unsubscribe = None
        ours = {id(t) for t in m._tools}
        agent.tools[:] = [t for t in agent.tools if id(t) not in ours]
        if m._note is not None and agent.system_prompt == m._note[1]:
            agent.system_prompt = m._note[0]
        m._note = None
