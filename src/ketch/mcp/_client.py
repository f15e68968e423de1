"""The MCP client: :class:`MCPManager`, every configured server's connection and tools.

One :class:`~ketch.mcp._connection.Connection` per server holds its connection (see
there for the lifecycle and the protocol versions); the manager starts them, lists
their tools as ketch tools, keeps an attached agent's tool list fresh, and routes what
servers send back (log messages, resource updates, sampling and elicitation requests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

from ketch.llm import AbortSignal
from ketch.llm import Model
from ketch.loop import NextTurn
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.loop import TurnInfo

from ._config import MCPServerConfig
from ._connection import KILL_GRACE
from ._connection import Connection
from ._tools import tool_name
from ._values import LOG_LEVELS
from ._values import NO_ELICITATION
from ._values import ElicitationCallback
from ._values import ElicitationRequest
from ._values import ElicitationResponse
from ._values import LoggingLevel
from ._values import MCPTool
from ._values import ServerLog
from ._values import ServerState
from ._values import ServerStatus
from ._values import TaskSupport
from ._values import describe

if TYPE_CHECKING:
    from ketch import Agent

__all__ = [
    "KILL_GRACE",
    "LOG_LEVELS",
    "NO_ELICITATION",
    "ElicitationCallback",
    "ElicitationRequest",
    "ElicitationResponse",
    "MCPManager",
    "MCPTool",
    "ServerLog",
    "ServerState",
    "ServerStatus",
]

log = logging.getLogger("ketch.mcp")

_PYTHON_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}



def _level_rank(level: str) -> int:
    return LOG_LEVELS.index(level) if level in LOG_LEVELS else 0


class _Invalid:
    """A configured server whose entry could not be read: listed as failed, never started."""

    def __init__(self, name: str, kind: str, reason: str) -> None:
        self.name = name
        self.kind = kind
        self.reason = reason

    def status(self) -> ServerStatus:
        return ServerStatus(name=self.name, type=self.kind, state="failed", error=self.reason)


class MCPManager:
    """Every configured MCP server's connection, and their tools as ketch tools.

    ``configs`` maps names to :class:`MCPServerConfig` (see :func:`load_mcp_json`);
    ``invalid`` names the servers whose configuration could not be read, each with its
    transport type and the reason: they are listed as ``failed`` and never started. A
    ``disabled`` server is listed as ``disabled`` and never started either.
    ``startup``: ``"lazy"`` starts a server on first use (:meth:`tools` or a call),
    ``"eager"`` starts them all, concurrently, on :meth:`start` (``async with`` calls
    it). ``startup_timeout`` bounds one server's start and handshake; ``call_timeout``
    one call (None: no limit besides the loop's ``tool_timeout``; a server's own
    ``timeout`` wins); a call that times out is cancelled on the server.

    ``protocol``: ``"auto"`` (the default) asks each server for the newest protocol
    version (2026-07-28) and falls back to the ``initialize`` handshake of the older ones
    (2025-11-25 down to 2024-11-05); ``"legacy"`` uses the handshake only.

    Server requests: ``elicitation`` answers ``elicitation/create`` and the URL
    elicitations a call's ``-32042`` error asks for (None declines every request with
    the reason :data:`NO_ELICITATION`); ``sampling_model`` serves
    ``sampling/createMessage``; with ``sample_with_agent`` the attached agent's model
    serves it instead, each request passing the agent's ``before_tool_call`` first as a
    call of the tool ``mcp__<server>__sampling`` (None and False, the defaults: the
    client does not offer sampling); ``roots`` are the workspace paths listed by
    ``roots/list`` (None: the client does not offer roots).

    Server messages: with ``log_level`` (one of :data:`LOG_LEVELS`) servers are asked for
    their log messages at that level and above (``logging/setLevel``, or per request on
    2026-07-28); each one (:class:`ServerLog`) goes to ``on_log``, or without it to the
    ``ketch.mcp`` logger. ``on_resource_updated(server, uri)`` hears about subscribed
    resources that changed (an attached agent also gets a note before its next turn).
    ``errlog`` receives stdio servers' stderr.

    Tasks (2025-11-25): a tool that requires task support is always called as a task, one
    that allows it when its server takes task-augmented calls. A task's status messages
    are its progress; after ``task_wait`` seconds the call returns the task's id to the
    model, which waits for the result with ``mcp__<server>__task_result`` later (the task
    outlives the turn); an aborted wait cancels the task, and so does :meth:`aclose` for
    a task whose result nobody fetched.

    OAuth: with ``auth_dir`` an http or sse server that asks for authorization gets the
    stored token of its URL (``auth_dir/<server>.json``, a :class:`TokenFile` written by
    :func:`login`), refreshed before it expires; without one (or when the server refuses it after one
    refresh) the server fails with a message naming ``ketch mcp login NAME``.

    A server that fails to start is reported by :meth:`status` and left out of
    :meth:`tools`; a connection that dies makes the call an error result, and the next
    call starts the server again. :meth:`aclose` stops every server (a stdio server's
    process and its children are gone when it returns); a stdio server still busy with a
    call, one it may have been told to cancel, is ended with SIGTERM at once and SIGKILL
    after :data:`KILL_GRACE` seconds instead of being waited for.
    """

    def __init__(
        self,
        configs: Mapping[str, MCPServerConfig] | Iterable[MCPServerConfig],
        *,
        startup: Literal["lazy", "eager"] = "lazy",
        startup_timeout: float = 30.0,
        call_timeout: float | None = None,
        elicitation: ElicitationCallback | None = None,
        sampling_model: Model | None = None,
        sample_with_agent: bool = False,
        roots: Sequence[str | Path] | None = None,
        errlog: Any = None,
        log_level: LoggingLevel | None = None,
        on_log: Callable[[ServerLog], object] | None = None,
        on_resource_updated: Callable[[str, str], object] | None = None,
        task_wait: float = 60.0,
        protocol: Literal["auto", "legacy"] = "auto",
        auth_dir: str | Path | None = None,
        invalid: Mapping[str, tuple[str, str]] | None = None,
        _auth: Any = None,
    ) -> None:
        if startup not in ("lazy", "eager"):
            raise ValueError(f"startup must be 'lazy' or 'eager', got {startup!r}")
        if log_level is not None and log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
        if protocol not in ("auto", "legacy"):
            raise ValueError(f"protocol must be 'auto' or 'legacy', got {protocol!r}")
        if not task_wait >= 0:
            raise ValueError(f"task_wait must be a number of seconds >= 0, got {task_wait!r}")
        items = list(configs.values()) if isinstance(configs, Mapping) else list(configs)
        self.startup = startup
        self.startup_timeout = startup_timeout
        self.call_timeout = call_timeout
        self.elicitation = elicitation
        self.sampling_model = sampling_model
        self.sample_with_agent = sample_with_agent
        self.roots: list[Path] | None = [Path(p).resolve() for p in roots] if roots is not None else None
        if errlog is None:
            import sys

            errlog = sys.stderr
        self.errlog = errlog
        self.log_level: LoggingLevel | None = log_level
        self.on_log = on_log
        self.on_resource_updated = on_resource_updated
        self.task_wait = task_wait
        self.protocol: Literal["auto", "legacy"] = protocol
        self.auth_dir: Path | None = Path(auth_dir) if auth_dir is not None else None
        self._login_auth = _auth  # the provider of a login (ketch.mcp._auth.login)
        self._servers: dict[str, Connection] = {}
        for cfg in items:
            if cfg.name in self._servers:
                raise ValueError(f"two MCP servers are named {cfg.name!r}")
            self._servers[cfg.name] = Connection(cfg, self)
        self._invalid: dict[str, _Invalid] = {}
        for name, (kind, reason) in (invalid or {}).items():
            if name in self._servers or name in self._invalid:
                raise ValueError(f"two MCP servers are named {name!r}")
            self._invalid[name] = _Invalid(name, kind, reason)
        self._agent: Agent[Any] | None = None
        self._agents: list[Agent[Any]] = []
        self._updated: set[tuple[str, str]] = set()
        self._changed = False
        self._closed = False
        self._spawn_lock = asyncio.Lock()  # stdio servers start one at a time (see Connection._spawned)

    @property
    def _samples(self) -> bool:
        """Whether the client offers sampling."""
        return self.sampling_model is not None or self.sample_with_agent

    def _sampling_model(self) -> Model | None:
        if self.sampling_model is not None:
            return self.sampling_model
        return self._agent.model if self._agent is not None and self.sample_with_agent else None

    @property
    def servers(self) -> list[str]:
        """The configured server names, in order (those with a broken configuration last)."""
        return [*self._servers, *self._invalid]

    async def start(self) -> None:
        """Start every server that is not running, concurrently (failures go to :meth:`status`)."""
        await asyncio.gather(*(self._start_quietly(s) for s in self._servers.values() if s.state != "disabled"))

    async def _start_quietly(self, server: Connection) -> None:
        try:
            await server.ensure()
        except ConnectionError as exc:
            log.warning("%s", exc)

    async def tools(self) -> list[Tool]:
        """Every server's tools as ketch tools (``mcp__<server>__<tool>``), plus the
        helper tools of servers that have resources, prompts or tasks; starts servers as
        needed and lists again those that announced a change. Servers that fail to
        start, and disabled ones, are left out (see :meth:`status`)."""
        if self._closed:
            raise RuntimeError("MCPManager is closed")
        self._changed = False

        async def one(server: Connection) -> list[Tool]:
            if server.state == "disabled":
                return []
            if server.tools is not None and not server.tools_stale and server.state == "running":
                return server.tools
            try:
                return await server.list_tools()
            except ConnectionError as exc:
                log.warning("%s", exc)
            except Exception as exc:
                server.error = f"listing tools failed ({describe(exc)})"
                log.warning("MCP server %r: %s", server.name, server.error)
            return server.tools or []

        lists = await asyncio.gather(*(one(s) for s in self._servers.values()))
        return [t for tools in lists for t in tools]

    @property
    def changed(self) -> bool:
        """Whether a server announced that its tool list changed since the last :meth:`tools`."""
        return self._changed

    async def refresh(self, tools: Sequence[Tool]) -> list[Tool]:
        """``tools`` with this manager's MCP tools replaced by the current ones (the
        others kept in place; the MCP tools go where the first of them was)."""
        return self._replace(tools, await self.tools())

    def _replace(self, tools: Sequence[Tool], fresh: list[Tool]) -> list[Tool]:
        ours = set(self._servers)
        out: list[Tool] = []
        inserted = False
        for t in tools:
            if isinstance(t, MCPTool) and t.server in ours:
                if not inserted:
                    out.extend(fresh)
                    inserted = True
                continue
            out.append(t)
        if not inserted:
            out.extend(fresh)
        return out

    async def prepare_next_turn(self, turn: TurnInfo) -> NextTurn | None:
        """A ``prepare_next_turn`` hook: after a server announced ``tools/list_changed``,
        the next turn gets the new tool list (otherwise None: nothing changes)."""
        self._updated.clear()
        if not self._changed:
            return None
        return NextTurn(tools=await self.refresh(turn.conversation.tools))

    async def attach(self, agent: Agent[Any]) -> None:
        """Wire this manager into ``agent``: add the MCP tools to ``agent.tools``, refresh
        them between turns (chained before any ``prepare_next_turn`` the agent had) and
        after a run when a server announced a change. With ``sample_with_agent`` the
        agent's model (the one current at each request) serves sampling."""
        self._agent = agent
        self._agents.append(agent)
        agent.tools = await self.refresh(agent.tools)
        previous = agent.config.prepare_next_turn

        async def hook(turn: TurnInfo) -> NextTurn | None:
            mine = await self.prepare_next_turn(turn)
            if previous is None:
                return mine
            theirs = previous(turn)
            if asyncio.iscoroutine(theirs) or isinstance(theirs, Awaitable):
                theirs = await theirs
            if theirs is None:
                return mine
            if mine is not None and theirs.tools is None:
                theirs.tools = mine.tools
            return theirs

        agent.config.prepare_next_turn = hook

        async def on_event(event: Any) -> None:
            if event.type != "agent_end" or self._closed:
                return
            if self._changed:
                agent.tools = await self.refresh(agent.tools)
                return
            # a list refreshed during the run (prepare_next_turn) is kept for the next run
            current = [t for s in self._servers.values() for t in s.tools or ()]
            mine = [t for t in agent.tools if isinstance(t, MCPTool) and t.server in self._servers]
            if [id(t) for t in mine] != [id(t) for t in current]:
                agent.tools = self._replace(agent.tools, current)

        agent.subscribe(on_event)

    # -- what servers send ------------------------------------------------------------------
    def _server_log(self, record: ServerLog) -> None:
        if self.log_level is not None and _level_rank(record.level) < _level_rank(self.log_level):
            return
        if self.on_log is not None:
            try:
                self.on_log(record)
            except Exception as exc:
                log.warning("MCP on_log callback failed: %s", describe(exc))
            return
        where = f" [{record.logger}]" if record.logger else ""
        log.log(_PYTHON_LEVELS.get(record.level, logging.INFO), "MCP server %r%s %s: %s", record.server, where, record.level, record.text)

    def _resource_updated(self, server: str, uri: str) -> None:
        if self.on_resource_updated is not None:
            try:
                self.on_resource_updated(server, uri)
            except Exception as exc:
                log.warning("MCP on_resource_updated callback failed: %s", describe(exc))
        if (server, uri) in self._updated:
            return
        self._updated.add((server, uri))
        note = (
            f"[MCP server {server!r}: the resource {uri} changed; "
            f"read it again with {tool_name(server, 'read_resource')} if you need it]"
        )
        for agent in self._agents:
            agent.add_context(note)

    # -- direct use --------------------------------------------------------------------------
    async def call(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call ``tool`` of ``server`` directly (outside an agent), as a ketch result."""
        conn = self._get(server)
        support: TaskSupport = next(
            (t.task_support for t in conn.tools or () if isinstance(t, MCPTool) and t.mcp_name == tool), "forbidden"
        )
        ctx: ToolContext[Any] = ToolContext(call_id="direct", tool_name=tool_name(server, tool), signal=AbortSignal())
        return await conn.call(tool, arguments or {}, ctx, support)

    async def subscribe(self, server: str, uri: str) -> None:
        """Subscribe to the resource ``uri`` of ``server``: its changes go to
        ``on_resource_updated`` and to the attached agents."""
        await self._get(server).subscribe(uri)

    async def unsubscribe(self, server: str, uri: str) -> None:
        """Stop hearing about the resource ``uri`` of ``server``."""
        await self._get(server).subscribe(uri, on=False)

    async def complete(
        self,
        server: str,
        argument: str,
        value: str,
        *,
        prompt: str | None = None,
        resource: str | None = None,
        context: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The values ``server`` suggests for ``argument`` of the prompt ``prompt`` (or of
        the resource template ``resource``) starting from ``value`` (``completion/complete``;
        ``context`` holds the arguments already chosen). A server without completions
        suggests nothing."""
        import mcp_types as types

        if (prompt is None) == (resource is None):
            raise ValueError("give exactly one of prompt= or resource=")
        conn = self._get(server)
        client = await conn.ensure()
        caps = conn.capabilities
        if caps is None or caps.completions is None:
            return []
        ref: Any = (
            types.PromptReference(type="ref/prompt", name=prompt)
            if prompt is not None
            else types.ResourceTemplateReference(type="ref/resource", uri=str(resource))
        )
        result = await client.complete(ref, {"name": argument, "value": value}, dict(context) if context else None)
        return list(result.completion.values)

    def _get(self, name: str) -> Connection:
        try:
            return self._servers[name]
        except KeyError:
            if name in self._invalid:
                raise KeyError(f"MCP server {name!r} has a broken configuration: {self._invalid[name].reason}") from None
            raise KeyError(f"no MCP server named {name!r} (configured: {', '.join(self.servers) or 'none'})") from None

    def status(self) -> list[ServerStatus]:
        """Each server's state, tools and last error, in configuration order (those with a
        broken configuration last)."""
        return [*(s.status() for s in self._servers.values()), *(i.status() for i in self._invalid.values())]

    async def aclose(self) -> None:
        """Stop every server and close every connection (idempotent)."""
        self._closed = True
        await asyncio.gather(*(s.close() for s in self._servers.values()), return_exceptions=True)

    async def __aenter__(self) -> MCPManager:
        if self.startup == "eager":
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"MCPManager(servers={self.servers!r})"
