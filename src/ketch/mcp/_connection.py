"""One MCP server's connection: its background task, the SDK client, its tools.

The connection lives in one background task that enters the SDK's client (transport,
session, handshake) and leaves it on close (anyio contexts must be left by the task that
entered them). Calls are made from the tool's own task, so cancelling the task (the loop
does on abort, steering interrupt and timeout) abandons the request and the SDK sends
``notifications/cancelled`` for it (a task-augmented call also gets ``tasks/cancel``).

The SDK's client negotiates the protocol: ``server/discover`` at 2026-07-28, the
``initialize`` handshake (2025-11-25 and older) for a server that does not answer it.
What differs between the two is handled here: change notifications arrive as
notifications on a handshake connection and on a ``subscriptions/listen`` stream on a
2026-07-28 one; ``logging/setLevel`` exists only on the former (the latter asks for log
messages per request); tasks exist only on the former.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import warnings
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import DocumentContent
from ketch.llm import ImageContent
from ketch.llm import Message
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.loop import Conversation
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolContext
from ketch.loop import ToolResult

from . import _tasks
from ._config import MCPServerConfig
from ._tools import _resource_text
from ._tools import convert_content
from ._tools import convert_result
from ._tools import dump
from ._tools import flags
from ._tools import tool_name
from ._values import NO_ELICITATION
from ._values import ElicitationRequest
from ._values import MCPTool
from ._values import ServerLog
from ._values import ServerState
from ._values import ServerStatus
from ._values import TaskSupport
from ._values import describe
from ._values import schema

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Literal

    from ketch import Agent
    from ketch.llm import Model

    from ._values import ElicitationCallback
    from ._values import LoggingLevel


class Manager(Protocol):
    """What a :class:`Connection` reads of the :class:`~ketch.mcp.MCPManager` it belongs
    to: the manager's settings (timeouts, callbacks, roots, log level, the protocol to
    speak, where OAuth tokens live), what it shares among its servers (one stdio spawn at
    a time, sampling through the agent), and where a connection reports back (tools
    changed, a resource updated, a log message)."""

    startup_timeout: float
    call_timeout: float | None
    task_wait: float
    elicitation: ElicitationCallback | None
    sample_with_agent: bool
    roots: list[Path] | None
    errlog: Any
    log_level: LoggingLevel | None
    protocol: Literal["auto", "legacy"]
    auth_dir: Path | None
    _login_auth: Any
    _agent: Agent[Any] | None
    _changed: bool
    _closed: bool
    _spawn_lock: asyncio.Lock

    @property
    def _samples(self) -> bool: ...
    def _sampling_model(self) -> Model | None: ...
    def _server_log(self, record: ServerLog) -> None: ...
    def _resource_updated(self, server: str, uri: str) -> None: ...

log = logging.getLogger("ketch.mcp")

KILL_GRACE = 1.0
"""Seconds between the SIGTERM and the SIGKILL that end a stdio server still busy with a
call when its connection closes (see :meth:`MCPManager.aclose`)."""

URL_ELICITATION_ROUNDS = 2
"""How many times a call refused with ``-32042`` (URL elicitation required) is made
again after the user accepted the URLs."""

MAX_PAGES = 1000
"""A listing follows ``nextCursor`` at most this many pages (a server that never ends one
cannot hang a listing)."""

_SAMPLING_REJECTED = -1
"""The error code the specification gives a client that refuses a sampling request."""


def _handshake_era(version: str | None) -> bool:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    return version in HANDSHAKE_PROTOCOL_VERSIONS


async def _pages(fetch: Callable[[str | None], Awaitable[Any]], attr: str) -> list[Any]:
    """Every item of a paginated listing (``fetch(cursor)``), following ``nextCursor``."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        items.extend(getattr(page, attr))
        cursor = page.next_cursor
        if not cursor or cursor in seen:
            break
        seen.add(cursor)
    return items


class _NeedsHandshake(Exception):
    """A 2026-07-28 call failed because the server sent a request of its own (elicitation,
    sampling, roots) the way 2025 servers do, which that protocol has no channel for."""


_NO_BACK_CHANNEL = "no back-channel for server-initiated requests"
"""What the SDK's servers answer when a tool sends a server-initiated request on a
2026-07-28 connection (``NoBackChannelError``)."""


class _UrlRequired(Exception):
    """A call was refused with ``-32042``: the user is to open URLs first."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.message)
        self.error = error


def _login_required(exc: BaseException) -> BaseException | None:
    """The :class:`ketch.mcp._auth.LoginRequired` somewhere in ``exc`` (its group, cause or
    context), or None."""
    from ._auth import LoginRequired

    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, LoginRequired):
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                todo.append(linked)
    return None


@contextlib.asynccontextmanager
async def _http(url: str, client: Any, connect: Any) -> AsyncIterator[Any]:
    async with client, connect(url, http_client=client) as streams:
        yield streams


def _client_info() -> Any:
    import mcp_types as types

    import ketch

    return types.Implementation(name="ketch", version=str(ketch.__version__))


def load_sdk(kind: str) -> None:
    """Import the SDK modules a connection of this ``kind`` uses (once per process)."""
    import mcp.client
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


class Connection:
    """One configured server: its connection task, the SDK client, its tool list."""

    def __init__(self, config: MCPServerConfig, manager: Manager) -> None:
        self.config = config
        self.manager = manager
        self.state: ServerState = "disabled" if config.disabled else "stopped"
        self.error: str | None = None
        self.client: Any = None  # the connected mcp.client.Client
        self.capabilities: Any = None
        self.protocol: str | None = None
        self.tools: list[Tool] | None = None
        self.tools_stale = True
        self.subscriptions: set[str] = set()
        self.handshake_only = False  # set once the server needed the 2025 protocol
        self.pending_tasks: dict[str, str] = {}  # task id -> tool name, handed to the model
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._relisten: asyncio.Event | None = None
        self._listening: asyncio.Event | None = None
        self._ids = itertools.count(1)
        # a stdio server's process group (None: unknown, or not stdio), and the calls of
        # this connection that are running or were abandoned unanswered (cancelled, timed out)
        self._pgid: int | None = None
        self._busy: set[object] = set()
        self._provider: Any = None  # the OAuth provider of the current connection, if any
        self._refused: asyncio.Event | None = None  # set when an sse server's OAuth provider gives up

    @property
    def name(self) -> str:
        return self.config.name

    # -- lifecycle ------------------------------------------------------------------------
    async def ensure(self) -> Any:
        """The connected client, starting (or restarting) the server when needed."""
        client = self.client
        if client is not None and self.state == "running":
            return client
        if self.state == "disabled":
            raise ConnectionError(f"MCP server {self.name!r} is disabled (\"disabled\": true in its configuration)")
        async with self._lock:
            if self.client is not None and self.state == "running":
                return self.client
            if self.manager._closed:
                raise ConnectionError(f"MCP server {self.name!r} is closed (the MCPManager was closed)")
            await self._shutdown()
            return await self._start()

    async def _start(self) -> Any:
        try:  # imported before the start-up clock runs: the first import takes a while
            load_sdk(self.config.type)
        except ImportError:
            self.state, self.error = "failed", "needs the mcp package: pip install 'ketch[mcp]'"
            raise ConnectionError(f"MCP server {self.name!r} {self.error}") from None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even after a timeout
        self._stop = asyncio.Event()
        self.state = "starting"
        self.error = None
        self._busy = set()
        self.pending_tasks = {}
        self._task = asyncio.create_task(self._run(ready, self._stop), name=f"mcp-{self.name}")
        timeout = self.manager.startup_timeout
        try:
            async with asyncio.timeout(timeout):
                client = await asyncio.shield(ready)
        except TimeoutError:
            await self._shutdown()
            self.state, self.error = "failed", f"did not start within {timeout:g} s"
            raise ConnectionError(f"MCP server {self.name!r} {self.error}") from None
        except asyncio.CancelledError:
            await asyncio.shield(self._shutdown())
            raise
        except Exception as exc:
            await self._shutdown()
            login = self._login_failure(exc)
            if login is not None:
                self.state, self.error = "failed", str(login).removeprefix(f"MCP server {self.name!r} ")
                raise ConnectionError(str(login)) from None
            self.state, self.error = "failed", f"failed to start ({describe(exc)})"
            raise ConnectionError(f"MCP server {self.name!r} {self.error}") from exc
        self.client = client
        self.state = "running"
        self.tools_stale = True
        return client

    def _auth(self) -> Any:
        """The OAuth provider (an ``httpx2.Auth``) of an http or sse server, or None."""
        manager = self.manager
        if manager._login_auth is not None:
            self._provider = manager._login_auth
        elif manager.auth_dir is None or self.config.url is None:
            self._provider = None
        else:
            from ._auth import TokenFile
            from ._auth import provider

            self._provider = provider(self.config, TokenFile(manager.auth_dir, self.name, self.config.url))
            if self.config.type == "sse":
                # the SDK's sse writer logs a refused authorization and stops sending: the
                # calls waiting on it are ended here instead of never getting an answer
                refused = self._refused = asyncio.Event()
                needs_login = self._provider._needs_login

                def told(why: str) -> Any:
                    refused.set()
                    return needs_login(why)

                self._provider._needs_login = told
        return self._provider

    def _login_failure(self, exc: BaseException) -> BaseException | None:
        """The :class:`~ketch.mcp._auth.LoginRequired` behind ``exc``: in its chain, or
        raised by the OAuth provider inside the transport (which then only closes the
        connection), else None."""
        found = _login_required(exc)
        if found is None and self._provider is not None:
            found = getattr(self._provider, "login_required", None)
        return found

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        cfg = self.config
        if cfg.type == "stdio":
            return self._spawned()
        assert cfg.url is not None
        auth = self._auth()
        if cfg.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(cfg.url, headers=dict(cfg.headers) or None, timeout=self.manager.startup_timeout, auth=auth)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(cfg.headers) or None, auth=auth)
        return _http(cfg.url, client, streamable_http_client)

    @contextlib.asynccontextmanager
    async def _spawned(self) -> AsyncIterator[Any]:
        """The stdio transport, noting the server's process group: the SDK starts the
        server as the leader of a new session, so it is the one new child group (found
        when exactly one appeared; spawns of this manager's servers take turns)."""
        from mcp.client.stdio import StdioServerParameters
        from mcp.client.stdio import stdio_client

        from ketch._proc import child_groups
        from ketch._proc import live_process_groups

        cfg = self.config
        assert cfg.command is not None
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None, cwd=cfg.cwd)
        async with contextlib.AsyncExitStack() as stack:
            async with self.manager._spawn_lock:
                before = child_groups()
                streams = await stack.enter_async_context(stdio_client(params, errlog=self.manager.errlog))
                fresh = child_groups() - before - live_process_groups()
            self._pgid = next(iter(fresh)) if len(fresh) == 1 else None
            yield streams

    def _client(self) -> Any:
        """The SDK's client for this server, not connected yet."""
        from mcp.client import Client

        manager = self.manager
        return Client(
            self._transport(),
            mode="legacy" if self.handshake_only else manager.protocol,
            sampling_callback=self._sampling if manager._samples else None,
            elicitation_callback=self._elicitation,
            list_roots_callback=self._roots if manager.roots is not None else None,
            logging_callback=self._on_log,
            log_level=manager.log_level,
            message_handler=self._on_message,
            client_info=_client_info(),
            cache=None,
        )

    async def _run(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        listener: asyncio.Task[None] | None = None
        try:
            async with self._client() as client:
                self.capabilities = client.server_capabilities
                self.protocol = client.protocol_version
                await self._set_log_level(client)
                if self._listens():
                    self._listening = asyncio.Event()
                    listener = asyncio.create_task(self._listen(client), name=f"mcp-{self.name}-listen")
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
                await self._cancel_pending(client)
                if listener is not None:
                    listener.cancel()
                    with contextlib.suppress(BaseException):
                        await listener
        except BaseException as exc:
            if listener is not None:
                listener.cancel()
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(describe(exc)))
            elif not stop.is_set():
                login = self._login_failure(exc)
                self._died(str(login) if login is not None else f"connection failed ({describe(exc)})")
            if not isinstance(exc, Exception):
                raise
        else:
            if not ready.done():
                ready.set_exception(ConnectionError("stopped before it started"))

    def _died(self, reason: str) -> None:
        if self.state == "running" or self.state == "starting":
            self.state, self.error = "failed", reason
            self.client = None

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
        self.client = None
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
        if self.state != "disabled":
            self.state = "stopped"

    async def _cancel_pending(self, client: Any) -> None:
        """Cancel the tasks handed to the model whose result nobody fetched (nobody can once
        the connection is gone)."""
        pending, self.pending_tasks = self.pending_tasks, {}
        if pending and not self._busy_stdio():
            await asyncio.gather(*(_tasks.cancel(client.session, task_id) for task_id in pending))

    def _busy_stdio(self) -> bool:
        return self._pgid is not None and bool(self._busy)

    # -- server -> client ---------------------------------------------------------------
    def _changed(self) -> None:
        self.tools_stale = True
        self.manager._changed = True

    async def _on_message(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, Exception):
            log.debug("MCP server %r transport error: %s", self.name, describe(message))
            return
        if not _handshake_era(self.protocol):
            return  # 2026-07-28: the same events, in order, come to _listen
        if isinstance(
            message,
            (types.ToolListChangedNotification, types.PromptListChangedNotification, types.ResourceListChangedNotification),
        ):
            self._changed()
        elif isinstance(message, types.ResourceUpdatedNotification):
            self.manager._resource_updated(self.name, str(message.params.uri))

    async def _on_log(self, params: Any) -> None:
        self.manager._server_log(ServerLog(self.name, str(params.level), params.logger, params.data))

    async def _set_log_level(self, client: Any) -> None:
        """``logging/setLevel`` on a handshake-era connection to a server that logs (a
        2026-07-28 one is asked per request by the SDK client)."""
        level = self.manager.log_level
        caps = self.capabilities
        if level is None or caps is None or caps.logging is None or not _handshake_era(self.protocol):
            return
        from mcp.shared.exceptions import MCPDeprecationWarning

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.session.set_logging_level(level)
        except Exception as exc:
            log.debug("MCP server %r: logging/setLevel failed: %s", self.name, describe(exc))

    def _listens(self) -> bool:
        """Whether this (2026-07-28) connection should listen for changes."""
        caps = self.capabilities
        if caps is None or _handshake_era(self.protocol):
            return False
        return bool(
            (caps.tools is not None and caps.tools.list_changed)
            or (caps.prompts is not None and caps.prompts.list_changed)
            or (caps.resources is not None and (caps.resources.list_changed or caps.resources.subscribe))
        )

    async def _listen(self, client: Any) -> None:
        """Follow a ``subscriptions/listen`` stream (2026-07-28) for list changes and the
        subscribed resources' updates; opened again when the subscriptions change."""
        from mcp.shared.subscriptions import ResourceUpdated

        caps = self.capabilities
        while True:
            relisten = self._relisten = asyncio.Event()
            try:
                async with client.listen(
                    tools_list_changed=bool(caps.tools and caps.tools.list_changed),
                    prompts_list_changed=bool(caps.prompts and caps.prompts.list_changed),
                    resources_list_changed=bool(caps.resources and caps.resources.list_changed),
                    resource_subscriptions=sorted(self.subscriptions),
                ) as subscription:
                    if self._listening is not None:
                        self._listening.set()

                    async def events() -> None:
                        async for event in subscription:
                            if isinstance(event, ResourceUpdated):
                                self.manager._resource_updated(self.name, str(event.uri))
                            else:
                                self._changed()

                    reader = asyncio.ensure_future(events())
                    waiter = asyncio.ensure_future(relisten.wait())
                    try:
                        await asyncio.wait({reader, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for future in (reader, waiter):
                            future.cancel()
                        await asyncio.gather(reader, waiter, return_exceptions=True)
                    if not relisten.is_set():
                        return  # the server ended the stream
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("MCP server %r: subscriptions/listen failed: %s", self.name, describe(exc))
                return

    async def _elicitation(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        request = ElicitationRequest(
            server=self.name,
            message=params.message,
            mode=getattr(params, "mode", "form") or "form",
            requested_schema=dump(getattr(params, "requested_schema", None)) or {},
            url=getattr(params, "url", None),
            elicitation_id=getattr(params, "elicitation_id", None),
        )
        if self.manager.elicitation is None:
            return types.ElicitResult(action="decline", _meta={"reason": NO_ELICITATION})
        try:
            answer = await self.manager.elicitation(request)
        except Exception as exc:
            log.warning("MCP elicitation callback failed: %s", describe(exc))
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the client's elicitation callback failed ({describe(exc)})")
        return types.ElicitResult(action=answer.action, content=answer.content if answer.action == "accept" else None)

    async def _sampling(self, context: Any, params: Any) -> Any:
        import mcp_types as types

        model = self.manager._sampling_model()
        if model is None:
            return types.ErrorData(code=_SAMPLING_REJECTED, message="ketch has no model to sample with yet")
        refused = await self._sampling_refused(params)
        if refused is not None:
            return types.ErrorData(code=_SAMPLING_REJECTED, message=refused)
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

    async def _sampling_refused(self, params: Any) -> str | None:
        """Why the attached agent's gate refuses this sampling request (None: it may run).

        With ``sample_with_agent`` the request passes the agent's ``before_tool_call``
        (a permission engine, say) as a call of the tool ``mcp__<server>__sampling``
        with the request's last message and token limit as arguments: rules, modes
        and the approver apply as for any tool; a call that would need an approval
        nobody can give now is refused."""
        agent = self.manager._agent
        if not self.manager.sample_with_agent or agent is None:
            return None
        hook = agent.config.before_tool_call
        if hook is None:
            return None
        name = tool_name(self.name, "sampling")
        last = params.messages[-1] if params.messages else None
        blocks = convert_content(last.content if last is not None and isinstance(last.content, list) else [last.content]) if last else []
        args: dict[str, Any] = {
            "message": " ".join(b.text for b in blocks if isinstance(b, TextContent))[:500],
            "max_tokens": params.max_tokens,
        }
        if params.system_prompt:
            args["system_prompt"] = params.system_prompt[:200]

        async def never(arguments: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
            return ToolResult.error("not a callable tool")

        tool = Tool(name, f"The MCP server {self.name!r} asks ketch's model for a reply (sampling).", {"type": "object"}, never)
        call = ToolCall(id=f"sampling_{next(self._ids)}", name=name, args=args)
        info = ToolCallInfo(call, tool, args, AssistantMessage(content=[call]), Conversation(tools=[tool]), AbortSignal())
        verdict = hook(info)
        if isinstance(verdict, Awaitable):
            verdict = await verdict
        if verdict is None:
            return None
        if verdict.block:
            return verdict.reason or f"{name} was denied"
        if verdict.approval:
            return f"{name} needs approval, and nobody can be asked now ({verdict.reason or 'denied'})"
        return None

    async def _roots(self, context: Any) -> Any:
        import mcp_types as types

        roots = [types.Root(uri=p.as_uri(), name=p.name or str(p)) for p in self.manager.roots or ()]  # type: ignore[arg-type]
        return types.ListRootsResult(roots=roots)

    # -- tools ----------------------------------------------------------------------------
    async def list_tools(self) -> list[Tool]:
        client = await self.ensure()
        self.tools_stale = False
        listed = await _pages(lambda cursor: client.list_tools(cursor=cursor), "tools")
        skipped = set(self.config.disabled_tools)
        tools: list[Tool] = [self._tool(t) for t in listed if t.name not in skipped]
        tasks = any(isinstance(t, MCPTool) and t.task_support != "forbidden" for t in tools)
        tools.extend(self._helpers({t.name for t in tools}, *await self._offers(client), tasks))
        self.tools = tools
        return tools

    def _tool(self, remote: Any) -> Tool:
        read_only, sequential = flags(remote.annotations, trusted=self.config.trust_annotations)
        name = tool_name(self.name, remote.name)
        description = remote.description or (remote.annotations.title if remote.annotations else None) or ""
        execution = getattr(remote, "execution", None)
        support: TaskSupport = (execution.task_support if execution is not None else None) or "forbidden"

        async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
            return await self.call(remote.name, args, ctx, support)

        return MCPTool(
            name,
            server=self.name,
            mcp_name=remote.name,
            task_support=support,
            description=description,
            parameters=schema(remote.input_schema),
            execute=execute,
            label=remote.title or None,
            read_only=read_only,
            sequential=sequential,
        )

    def _as_task(self, support: TaskSupport) -> bool:
        """Whether a call of a tool with this task support is made as a task: always when
        the tool requires it; when it allows it, on a server that takes task-augmented
        tool calls (``tasks.requests.tools.call``)."""
        if support == "required":
            return True
        if support != "optional":
            return False
        tasks = getattr(self.capabilities, "tasks", None)
        return bool(tasks is not None and tasks.requests is not None and tasks.requests.tools is not None)

    def _timeout(self) -> float | None:
        return self.config.timeout if self.config.timeout is not None else self.manager.call_timeout

    async def call(self, name: str, args: dict[str, Any], ctx: ToolContext[Any], support: TaskSupport = "forbidden") -> ToolResult:
        try:
            client = await self.ensure()
        except ConnectionError as exc:
            return ToolResult.error(f"{exc}; the call to {name!r} did not run")
        for _ in range(URL_ELICITATION_ROUNDS):
            try:
                if self._as_task(support):
                    return await self._call_task(client, name, args, ctx)
                return await self._call(client, name, args, ctx)
            except _UrlRequired as needed:
                refused = await self._open_urls(needed.error, name)
                if refused is not None:
                    return ToolResult.error(refused)
            except _NeedsHandshake:
                try:
                    client = await self._downgrade()
                except ConnectionError as exc:
                    return ToolResult.error(f"{exc}; the call to {name!r} did not run")
        try:
            return await self._call(client, name, args, ctx)
        except (_UrlRequired, _NeedsHandshake) as needed:
            if isinstance(needed, _NeedsHandshake):
                return ToolResult.error(f"MCP server {self.name!r}: {name!r} failed: {_NO_BACK_CHANNEL}")
            return ToolResult.error(
                f"MCP server {self.name!r}: {name!r} still asks for URL elicitation after "
                f"{URL_ELICITATION_ROUNDS} rounds ({needed})"
            )

    async def _downgrade(self) -> Any:
        """Connect again with the 2025 handshake, for good: the server asked something of
        the client in a way only that protocol carries (its tools were written for it)."""
        log.info("MCP server %r needs the 2025-11-25 protocol (it sends requests of its own): reconnecting", self.name)
        async with self._lock:
            self.handshake_only = True
            await self._shutdown()
            self.state = "stopped"
        return await self.ensure()

    async def _call(self, client: Any, name: str, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.report({"progress": progress, "total": total, "message": message})

        timeout = self._timeout()
        busy, token, abandoned = self._busy, object(), False
        busy.add(token)
        try:
            async with asyncio.timeout(timeout):
                result = await self._unless_refused(client.call_tool(name, args, progress_callback=on_progress))
        except TimeoutError:
            abandoned = True
            return ToolResult.error(
                f"MCP server {self.name!r}: {name!r} timed out after {timeout:g} s (the server was told to cancel it)"
            )
        except asyncio.CancelledError:
            abandoned = True  # the server was told to cancel it; it may not
            raise
        except Exception as exc:
            return self._failure(exc, name)
        finally:
            if not abandoned:
                busy.discard(token)
        return convert_result(result)

    async def _unless_refused(self, request: Awaitable[Any]) -> Any:
        """Await ``request``; on an sse server with OAuth, end it when the provider gives up
        (raising the provider's :class:`~ketch.mcp._auth.LoginRequired`)."""
        refused = self._refused
        if refused is None or self.config.type != "sse":
            return await request
        call = asyncio.ensure_future(request)
        gave_up = asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({call, gave_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gave_up.cancel()
            if not call.done():
                call.cancel()
        if call.done() and not call.cancelled():
            return call.result()
        login = getattr(self._provider, "login_required", None)
        raise login if login is not None else ConnectionError(f"MCP server {self.name!r}: authorization refused")

    def _failure(self, exc: Exception, name: str) -> ToolResult:
        """The error result of a call that raised ``exc`` (a URL elicitation to make is
        raised as :class:`_UrlRequired`)."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        where = f"MCP server {self.name!r}"
        if isinstance(exc, MCPError) and exc.code == types.URL_ELICITATION_REQUIRED:
            raise _UrlRequired(exc.error) from None
        if (
            isinstance(exc, MCPError)
            and _NO_BACK_CHANNEL in exc.message
            and not _handshake_era(self.protocol)
            and not self.handshake_only
        ):
            raise _NeedsHandshake() from None
        login = self._login_failure(exc)
        if login is not None:
            self._died(str(login))
            return ToolResult.error(f"{login}; the call to {name!r} did not run")
        if isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED:  # a JSON-RPC error from the server
            return ToolResult.error(f"{where}: {name!r} failed: {exc.message}")
        self._died(f"connection lost ({describe(exc)})")
        return ToolResult.error(
            f"{where}: the connection was lost during {name!r} ({describe(exc)}); the server is restarted on the next call"
        )

    async def _open_urls(self, error: Any, name: str) -> str | None:
        """Ask the user (the elicitation callback) to open the URLs of a ``-32042`` error;
        None when they accepted every one (the call is then made again), else the error
        text for the model, naming the URLs."""
        from mcp.shared.exceptions import UrlElicitationRequiredError

        where = f"MCP server {self.name!r}"
        try:
            wanted = UrlElicitationRequiredError.from_error(error).elicitations
        except Exception:
            wanted = []
        if not wanted:
            return f"{where}: {name!r} failed: {error.message}"
        callback = self.manager.elicitation
        for item in wanted:
            asked = f"{where}: {name!r} needs you to open {item.url} ({item.message})"
            if callback is None:
                return f"{asked}; {NO_ELICITATION}"
            request = ElicitationRequest(
                server=self.name, message=item.message, mode="url", url=item.url, elicitation_id=item.elicitation_id
            )
            try:
                answer = await callback(request)
            except Exception as exc:
                return f"{asked}; the elicitation callback failed ({describe(exc)})"
            if answer.action != "accept":
                return f"{asked}; the user chose {answer.action}"
        return None

    # -- tasks ------------------------------------------------------------------------------
    async def _call_task(self, client: Any, name: str, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Call ``name`` as a task and follow it (see :meth:`follow`)."""
        timeout = self._timeout()
        try:
            async with asyncio.timeout(timeout):
                created = await _tasks.create(client.session, name, args)
        except TimeoutError:
            return ToolResult.error(f"MCP server {self.name!r}: {name!r} timed out after {timeout:g} s")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self._failure(exc, name)
        if not hasattr(created, "task_id"):  # the server ran it at once
            return convert_result(created)
        await ctx.report(_task_progress(created))
        return await self.follow(client, created, name, ctx)

    async def follow(self, client: Any, task: Any, name: str, ctx: ToolContext[Any]) -> ToolResult:
        """Wait for ``task``'s result, each status it reaches reported as progress. After
        the manager's ``task_wait`` seconds the model gets the task's id instead (the
        task goes on; ``mcp__<server>__task_result`` waits for it again); when the call's
        timeout comes first the task is cancelled. Cancelling the wait (an abort) cancels
        the task."""
        timeout = self._timeout()
        wait = self.manager.task_wait
        cancel_at_end = timeout is not None and timeout <= wait
        self.pending_tasks[task.task_id] = name

        async def report(state: Any) -> None:
            await ctx.report(_task_progress(state))

        try:
            result = await _tasks.follow(client.session, task, wait=min(wait, timeout) if timeout is not None else wait, report=report)
        except _tasks.Detached as left:
            if not cancel_at_end:
                return self._handed_off(left.task, name)
            self.pending_tasks.pop(task.task_id, None)
            await _tasks.cancel(client.session, task.task_id)
            return ToolResult.error(
                f"MCP server {self.name!r}: {name!r} timed out after {timeout:g} s (task {task.task_id} was cancelled)"
            )
        except asyncio.CancelledError:
            self.pending_tasks.pop(task.task_id, None)
            raise
        except Exception as exc:
            self.pending_tasks.pop(task.task_id, None)
            return self._failure(exc, name)
        self.pending_tasks.pop(task.task_id, None)
        converted = convert_result(result)
        details = dict(converted.details or {})
        details["task_id"] = task.task_id
        return ToolResult(content=converted.content, details=details, is_error=converted.is_error)

    def _handed_off(self, task: Any, name: str) -> ToolResult:
        state = task.status + (f": {task.status_message}" if task.status_message else "")
        helper = tool_name(self.name, "task_result")
        return ToolResult(
            content=(
                f"{name!r} is still running on the MCP server {self.name!r} as task {task.task_id} ({state}). "
                f"Call {helper} with task_id {task.task_id!r} to wait for its result."
            ),
            details={"task_id": task.task_id, "status": task.status, "status_message": task.status_message},
        )

    async def _task_result(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        task_id = str(args.get("task_id", ""))
        name = self.pending_tasks.get(task_id)
        if name is None:
            known = ", ".join(self.pending_tasks) or "none"
            return ToolResult.error(f"MCP server {self.name!r} has no task {task_id!r} waiting for its result (waiting: {known})")
        client = await self.ensure()
        try:
            task = await _tasks.get(client.session, task_id)
        except Exception as exc:
            self.pending_tasks.pop(task_id, None)
            return self._failure(exc, name)
        return await self.follow(client, task, name, ctx)

    # -- resources, prompts, tasks: helper tools --------------------------------------------------
    async def _offers(self, client: Any) -> tuple[bool, bool, bool]:
        """Whether the server has any resources (or templates), any prompts, and lets a
        client subscribe to resources: a capability alone does not say (some SDKs
        declare them always)."""
        caps = self.capabilities

        async def count(fn: Callable[[], Awaitable[Any]], attr: str) -> int:
            try:
                return len(getattr(await fn(), attr))
            except Exception:
                return 0

        resources = prompts = False
        if caps is not None and caps.resources is not None:
            found = await asyncio.gather(
                count(client.list_resources, "resources"), count(client.list_resource_templates, "resource_templates")
            )
            resources = any(found)
        if caps is not None and caps.prompts is not None:
            prompts = await count(client.list_prompts, "prompts") > 0
        subscribe = resources and bool(caps.resources.subscribe)
        return resources, prompts, subscribe

    def _helpers(self, taken: set[str], resources: bool, prompts: bool, subscribe: bool, tasks: bool) -> list[Tool]:
        server = self.name
        helpers: list[Tool] = []

        def add(
            suffix: str,
            description: str,
            parameters: dict[str, Any],
            fn: Callable[[dict[str, Any], ToolContext[Any]], Awaitable[ToolResult]],
            *,
            read_only: bool = True,
            limited: bool = True,
        ) -> None:
            name = tool_name(server, suffix)
            if name in taken:
                return

            async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
                try:
                    await self.ensure()
                    async with asyncio.timeout(self.manager.call_timeout if limited else None):
                        return await fn(args, ctx)
                except TimeoutError:
                    return ToolResult.error(f"MCP server {server!r}: {suffix} timed out")
                except Exception as exc:
                    login = self._login_failure(exc)
                    if login is not None:
                        return ToolResult.error(str(login))
                    return ToolResult.error(f"MCP server {server!r}: {suffix} failed ({describe(exc)})")

            helpers.append(
                MCPTool(name, server=server, mcp_name="", description=description, parameters=parameters,
                        execute=execute, read_only=read_only, reports_progress=not limited)
            )

        uri = {"type": "object", "properties": {"uri": {"type": "string", "description": "The resource URI"}}, "required": ["uri"]}
        if resources:
            add("list_resources", f"List the resources (and resource templates) of the MCP server {server!r}.",
                {"type": "object", "properties": {}}, self._list_resources)
            add("read_resource", f"Read a resource of the MCP server {server!r} by its URI.", uri, self._read_resource)
        if subscribe:
            add("subscribe_resource",
                f"Be told when a resource of the MCP server {server!r} changes (a note comes with your next turn).",
                uri, self._subscribe, read_only=False)
            add("unsubscribe_resource", f"Stop being told about changes of a resource of the MCP server {server!r}.",
                uri, self._unsubscribe, read_only=False)
        if prompts:
            add("list_prompts", f"List the prompts of the MCP server {server!r} with their arguments.",
                {"type": "object", "properties": {}}, self._list_prompts)
            add("get_prompt", f"Get a prompt of the MCP server {server!r}, filled with arguments.",
                {"type": "object", "properties": {
                    "name": {"type": "string", "description": "The prompt name"},
                    "arguments": {"type": "object", "additionalProperties": {"type": "string"},
                                  "description": "The prompt's arguments (strings)"}},
                 "required": ["name"]}, self._get_prompt)
        if tasks:
            add("task_result",
                f"Wait for the result of a task of the MCP server {server!r} that was still running when its call returned.",
                {"type": "object", "properties": {"task_id": {"type": "string", "description": "The task's id"}},
                 "required": ["task_id"]}, self._task_result, limited=False)
        return helpers

    async def _list_resources(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        client = await self.ensure()
        resources = await _pages(lambda cursor: client.list_resources(cursor=cursor), "resources")
        lines = [f"{r.uri}  {r.name}" + (f" ({r.mime_type})" if r.mime_type else "") + (f" - {r.description}" if r.description else "")
                 for r in resources]
        try:
            templates = await _pages(lambda cursor: client.list_resource_templates(cursor=cursor), "resource_templates")
        except Exception:  # a server without templates
            templates = []
        lines += [f"{t.uri_template}  {t.name} (template)" + (f" - {t.description}" if t.description else "") for t in templates]
        return ToolResult(content="\n".join(lines) if lines else "(no resources)",
                          details={"resources": [dump(r) for r in resources], "templates": [dump(t) for t in templates]})

    async def _read_resource(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        client = await self.ensure()
        result = await client.read_resource(str(args["uri"]))
        return ToolResult(content=[_resource_text(c) for c in result.contents])

    async def _list_prompts(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        client = await self.ensure()
        prompts = await _pages(lambda cursor: client.list_prompts(cursor=cursor), "prompts")
        lines = []
        for p in prompts:
            params = ", ".join(a.name + ("" if a.required else "?") for a in p.arguments or ())
            lines.append(f"{p.name}({params})" + (f" - {p.description}" if p.description else ""))
        return ToolResult(content="\n".join(lines) if lines else "(no prompts)", details={"prompts": [dump(p) for p in prompts]})

    async def _get_prompt(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        client = await self.ensure()
        arguments = {str(k): str(v) for k, v in (args.get("arguments") or {}).items()}
        result = await client.get_prompt(str(args["name"]), arguments or None)
        content: list[TextContent | ImageContent | DocumentContent] = []
        for m in result.messages:
            blocks = convert_content([m.content])
            content.append(TextContent(text=f"[{m.role}]"))
            content.extend(blocks)
        return ToolResult(content=content, details={"description": result.description})

    async def subscribe(self, uri: str, on: bool = True) -> None:
        """Subscribe to (or, ``on=False``, unsubscribe from) the resource ``uri``:
        ``resources/subscribe`` on a handshake-era connection, the listen stream's filter
        on a 2026-07-28 one (in force when this returns)."""
        client = await self.ensure()
        if on:
            self.subscriptions.add(uri)
        else:
            self.subscriptions.discard(uri)
        if _handshake_era(self.protocol):
            from mcp.shared.exceptions import MCPDeprecationWarning

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                if on:
                    await client.session.subscribe_resource(uri)
                else:
                    await client.session.unsubscribe_resource(uri)
            return
        relisten = self._relisten
        if relisten is None:
            raise ConnectionError(f"MCP server {self.name!r} offers no change stream to subscribe with")
        self._listening = asyncio.Event()
        relisten.set()
        await self._listening.wait()

    async def _subscribe(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        uri = str(args["uri"])
        await self.subscribe(uri)
        return ToolResult(content=f"subscribed to {uri}: a change of it is noted at the start of your next turn")

    async def _unsubscribe(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        uri = str(args["uri"])
        await self.subscribe(uri, on=False)
        return ToolResult(content=f"unsubscribed from {uri}")

    def status(self) -> ServerStatus:
        names = tuple(t.name for t in self.tools or ())
        return ServerStatus(
            name=self.name, type=self.config.type, state=self.state, tools=names, error=self.error, protocol=self.protocol
        )


def _task_progress(task: Any) -> dict[str, Any]:
    """What a task's status becomes as a tool's progress report."""
    return {"task_id": task.task_id, "status": task.status, "message": task.status_message}
