"""Connections to MCP servers (official ``mcp`` SDK) and :class:`MCPManager`.

Each server's connection lives in one background task that enters the SDK's transport
and session contexts and leaves them on :meth:`MCPManager.aclose` (anyio contexts must
be left by the task that entered them). Calls are made from the tool's own task, so
cancelling the task (the loop does on abort, steering interrupt and timeout) abandons
the request and the SDK sends ``notifications/cancelled`` for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import TypeAlias

from ketch.llm import AssistantMessage
from ketch.llm import ImageContent
from ketch.llm import Message
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.loop import NextTurn
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.loop import TurnInfo

from ._config import MCPServerConfig
from ._tools import convert_content
from ._tools import convert_result
from ._tools import dump
from ._tools import flags
from ._tools import tool_name

if TYPE_CHECKING:
    from ketch import Agent
    from mcp import ClientSession

log = logging.getLogger("ketch.mcp")

KILL_GRACE = 1.0
"""Seconds between the SIGTERM and the SIGKILL that end a stdio server still busy with a
call when its connection closes (see :meth:`MCPManager.aclose`)."""

ServerState: TypeAlias = Literal["stopped", "starting", "running", "failed"]


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """A server asks the user for input (``elicitation/create``).

    ``mode`` is ``"form"`` (answer with ``content`` matching ``requested_schema``) or
    ``"url"`` (the user is to open ``url``; answer ``accept`` once they agreed).
    """

    server: str
    message: str
    mode: Literal["form", "url"] = "form"
    requested_schema: dict[str, Any] = field(default_factory=dict)
    url: str | None = None


@dataclass(frozen=True, slots=True)
class ElicitationResponse:
    """The answer to an :class:`ElicitationRequest`: ``accept`` (with ``content`` in form
    mode), ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


ElicitationCallback: TypeAlias = Callable[[ElicitationRequest], Awaitable[ElicitationResponse]]

NO_ELICITATION = "ketch has no one to ask (no elicitation callback); declined"
"""The reason sent (in the result's ``_meta``) when an elicitation is declined for lack of a callback."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """One server as :meth:`MCPManager.status` reports it.

    ``state``: ``stopped`` (not started, or closed), ``starting``, ``running``,
    ``failed`` (start-up failed or the connection died; ``error`` says why; the next
    use starts it again). ``tools`` are the ketch names of its tools as last listed.
    """

    name: str
    type: str
    state: ServerState
    tools: tuple[str, ...] = ()
    error: str | None = None


class MCPTool(Tool):
    """A ketch tool backed by an MCP server's tool (``server``, ``mcp_name``)."""

    __slots__ = ("mcp_name", "server")

    def __init__(self, name: str, *, server: str, mcp_name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.server = server
        self.mcp_name = mcp_name


def _schema(raw: Any) -> dict[str, Any]:
    schema = dict(raw) if isinstance(raw, Mapping) else {}
    schema.pop("$schema", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Server:
    """One configured server: its connection task, session and tool list."""

    def __init__(self, config: MCPServerConfig, manager: MCPManager) -> None:
        self.config = config
        self.manager = manager
        self.state: ServerState = "stopped"
        self.error: str | None = None
        self.session: ClientSession | None = None
        self.capabilities: Any = None
        self.tools: list[Tool] | None = None
        self.tools_stale = True
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        # a stdio server's process group (None: unknown, or not stdio), and the calls of
        # this connection that are running or were abandoned unanswered (cancelled, timed out)
        self._pgid: int | None = None
        self._busy: set[object] = set()

    # -- lifecycle ------------------------------------------------------------------------
    async def ensure(self) -> ClientSession:
        """The running session, starting (or restarting) the server when needed."""
        session = self.session
        if session is not None and self.state == "running":
            return session
        async with self._lock:
            if self.session is not None and self.state == "running":
                return self.session
            if self.manager._closed:
                raise ConnectionError(f"MCP server {self.config.name!r} is closed (the MCPManager was closed)")
            await self._shutdown()
            return await self._start()

    async def _start(self) -> ClientSession:
        try:  # imported before the start-up clock runs: the first import takes a while
            _load_sdk(self.config.type)
        except ImportError:
            self.state, self.error = "failed", "needs the mcp package: pip install 'ketch[mcp]'"
            raise ConnectionError(f"MCP server {self.config.name!r} {self.error}") from None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[ClientSession] = loop.create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even after a timeout
        self._stop = asyncio.Event()
        self.state = "starting"
        self.error = None
        self._busy = set()
        self._task = asyncio.create_task(self._run(ready, self._stop), name=f"mcp-{self.config.name}")
        timeout = self.manager.startup_timeout
        try:
            async with asyncio.timeout(timeout):
                session = await asyncio.shield(ready)
        except TimeoutError:
            await self._shutdown()
            self.state, self.error = "failed", f"did not start within {timeout:g} s"
            raise ConnectionError(f"MCP server {self.config.name!r} {self.error}") from None
        except asyncio.CancelledError:
            await asyncio.shield(self._shutdown())
            raise
        except Exception as exc:
            await self._shutdown()
            self.state, self.error = "failed", f"failed to start ({_describe(exc)})"
            raise ConnectionError(f"MCP server {self.config.name!r} {self.error}") from exc
        self.session = session
        self.state = "running"
        self.tools_stale = True
        return session

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        cfg = self.config
        if cfg.type == "stdio":
            from mcp.client.stdio import StdioServerParameters
            from mcp.client.stdio import stdio_client

            assert cfg.command is not None
            params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None, cwd=cfg.cwd)
            return stdio_client(params, errlog=self.manager.errlog)
        assert cfg.url is not None
        if cfg.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(cfg.url, headers=dict(cfg.headers) or None, timeout=self.manager.startup_timeout)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        return _http(cfg.url, create_mcp_http_client(headers=dict(cfg.headers) or None), streamable_http_client)

    async def _run(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        from mcp import ClientSession

        manager = self.manager
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.config.type == "stdio":
                    read, write = await self._spawn(stack)
                else:
                    read, write = await stack.enter_async_context(self._transport())
                session = ClientSession(
                    read,
                    write,
                    sampling_callback=self._sampling if manager.sampling_model is not None else None,
                    elicitation_callback=self._elicitation,
                    list_roots_callback=self._roots if manager.roots is not None else None,
                    message_handler=self._on_message,
                    client_info=_client_info(),
                )
                await stack.enter_async_context(session)
                result = await session.initialize()
                self.capabilities = result.capabilities
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(_describe(exc)))
            elif not stop.is_set():
                self._died(f"connection failed ({_describe(exc)})")
            if not isinstance(exc, Exception):
                raise
        else:
            if not ready.done():
                ready.set_exception(ConnectionError("stopped before it started"))

    async def _spawn(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        """Enter the stdio transport, noting the server's process group: the SDK starts
        the server as the leader of a new session, so it is the one new child group
        (found when exactly one appeared; spawns of this manager's servers take turns)."""
        from ketch._proc import child_groups
        from ketch._proc import live_process_groups

        async with self.manager._spawn_lock:
            before = child_groups()
            streams: tuple[Any, Any] = await stack.enter_async_context(self._transport())
            fresh = child_groups() - before - live_process_groups()
        self._pgid = next(iter(fresh)) if len(fresh) == 1 else None
        return streams

    def _died(self, reason: str) -> None:
        if self.state == "running" or self.state == "starting":
            self.state, self.error = "failed", reason
            self.session = None

    async def _shutdown(self) -> None:
        """Close the connection. A stdio server still busy with a call (running, or
        cancelled or timed out without an answer: it may ignore the cancellation) is not
        waited for: its process group gets SIGTERM at once and SIGKILL after
        :data:`KILL_GRACE` seconds, while the SDK closes its pipes; an idle one gets the
        SDK's polite close (stdin closed, then SIGTERM and SIGKILL after its own grace)."""
        import signal

        from ketch._proc import group_alive
        from ketch._proc import kill_group_if_alive
        from ketch._proc import signal_group

        task, stop = self._task, self._stop
        started = self.state == "running"
        pgid, busy = self._pgid, bool(self._busy)
        self._task = self._stop = self._pgid = None
        self._busy = set()
        self.session = None
        if task is None:
            return
        assert stop is not None
        killer: asyncio.TimerHandle | None = None
        if pgid is not None and busy and group_alive(pgid):
            signal_group(pgid, signal.SIGTERM)  # before the SDK closes stdin (the server is not reaped yet)
            killer = asyncio.get_running_loop().call_later(KILL_GRACE, kill_group_if_alive, pgid)
        stop.set()
        if not started:  # still connecting or handshaking: nothing to finish politely
            task.cancel()
        try:
            async with asyncio.timeout(10.0):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except BaseException:  # the task's own failure was already recorded
            pass
        finally:
            if killer is not None:
                killer.cancel()

    async def close(self) -> None:
        async with self._lock:
            await self._shutdown()
        self.state = "stopped"

    # -- server -> client ---------------------------------------------------------------
    async def _on_message(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, types.ToolListChangedNotification):
            self.tools_stale = True
            self.manager._changed = True
        elif isinstance(message, Exception):
            log.debug("MCP server %r transport error: %s", self.config.name, message)

    async def _elicitation(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        callback = self.manager.elicitation
        if callback is None:
            return types.ElicitResult(action="decline", _meta={"reason": NO_ELICITATION})
        request = ElicitationRequest(
            server=self.config.name,
            message=params.message,
            mode=getattr(params, "mode", "form") or "form",
            requested_schema=dump(getattr(params, "requested_schema", None)) or {},
            url=getattr(params, "url", None),
        )
        try:
            answer = await callback(request)
        except Exception as exc:
            log.warning("MCP elicitation callback failed: %s", _describe(exc))
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the client's elicitation callback failed ({_describe(exc)})")
        return types.ElicitResult(action=answer.action, content=answer.content if answer.action == "accept" else None)

    async def _sampling(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        model = self.manager.sampling_model
        assert model is not None
        messages: list[Message] = []
        for m in params.messages:
            blocks = convert_content(m.content if isinstance(m.content, list) else [m.content])
            if m.role == "assistant":
                messages.append(AssistantMessage(content=[b for b in blocks if isinstance(b, TextContent)]))
            else:
                messages.append(UserMessage(content=list(blocks)))
        options = StreamOptions(max_tokens=params.max_tokens, temperature=params.temperature)
        reply = await complete(model, Request(system_prompt=params.system_prompt or "", messages=messages), options)
        if reply.stop_reason in ("error", "aborted"):
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"sampling failed: {reply.error_message or reply.stop_reason}")
        text = "".join(b.text for b in reply.content if isinstance(b, TextContent))
        stop = "maxTokens" if reply.stop_reason == "length" else "endTurn"
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text), model=model.id, stop_reason=stop
        )

    async def _roots(self, context: Any) -> Any:
        import mcp_types as types

        roots = [types.Root(uri=p.as_uri(), name=p.name or str(p)) for p in self.manager.roots or ()]  # type: ignore[arg-type]
        return types.ListRootsResult(roots=roots)

    # -- tools ----------------------------------------------------------------------------
    async def list_tools(self) -> list[Tool]:
        session = await self.ensure()
        self.tools_stale = False
        listed: list[Any] = []
        cursor: str | None = None
        while True:
            if cursor is None:
                result = await session.list_tools()
            else:
                import mcp_types as types

                result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            listed.extend(result.tools)
            cursor = result.next_cursor
            if not cursor:
                break
        tools: list[Tool] = [self._tool(t) for t in listed]
        tools.extend(self._helpers({t.name for t in tools}, *await self._offers(session)))
        self.tools = tools
        return tools

    def _tool(self, remote: Any) -> Tool:
        read_only, sequential = flags(remote.annotations, trusted=self.config.trust_annotations)
        name = tool_name(self.config.name, remote.name)
        description = remote.description or (remote.annotations.title if remote.annotations else None) or ""

        async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
            return await self.call(remote.name, args, ctx)

        return MCPTool(
            name,
            server=self.config.name,
            mcp_name=remote.name,
            description=description,
            parameters=_schema(remote.input_schema),
            execute=execute,
            label=remote.title or None,
            read_only=read_only,
            sequential=sequential,
        )

    async def call(self, name: str, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        where = f"MCP server {self.config.name!r}"
        try:
            session = await self.ensure()
        except ConnectionError as exc:
            return ToolResult.error(f"{exc}; the call to {name!r} did not run")

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.report({"progress": progress, "total": total, "message": message})

        timeout = self.manager.call_timeout
        busy, token, abandoned = self._busy, object(), False
        busy.add(token)
        try:
            async with asyncio.timeout(timeout):
                result = await session.call_tool(name, args, progress_callback=on_progress)
        except TimeoutError:
            abandoned = True
            return ToolResult.error(f"{where}: {name!r} timed out after {timeout:g} s (the server was told to cancel it)")
        except asyncio.CancelledError:
            abandoned = True  # the server was told to cancel it; it may not
            raise
        except Exception as exc:
            from mcp.shared.exceptions import MCPError

            if isinstance(exc, MCPError) and exc.code != -32000:  # a JSON-RPC error from the server
                return ToolResult.error(f"{where}: {name!r} failed: {exc.message}")
            self._died(f"connection lost ({_describe(exc)})")
            return ToolResult.error(
                f"{where}: the connection was lost during {name!r} ({_describe(exc)}); "
                "the server is restarted on the next call"
            )
        finally:
            if not abandoned:
                busy.discard(token)
        return convert_result(result)

    async def _offers(self, session: ClientSession) -> tuple[bool, bool]:
        """Whether the server has any resources (or templates) and any prompts: a
        capability alone does not say (some SDKs declare them always)."""
        caps = self.capabilities

        async def count(fn: Callable[[], Awaitable[Any]], attr: str) -> int:
            try:
                return len(getattr(await fn(), attr))
            except Exception:
                return 0

        resources = prompts = False
        if caps is not None and caps.resources is not None:
            found = await asyncio.gather(
                count(session.list_resources, "resources"), count(session.list_resource_templates, "resource_templates")
            )
            resources = any(found)
        if caps is not None and caps.prompts is not None:
            prompts = await count(session.list_prompts, "prompts") > 0
        return resources, prompts

    def _helpers(self, taken: set[str], resources: bool, prompts: bool) -> list[Tool]:
        server = self.config.name
        helpers: list[Tool] = []

        def add(suffix: str, description: str, parameters: dict[str, Any], fn: Callable[[dict[str, Any]], Awaitable[ToolResult]]) -> None:
            name = tool_name(server, suffix)
            if name in taken:
                return

            async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
                try:
                    await self.ensure()
                    async with asyncio.timeout(self.manager.call_timeout):
                        return await fn(args)
                except TimeoutError:
                    return ToolResult.error(f"MCP server {server!r}: {suffix} timed out")
                except Exception as exc:
                    return ToolResult.error(f"MCP server {server!r}: {suffix} failed ({_describe(exc)})")

            helpers.append(
                MCPTool(name, server=server, mcp_name="", description=description, parameters=parameters,
                        execute=execute, read_only=True, reports_progress=False)
            )

        if resources:
            add("list_resources", f"List the resources (and resource templates) of the MCP server {server!r}.",
                {"type": "object", "properties": {}}, self._list_resources)
            add("read_resource", f"Read a resource of the MCP server {server!r} by its URI.",
                {"type": "object", "properties": {"uri": {"type": "string", "description": "The resource URI"}},
                 "required": ["uri"]}, self._read_resource)
        if prompts:
            add("list_prompts", f"List the prompts of the MCP server {server!r} with their arguments.",
                {"type": "object", "properties": {}}, self._list_prompts)
            add("get_prompt", f"Get a prompt of the MCP server {server!r}, filled with arguments.",
                {"type": "object", "properties": {
                    "name": {"type": "string", "description": "The prompt name"},
                    "arguments": {"type": "object", "additionalProperties": {"type": "string"},
                                  "description": "The prompt's arguments (strings)"}},
                 "required": ["name"]}, self._get_prompt)
        return helpers

    async def _list_resources(self, args: dict[str, Any]) -> ToolResult:
        session = await self.ensure()
        resources = (await session.list_resources()).resources
        lines = [f"{r.uri}  {r.name}" + (f" ({r.mime_type})" if r.mime_type else "") + (f" - {r.description}" if r.description else "")
                 for r in resources]
        try:
            templates = (await session.list_resource_templates()).resource_templates
        except Exception:  # a server without templates
            templates = []
        lines += [f"{t.uri_template}  {t.name} (template)" + (f" - {t.description}" if t.description else "") for t in templates]
        return ToolResult(content="\n".join(lines) if lines else "(no resources)",
                          details={"resources": [dump(r) for r in resources], "templates": [dump(t) for t in templates]})

    async def _read_resource(self, args: dict[str, Any]) -> ToolResult:
        session = await self.ensure()
        result = await session.read_resource(str(args["uri"]))
        from ._tools import _resource_text

        return ToolResult(content=[_resource_text(c) for c in result.contents])

    async def _list_prompts(self, args: dict[str, Any]) -> ToolResult:
        session = await self.ensure()
        prompts = (await session.list_prompts()).prompts
        lines = []
        for p in prompts:
            params = ", ".join(a.name + ("" if a.required else "?") for a in p.arguments or ())
            lines.append(f"{p.name}({params})" + (f" - {p.description}" if p.description else ""))
        return ToolResult(content="\n".join(lines) if lines else "(no prompts)", details={"prompts": [dump(p) for p in prompts]})

    async def _get_prompt(self, args: dict[str, Any]) -> ToolResult:
        session = await self.ensure()
        arguments = {str(k): str(v) for k, v in (args.get("arguments") or {}).items()}
        result = await session.get_prompt(str(args["name"]), arguments or None)
        content: list[TextContent | ImageContent] = []
        for m in result.messages:
            blocks = convert_content([m.content])
            content.append(TextContent(text=f"[{m.role}]"))
            content.extend(blocks)
        return ToolResult(content=content, details={"description": result.description})

    def status(self) -> ServerStatus:
        names = tuple(t.name for t in self.tools or ())
        return ServerStatus(name=self.config.name, type=self.config.type, state=self.state, tools=names, error=self.error)


def _load_sdk(kind: str) -> None:
    """Import the SDK modules a connection of this ``kind`` uses (once per process)."""
    import mcp_types

    import mcp

    if kind == "stdio":
        import mcp.client.stdio
    elif kind == "sse":
        import mcp.client.sse
    else:
        import mcp.client.streamable_http
        import mcp.shared._httpx_utils
    del mcp, mcp_types


@contextlib.asynccontextmanager
async def _http(url: str, client: Any, connect: Any) -> Any:
    async with client, connect(url, http_client=client) as streams:
        yield streams


def _client_info() -> Any:
    import mcp_types as types

    import ketch

    return types.Implementation(name="ketch", version=str(ketch.__version__))


class MCPManager:
    """Every configured MCP server's connection, and their tools as ketch tools.

    ``configs`` maps names to :class:`MCPServerConfig` (see :func:`load_mcp_json`).
    ``startup``: ``"lazy"`` starts a server on first use (:meth:`tools` or a call),
    ``"eager"`` starts them all, concurrently, on :meth:`start` (``async with`` calls
    it). ``startup_timeout`` bounds one server's start and handshake;
    ``call_timeout`` one call (None: no limit besides the loop's ``tool_timeout``); a
    call that times out is cancelled on the server.

    Server requests: ``elicitation`` answers ``elicitation/create`` (None declines
    every request with the reason :data:`NO_ELICITATION`); ``sampling_model`` serves
    ``sampling/createMessage`` (None, the default: the client does not offer
    sampling); ``roots`` are the workspace paths listed by ``roots/list`` (None: the
    client does not offer roots). ``errlog`` receives stdio servers' stderr.

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
        roots: Sequence[str | Path] | None = None,
        errlog: Any = None,
    ) -> None:
        if startup not in ("lazy", "eager"):
            raise ValueError(f"startup must be 'lazy' or 'eager', got {startup!r}")
        items = list(configs.values()) if isinstance(configs, Mapping) else list(configs)
        self.startup = startup
        self.startup_timeout = startup_timeout
        self.call_timeout = call_timeout
        self.elicitation = elicitation
        self.sampling_model = sampling_model
        self.roots: list[Path] | None = [Path(p).resolve() for p in roots] if roots is not None else None
        if errlog is None:
            import sys

            errlog = sys.stderr
        self.errlog = errlog
        self._servers: dict[str, _Server] = {}
        for cfg in items:
            if cfg.name in self._servers:
                raise ValueError(f"two MCP servers are named {cfg.name!r}")
            self._servers[cfg.name] = _Server(cfg, self)
        self._changed = False
        self._closed = False
        self._spawn_lock = asyncio.Lock()  # stdio servers start one at a time (see _Server._spawn)

    @property
    def servers(self) -> list[str]:
        """The configured server names, in order."""
        return list(self._servers)

    async def start(self) -> None:
        """Start every server that is not running, concurrently (failures go to :meth:`status`)."""
        await asyncio.gather(*(self._start_quietly(s) for s in self._servers.values()))

    async def _start_quietly(self, server: _Server) -> None:
        try:
            await server.ensure()
        except ConnectionError as exc:
            log.warning("%s", exc)

    async def tools(self) -> list[Tool]:
        """Every server's tools as ketch tools (``mcp__<server>__<tool>``), plus the
        resource and prompt helper tools of servers that have them; starts servers as
        needed and lists again those that announced a change. Servers that fail to
        start are left out (see :meth:`status`)."""
        if self._closed:
            raise RuntimeError("MCPManager is closed")
        self._changed = False

        async def one(server: _Server) -> list[Tool]:
            if server.tools is not None and not server.tools_stale and server.state == "running":
                return server.tools
            try:
                return await server.list_tools()
            except ConnectionError as exc:
                log.warning("%s", exc)
            except Exception as exc:
                server.error = f"listing tools failed ({_describe(exc)})"
                log.warning("MCP server %r: %s", server.config.name, server.error)
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
        if not self._changed:
            return None
        return NextTurn(tools=await self.refresh(turn.conversation.tools))

    async def attach(self, agent: Agent[Any]) -> None:
        """Wire this manager into ``agent``: add the MCP tools to ``agent.tools``, refresh
        them between turns (chained before any ``prepare_next_turn`` the agent had) and
        after a run when a server announced a change."""
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

    async def call(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call ``tool`` of ``server`` directly (outside an agent), as a ketch result."""
        from ketch.llm import AbortSignal

        ctx: ToolContext[Any] = ToolContext(call_id="direct", tool_name=tool_name(server, tool), signal=AbortSignal())
        return await self._get(server).call(tool, arguments or {}, ctx)

    def _get(self, name: str) -> _Server:
        try:
            return self._servers[name]
        except KeyError:
            raise KeyError(f"no MCP server named {name!r} (configured: {', '.join(self._servers) or 'none'})") from None

    def status(self) -> list[ServerStatus]:
        """Each server's state, tools and last error, in configuration order."""
        return [s.status() for s in self._servers.values()]

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
        return f"MCPManager(servers={list(self._servers)!r})"
