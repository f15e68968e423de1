"""``ketch acp``: ketch as an Agent Client Protocol agent on stdin/stdout.

The Agent Client Protocol (https://agentclientprotocol.com, protocol version 1) is how
Zed, the JetBrains IDEs, Neovim (CodeCompanion, avante) and Emacs (agent-shell) run
coding agents: JSON-RPC 2.0, one message per line. The editor starts ``ketch acp`` and:

- ``initialize``: ketch answers with its capabilities (sessions load, list, resume, fork,
  close and delete; images and embedded context in prompts; MCP servers over stdio,
  HTTP and SSE) and its auth methods (the provider key variables);
- ``session/new`` (``cwd``, the editor's ``mcpServers``), ``session/load`` (the saved
  session's conversation is sent back as ``session/update`` notifications),
  ``session/resume``, ``session/fork``, ``session/list``, ``session/close``,
  ``session/delete``: sessions are ketch's saved sessions (``ketch sessions list``);
- ``session/prompt``: a run; its answer's ``stopReason`` is ``end_turn``, ``cancelled``
  (``session/cancel``), ``max_tokens``, ``max_turn_requests`` or ``refusal`` (a
  guardrail), with the run's ``usage``; a model error is a JSON-RPC error;
- ``session/set_mode`` (ketch's permission modes) and ``session/set_config_option``
  (``mode``, ``model``, ``thinking``).

While a prompt runs, ketch sends ``session/update`` notifications: agent message and
thought chunks, a ``tool_call`` per call (``kind``, ``title``, ``locations``, the edit's
``diff``) and its ``tool_call_update`` (status, output, the terminal), ``usage_update``
after each model response, ``current_mode_update``, and a ``plan`` with the whole to-do
list after each ``todo_write`` call (the session's agent has :class:`ketch.tools.Todo`). A call that needs approval is
asked with ``session/request_permission`` (allow once, always allow when a rule fits,
reject). With the editor's file system (``fs.readTextFile`` and ``fs.writeTextFile``)
the ``write`` and ``edit`` tools write through the editor, so the change lands in its
buffer, and refuse to overwrite a buffer with unsaved changes. With the editor's
terminals (``terminal``) bash commands that would run outside ketch's sandbox (none is
usable, or it is turned off) run in an editor terminal the user watches; sandboxed
commands stay in ketch's sandbox.

The first answer does not wait for the agent's modules: ``initialize`` is answered at
once and the options (``ketch acp -m MODEL --permission-mode MODE …``) are checked
right after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from ._args import EXIT_USAGE
from ._args import OneLineParser
from ._stdio import JsonLines
from ._stdio import StdinLines

if TYPE_CHECKING:
    from ..loop import ToolCallInfo
    from ..loop import ToolContext
    from ..loop import ToolResult
    from ..permissions import Approval
    from ..permissions import PermissionRequest
    from ._config import Settings
    from ._factory import Built

PROTOCOL_VERSION = 1
"""The Agent Client Protocol version ketch speaks."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002

MODES: dict[str, tuple[str, str]] = {
    "default": ("Default", "Read-only tools run; edits and commands ask first"),
    "accept_edits": ("Accept edits", "File edits in the project and sandboxed commands run without asking"),
    "plan": ("Plan", "Read-only: nothing is changed; the agent describes what it would do"),
    "bypass": ("Bypass permissions", "Everything runs except what deny rules name"),
}
"""ketch's permission modes as ACP session modes: id -> (name, description)."""

THINKING = ("off", "minimal", "low", "medium", "high", "xhigh")

KINDS: dict[str, str] = {
    "read": "read",
    "write": "edit",
    "edit": "edit",
    "bash": "execute",
    "grep": "search",
    "find": "search",
    "ls": "search",
    "todo_write": "think",
}
"""The ACP tool kind of each built-in tool (any other tool: ``other``)."""

_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("ketch_acp_call", default=None)
"""The id of the tool call whose permission is being decided (set around the gate)."""


class RpcError(Exception):
    """A JSON-RPC error to answer with (or that the client answered with)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


def _parser() -> OneLineParser:
    from ._main import add_agent_options
    from ._main import add_agent_settings

    parser = OneLineParser(
        prog="ketch acp",
        description="Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim, Emacs).",
    )
    add_agent_options(parser)
    add_agent_settings(parser)
    parser.add_argument("--no-session", action="store_true", help="do not save the sessions")
    return parser


def _kind_of(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _param(params: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = params.get(name)
    if value is None:
        if required:
            raise RpcError(INVALID_PARAMS, f'missing "{name}" ({kind.__name__})')
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RpcError(INVALID_PARAMS, f'"{name}" must be {_kind_of(kind())}, got {_kind_of(value)}')
    return value


# -- JSON-RPC ------------------------------------------------------------------------------


class Rpc:
    """JSON-RPC 2.0 over newline-delimited JSON: requests to the client with
    :meth:`request`, notifications with :meth:`notify`."""

    def __init__(self, out: JsonLines) -> None:
        self.out = out
        self._next = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.out.write({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """The client's result (:class:`RpcError` for its error)."""
        self._next += 1
        ident = self._next
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        self.out.write({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        try:
            return await future
        finally:
            self._pending.pop(ident, None)

    def respond(self, ident: Any, result: Any) -> None:
        self.out.write({"jsonrpc": "2.0", "id": ident, "result": result})

    def error(self, ident: Any, code: int, message: str, data: Any = None) -> None:
        body: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            body["data"] = data
        self.out.write({"jsonrpc": "2.0", "id": ident, "error": body})

    def answered(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            return
        error = message.get("error")
        if error is not None:
            code = error.get("code", INTERNAL_ERROR) if isinstance(error, dict) else INTERNAL_ERROR
            text = error.get("message", "error") if isinstance(error, dict) else str(error)
            future.set_exception(RpcError(int(code), str(text)))
        else:
            future.set_result(message.get("result"))

    def close(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RpcError(INTERNAL_ERROR, "the client closed the connection"))


# -- the agent ------------------------------------------------------------------------------


class AcpAgent:
    """ketch as an ACP agent: the sessions and the requests' handlers."""

    def __init__(self, argv: Sequence[str], out: JsonLines) -> None:
        self.argv = list(argv)
        self.rpc = Rpc(out)
        self.args: argparse.Namespace | None = None
        self.client_fs_read = False
        self.client_fs_write = False
        self.client_terminal = False
        self.sessions: dict[str, AcpSession] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.lines: StdinLines | None = None
        self.code = 0
        self.ending = False

    # -- reading --
    async def serve(self) -> int:
        lines = self.lines = StdinLines()
        try:
            while not self.ending:
                data = await lines.get()
                if data is None:
                    break
                self._line(data)
        finally:
            self.rpc.close()
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                await asyncio.wait(self.tasks)
            for session in list(self.sessions.values()):
                await session.close()
        return self.code

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _line(self, data: bytes) -> None:
        if not data.strip():
            return
        try:
            message = json.loads(data)
        except ValueError as exc:
            self.rpc.error(None, PARSE_ERROR, f"not JSON ({exc}); each line must be one JSON-RPC message")
            return
        if not isinstance(message, dict):
            self.rpc.error(None, INVALID_REQUEST, "expected a JSON-RPC message object")
            return
        method = message.get("method")
        if method is None:
            if "id" in message:
                self.rpc.answered(message)
            return
        params = message.get("params") or {}
        if "id" not in message:  # a notification
            if method == "session/cancel" and isinstance(params, dict):
                session = self.sessions.get(str(params.get("sessionId")))
                if session is not None:
                    session.cancel()
            return
        ident = message["id"]
        if method == "initialize":  # at once: the client waits for nothing else
            self._reply(ident, lambda: self.initialize(params))
            return
        self._spawn(self._handle(ident, method, params))

    def _reply(self, ident: Any, answer: Callable[[], Any]) -> None:
        try:
            self.rpc.respond(ident, answer())
        except RpcError as exc:
            self.rpc.error(ident, exc.code, str(exc), exc.data)

    async def _handle(self, ident: Any, method: str, params: Any) -> None:
        from ._config import ConfigError

        handler = HANDLERS.get(method)
        try:
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"method {method!r} is not supported; ketch serves {', '.join(sorted(HANDLERS))}")
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, f"{method}: params must be an object")
            result = await getattr(self, handler)(params)
        except RpcError as exc:
            self.rpc.error(ident, exc.code, f"{method}: {exc}", exc.data)
            return
        except ConfigError as exc:
            self.rpc.error(ident, INVALID_PARAMS, f"{method}: {exc}")
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            from ..llm import exception_text

            self.rpc.error(ident, INTERNAL_ERROR, f"{method}: {exception_text(exc)}")
            return
        self.rpc.respond(ident, result)

    # -- initialize and options --
    def initialize(self, params: Any) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "initialize: params must be an object")
        caps = params.get("clientCapabilities") or {}
        fs = caps.get("fs") or {} if isinstance(caps, dict) else {}
        self.client_fs_read = bool(isinstance(fs, dict) and fs.get("readTextFile"))
        self.client_fs_write = bool(isinstance(fs, dict) and fs.get("writeTextFile"))
        self.client_terminal = bool(isinstance(caps, dict) and caps.get("terminal"))
        from ._precheck import KEY_VARIABLES

        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": True, "sse": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "fork": {}, "close": {}, "delete": {}},
            },
            "authMethods": [
                {
                    "type": "env_var",
                    "id": name.lower(),
                    "name": name,
                    "description": f"ketch reads the provider key from {name}",
                    "vars": [{"name": name, "secret": True}],
                }
                for name in KEY_VARIABLES
            ],
            "agentInfo": {"name": "ketch", "title": "ketch", "version": _version()},
        }

    def options(self) -> argparse.Namespace:
        """The command's options, parsed on first use (after ``initialize`` is answered)."""
        if self.args is None:
            try:
                self.args = _parser().parse_args(self.argv)
            except SystemExit as exc:  # a bad option: the message is on stderr; end the command
                self.code = int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
                self.ending = True
                if self.lines is not None:
                    self.lines.end()
                raise RpcError(INVALID_PARAMS, "ketch acp was started with invalid options (see its stderr)") from None
        return self.args

    async def authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        from ._precheck import KEY_VARIABLES

        method = _param(params, "methodId", str)
        names = {n.lower(): n for n in KEY_VARIABLES}
        if method not in names:
            raise RpcError(INVALID_PARAMS, f"unknown auth method {method!r}; ketch offers {', '.join(names)}")
        if not os.environ.get(names[method]):
            raise RpcError(AUTH_REQUIRED, f"{names[method]} is not set in ketch's environment; set it in the editor's agent settings")
        return {}

    # -- sessions --
    def _session(self, params: dict[str, Any]) -> AcpSession:
        sid = _param(params, "sessionId", str)
        session = self.sessions.get(sid)
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"no open session {sid!r} (session/new, session/load or session/resume opens one)")
        return session

    async def _open(self, params: dict[str, Any], resume: str | None, *, fork: bool = False) -> AcpSession:
        from ._config import directory

        args = self.options()
        cwd = _param(params, "cwd", str)
        if not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, f'"cwd" must be an absolute path, got {cwd!r}')
        root = directory(cwd, "cwd")
        servers = params.get("mcpServers") or []
        if not isinstance(servers, list):
            raise RpcError(INVALID_PARAMS, f'"mcpServers" must be an array, got {_kind_of(servers)}')
        if resume is not None and resume in self.sessions and not fork:
            raise RpcError(INVALID_PARAMS, f"session {resume} is already open in this connection")
        if resume is not None and resume in self.sessions and fork:
            # open here (its write lock held): the copy is made from the open session,
            # then opened as any saved session
            source = self.sessions[resume].saved
            if source is None:
                raise RpcError(INVALID_PARAMS, f"session {resume} is not saved (--no-session): nothing to fork")
            try:
                forked = await source.fork()
            except ValueError as exc:
                raise RpcError(INVALID_PARAMS, str(exc)) from None
            await forked.close()
            resume, fork = forked.id, False
        session = AcpSession(self, root)
        await session.open(args, servers, resume, fork=fork)
        self.sessions[session.id] = session
        return session

    async def new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        session = await self._open(params, None)
        return {"sessionId": session.id, **session.state()}

    async def load_session(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = _param(params, "sessionId", str)
        session = await self._open(params, sid)
        session.replay()
        return session.state()

    async def resume_session(self, params: dict[str, Any]) -> dict[str, Any]:
        session = await self._open(params, _param(params, "sessionId", str))
        return session.state()

    async def fork_session(self, params: dict[str, Any]) -> dict[str, Any]:
        session = await self._open(params, _param(params, "sessionId", str), fork=True)
        return {"sessionId": session.id, **session.state()}

    async def close_session(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        self.sessions.pop(session.id, None)
        await session.close()
        return {}

    async def list_sessions(self, params: dict[str, Any]) -> dict[str, Any]:
        from ._sessions import store

        cwd = _param(params, "cwd", str, required=False)
        cursor = _param(params, "cursor", str, required=False)
        page = await store().list(cwd=cwd, cursor=cursor, limit=50)
        return {
            "sessions": [
                {
                    "sessionId": info.id,
                    "cwd": info.cwd,
                    "title": info.title or None,
                    "updatedAt": _iso(info.updated),
                }
                for info in page.sessions
            ],
            "nextCursor": page.next_cursor,
        }

    async def delete_session(self, params: dict[str, Any]) -> dict[str, Any]:
        from ..sessions import SessionNotFoundError
        from ._sessions import store

        sid = _param(params, "sessionId", str)
        if sid in self.sessions:
            raise RpcError(INVALID_PARAMS, f"session {sid} is open; close it first (session/close)")
        try:
            await store().delete(sid)
        except SessionNotFoundError:
            raise RpcError(RESOURCE_NOT_FOUND, f"no saved session {sid!r}") from None
        return {}

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        blocks = _param(params, "prompt", list)
        return await session.prompt(blocks)

    async def set_session_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        await session.set_mode(_param(params, "modeId", str))
        return {}

    async def set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        config = _param(params, "configId", str)
        value = params.get("value")
        if not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, f'"value" must be a string, got {_kind_of(value)}')
        if config == "mode":
            await session.set_mode(value)
        elif config == "model":
            session.set_model(value)
        elif config == "thinking":
            session.set_thinking(value)
        else:
            raise RpcError(INVALID_PARAMS, f"unknown config option {config!r}; ketch has mode, model and thinking")
        return {"configOptions": session.config_options()}

    async def set_session_model(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        session.set_model(_param(params, "modelId", str))
        return {}


HANDLERS: dict[str, str] = {
    "authenticate": "authenticate",
    "session/new": "new_session",
    "session/load": "load_session",
    "session/resume": "resume_session",
    "session/fork": "fork_session",
    "session/close": "close_session",
    "session/list": "list_sessions",
    "session/delete": "delete_session",
    "session/prompt": "prompt",
    "session/set_mode": "set_session_mode",
    "session/set_config_option": "set_config_option",
    "session/set_model": "set_session_model",
}
"""The requests ketch serves (besides ``initialize``) and the method of each."""


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def _version() -> str:
    import ketch

    return str(ketch.__version__)


# -- one session -----------------------------------------------------------------------------


class AcpSession:
    """One ACP session: a ketch agent (and its saved session) working in ``root``."""

    def __init__(self, agent: AcpAgent, root: Path) -> None:
        self.acp = agent
        self.rpc = agent.rpc
        self.root = root
        self.id = ""
        self.settings: Settings | None = None
        self.built: Built | None = None
        self.saved: Any = None
        self.stack: Any = None
        self.running: asyncio.Task[Any] | None = None
        self.cancelled = asyncio.Event()
        self.started: set[str] = set()
        self.titles: dict[str, dict[str, Any]] = {}
        self.cost = 0.0
        self.commands: dict[str, Any] = {}  # the custom slash commands (ketch.cli._commands)

    # -- opening --
    async def open(self, args: argparse.Namespace, servers: list[Any], resume: str | None, *, fork: bool) -> None:
        from contextlib import AsyncExitStack

        from ._factory import build_agent
        from ._headless import mcp_and_session
        from ._precheck import check_model
        from ._sessions import SessionOptions
        from ._sessions import use_recorded_model

        settings = _settings(args, self.root)
        for name, entry in _mcp_entries(servers).items():
            settings.mcp_servers[name] = entry
            settings.mcp_origins[name] = "the editor (session/new)"
        if resume is None:
            check_model(settings, None)
        options = SessionOptions(resume=resume, enabled=not args.no_session)
        stack = AsyncExitStack()
        try:
            try:
                mcp, saved = await stack.enter_async_context(mcp_and_session(settings, self.root, options))
            except Exception as exc:
                from ._config import ConfigError

                if resume is not None and isinstance(exc, ConfigError) and "unknown session" in str(exc):
                    raise RpcError(RESOURCE_NOT_FOUND, str(exc)) from None
                raise
            if fork and saved is not None:
                if not saved.message_ids:
                    raise RpcError(INVALID_PARAMS, f"session {saved.id} is empty: nothing to fork")
                forked = await saved.fork()
                await saved.close()
                saved = forked
                stack.push_async_callback(forked.close)
            use_recorded_model(settings, saved)
            built = build_agent(settings, self.root, approver=self._ask, session=saved, no_approver="deny", mcp=mcp, todo=True)
            for line in await built.attach_mcp():
                sys.stderr.write(f"ketch: warning: {line}\n")
            self._client_tools(built)
            gate = built.agent.config.before_tool_call
            if gate is not None:
                built.agent.config.before_tool_call = _marked(gate)
            built.agent.subscribe(self._on_event)
            if saved is not None:
                await saved.record_permission_mode(built.permissions.mode)
            await built.session_start("resume" if resume is not None else "startup")
        except BaseException:
            await stack.aclose()
            raise
        self.settings, self.built, self.saved, self.stack = settings, built, saved, stack
        self.id = saved.id if saved is not None else f"ketch-{uuid.uuid4().hex}"
        from ._commands import load_custom_commands

        self.commands, warnings = load_custom_commands(settings)
        for warning in warnings:
            sys.stderr.write(warning + "\n")
        if self.commands:  # announced once the answer naming the session is out
            asyncio.get_running_loop().call_soon(self._announce_commands)

    def _announce_commands(self) -> None:
        """Tell the editor the custom slash commands (``available_commands_update``)."""
        available = []
        for command in self.commands.values():
            entry: dict[str, Any] = {"name": command.name, "description": command.description or f"/{command.name}"}
            if command.argument_hint:
                entry["input"] = {"hint": command.argument_hint}
            available.append(entry)
        self._update({"sessionUpdate": "available_commands_update", "availableCommands": available})

    def _client_tools(self, built: Built) -> None:
        """Route the file writes (and unsandboxed bash) through the editor when it offers that."""
        acp = self.acp
        tools: list[Any] = []
        for tool in built.agent.tools:
            if tool.name in ("write", "edit") and acp.client_fs_write and hasattr(tool, "_change"):
                tools.append(EditorFileTool(tool, self))
            elif tool.name == "bash" and acp.client_terminal and not getattr(tool, "sandboxed", True):
                tools.append(EditorTerminalBash(tool, self))
            else:
                tools.append(tool)
        built.agent.tools = tools

    def state(self) -> dict[str, Any]:
        """What ``session/new`` and ``session/load`` answer besides the id."""
        assert self.built is not None
        mode = self.built.permissions.mode
        return {
            "modes": {
                "currentModeId": mode,
                "availableModes": [{"id": m, "name": n, "description": d} for m, (n, d) in MODES.items()],
            },
            "configOptions": self.config_options(),
        }

    def config_options(self) -> list[dict[str, Any]]:
        assert self.built is not None and self.settings is not None
        agent = self.built.agent
        current = f"{agent.model.provider}:{agent.model.id}"
        models = [current]
        from ._factory import DEFAULT_MODELS
        from ._factory import key_source

        for provider, spec in DEFAULT_MODELS.items():
            if spec not in models and key_source(provider, self.settings) is not None:
                models.append(spec)
        return [
            {
                "type": "select",
                "id": "mode",
                "name": "Permissions",
                "category": "mode",
                "currentValue": self.built.permissions.mode,
                "options": [{"value": m, "name": n, "description": d} for m, (n, d) in MODES.items()],
            },
            {
                "type": "select",
                "id": "model",
                "name": "Model",
                "category": "model",
                "currentValue": current,
                "options": [{"value": m, "name": m} for m in models],
            },
            {
                "type": "select",
                "id": "thinking",
                "name": "Thinking",
                "category": "thought_level",
                "currentValue": agent.thinking,
                "options": [{"value": t, "name": t} for t in THINKING],
            },
        ]

    # -- settings --
    async def set_mode(self, mode: str) -> None:
        from ..permissions import parse_mode

        assert self.built is not None
        try:
            chosen = parse_mode(mode)
        except ValueError:
            raise RpcError(INVALID_PARAMS, f"mode {mode!r} is not one of {', '.join(MODES)}") from None
        self.built.permissions.set_mode(chosen)
        if self.saved is not None:
            await self.saved.record_permission_mode(chosen)
        self._update({"sessionUpdate": "current_mode_update", "currentModeId": chosen})

    def set_model(self, spec: str) -> None:
        from ._config import ConfigError
        from ._factory import build_model

        assert self.built is not None and self.settings is not None
        if self.running is not None:
            raise RpcError(INVALID_PARAMS, "a prompt is running; change the model when it has ended")
        try:
            model = build_model(spec, self.settings)
        except ConfigError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        self.built.agent.model = model
        self.built.fit_context(self.settings)

    def set_thinking(self, level: str) -> None:
        assert self.built is not None
        if level not in THINKING:
            raise RpcError(INVALID_PARAMS, f"thinking level {level!r} is not one of {', '.join(THINKING)}")
        self.built.agent.thinking = level  # type: ignore[assignment]  # checked above

    # -- prompting --
    async def prompt(self, blocks: list[Any]) -> dict[str, Any]:
        from ..llm import UserMessage

        assert self.built is not None
        if self.running is not None:
            raise RpcError(INVALID_REQUEST, "a prompt is already running in this session; wait for it or cancel it")
        text, images = _prompt_content(blocks)
        self.cancelled.clear()
        agent = self.built.agent
        if text.startswith("/rewind") and not images and "rewind" not in self.commands:
            from ._commands import split_line

            name, arguments = split_line(text)
            if name == "rewind":
                return await self._rewind(arguments.strip())
        self.built.arm()
        command = None
        run: Awaitable[Any]
        if text.startswith("/") and not images:
            from ._commands import split_line

            name, arguments = split_line(text)
            command = self.commands.get(name)
        if command is not None:  # a custom slash command: expanded, with its model and allowed tools
            from ._commands import run_command

            assert self.settings is not None
            run = run_command(self.built, self.settings, command, command.expand(arguments))
        elif images or self.built.hooks is None:
            from ..llm import TextContent

            message = UserMessage(content=[*([TextContent(text=text)] if text else []), *images])
            run = agent.prompt(message)
        else:
            run = self.built.prompt(text)
        self.running = asyncio.ensure_future(run)
        try:
            result = await asyncio.shield(self.running)
        except asyncio.CancelledError:
            agent.abort()
            raise
        finally:
            self.running = None
        return self._stop(result)

    async def _rewind(self, arg: str) -> dict[str, Any]:
        """``/rewind [N]``: list the prompts, or undo prompt N and everything after it (the
        conversation and the file changes, bash's included), answered as the agent's text."""
        from ._sessions import rewind_prompt

        assert self.built is not None
        if self.saved is None:
            lines = [("nothing to rewind: this session is not saved (ketch acp --no-session)", "")]
        else:
            lines = await rewind_prompt(self.saved, self.built.agent, arg)
        text = "\n".join(line for line, _ in lines)
        self._update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
        return {"stopReason": "end_turn"}

    def _stop(self, result: Any) -> dict[str, Any]:
        summary = result.summary
        reason = summary.end_reason
        last = result.last_assistant
        if reason == "aborted" or self.cancelled.is_set():
            stop = "cancelled"
        elif reason == "max_turns":
            stop = "max_turn_requests"
        elif reason == "guardrail":
            stop = "refusal"
        elif reason == "error":
            raise RpcError(INTERNAL_ERROR, f"the run failed: {summary.error or 'model error'}")
        elif last is not None and last.stop_reason == "length":
            stop = "max_tokens"
        else:
            stop = "end_turn"
        usage = summary.usage
        return {
            "stopReason": stop,
            "usage": {
                "totalTokens": usage.total_tokens,
                "inputTokens": usage.input,
                "outputTokens": usage.output,
                "cachedReadTokens": usage.cache_read,
                "cachedWriteTokens": usage.cache_write,
            },
        }

    def cancel(self) -> None:
        """``session/cancel``: abort the running prompt (it answers ``cancelled``)."""
        self.cancelled.set()
        if self.running is not None and self.built is not None:
            self.built.agent.abort()
            self.built.agent.clear_queues()

    async def close(self) -> None:
        self.cancel()
        if self.running is not None:
            try:
                await asyncio.shield(self.running)
            except BaseException:
                pass
        if self.built is not None:
            try:
                await self.built.session_end("other")
            except Exception:
                pass
        if self.stack is not None:
            stack, self.stack = self.stack, None
            await stack.aclose()

    # -- updates --
    def _update(self, update: dict[str, Any]) -> None:
        self.rpc.notify("session/update", {"sessionId": self.id, "update": update})

    def _on_event(self, event: Any) -> None:
        kind = event.type
        if kind == "message_update":
            inner = event.event
            if inner.type == "text_delta" and inner.delta:
                self._update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": inner.delta}})
            elif inner.type == "thinking_delta" and inner.delta:
                self._update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": inner.delta}})
        elif kind == "tool_execution_start":
            self._tool_start(event.tool_call_id, event.tool_name, event.args)
        elif kind == "tool_execution_update":
            if event.tool_call_id not in self.started:
                self.started.add(event.tool_call_id)
                if getattr(event.partial, "type", None) != "tool_preview":
                    self._update({"sessionUpdate": "tool_call_update", "toolCallId": event.tool_call_id, "status": "in_progress"})
        elif kind == "tool_execution_end":
            self._tool_end(event.tool_call_id, event.tool_name, event.result, event.is_error)
        elif kind == "message_end":
            from ..llm import AssistantMessage

            if type(event.message) is AssistantMessage and self.built is not None:
                self.cost += event.message.usage.cost.total
                context = self.built.context()
                self._update(
                    {
                        "sessionUpdate": "usage_update",
                        "used": context.tokens,
                        "size": context.window,
                        "cost": {"amount": self.cost, "currency": "USD"},
                    }
                )

    def _tool_start(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        call = self._describe(call_id, name, args)
        self._update({"sessionUpdate": "tool_call", **call, "status": "pending"})

    def _describe(self, call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """A tool call as ACP shows it: id, title, kind, locations, raw input (and for an
        edit, its diff)."""
        kind = KINDS.get(name, "other")
        path = args.get("path") if isinstance(args.get("path"), str) else None
        absolute = str(self.root / os.path.expanduser(path)) if path else None
        title = name
        if name == "bash":
            command = str(args.get("command", "")).strip().splitlines()
            title = f"`{command[0]}`" if command else "bash"
            if len(command) > 1:
                title = title[:-1] + " …`"
        elif name in ("read", "write", "edit", "ls"):
            title = f"{name.capitalize()} {path or '.'}"
            offset = args.get("offset")
            if name == "read" and isinstance(offset, int):
                title += f" (from line {offset})"
        elif name in ("grep", "find"):
            title = f"{name} {args.get('pattern', '')}" + (f" in {path}" if path else "")
        elif name == "todo_write":
            title = "Update the plan"
        elif self.built is not None:
            tool = next((t for t in self.built.agent.tools if t.name == name), None)
            title = (tool.label if tool is not None and tool.label else None) or name
        call: dict[str, Any] = {"toolCallId": call_id, "title": title, "kind": kind, "rawInput": args}
        if absolute is not None:
            location: dict[str, Any] = {"path": absolute}
            if name == "read" and isinstance(args.get("offset"), int):
                location["line"] = args["offset"]
            call["locations"] = [location]
        diff = self._diff(name, absolute, args)
        if diff is not None:
            call["content"] = [diff]
        self.titles[call_id] = call
        return call

    def _diff(self, name: str, absolute: str | None, args: dict[str, Any]) -> dict[str, Any] | None:
        if absolute is None:
            return None
        if name == "edit" and isinstance(args.get("old_string"), str) and isinstance(args.get("new_string"), str):
            old, new = args["old_string"], args["new_string"]
            current = self._current_text(absolute) if old else None
            if current is not None:
                count = current.count(old)
                every = args.get("replace_all") is True
                if count == 1 or (count > 1 and every):
                    # the whole file before and after, as the editor shows a diff in context
                    return {"type": "diff", "path": absolute, "oldText": current, "newText": current.replace(old, new)}
            # no single exact match (the tool will say so, or match loosely): the strings alone
            return {"type": "diff", "path": absolute, "oldText": old, "newText": new}
        if name == "write" and isinstance(args.get("content"), str):
            return {"type": "diff", "path": absolute, "oldText": self._current_text(absolute), "newText": args["content"]}
        return None

    def _current_text(self, absolute: str) -> str | None:
        """The file a ``write`` replaces, as text (None: a new file, or one ketch does not
        show: outside the workspace, hidden by a deny rule, over 1 MiB or not UTF-8)."""
        import stat

        assert self.built is not None
        real = os.path.realpath(absolute)
        root = os.path.realpath(self.root)
        if not real.startswith(root + os.sep):
            return None
        workspace = next((t.workspace for t in self.built.agent.tools if t.name == "write" and hasattr(t, "workspace")), None)
        if workspace is not None and workspace.is_hidden(real):
            return None
        try:
            info = os.stat(real)
            if not stat.S_ISREG(info.st_mode) or info.st_size > 1 << 20:
                return None
            with open(real, "rb") as f:
                return f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _tool_end(self, call_id: str, name: str, result: Any, is_error: bool) -> None:
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call_id,
            "status": "failed" if is_error else "completed",
        }
        details = result.details if isinstance(result.details, dict) else {}
        described = self.titles.pop(call_id, {})
        self.started.discard(call_id)
        content: list[dict[str, Any]] = []
        if name in ("edit", "write") and not is_error and described.get("content"):
            content.extend(described["content"])
            line = details.get("first_changed_line")
            path = details.get("path")
            if isinstance(path, str):
                update["locations"] = [{"path": path, **({"line": line} if isinstance(line, int) else {})}]
        terminal = details.get("terminal_id")
        if isinstance(terminal, str):
            content.append({"type": "terminal", "terminalId": terminal})
        elif not (name in ("edit", "write") and not is_error):
            text = result.text
            if text:
                content.append({"type": "content", "content": {"type": "text", "text": text}})
        for block in result.blocks:
            if block.type == "image" and block.data is not None:
                content.append({"type": "content", "content": {"type": "image", "data": block.data, "mimeType": block.mime_type}})
        update["content"] = content
        self._update(update)
        todos = details.get("todos")
        if name == "todo_write" and not is_error and isinstance(todos, list):
            # the to-do list (ketch.tools.Todo) is the editor's plan: the whole list each time
            entries = [
                {"content": t.get("content"), "priority": t.get("priority", "medium"), "status": t.get("status")}
                for t in todos
                if isinstance(t, dict)
            ]
            self._update({"sessionUpdate": "plan", "entries": entries})

    def replay(self) -> None:
        """Send the loaded conversation as ``session/update`` notifications."""
        from ..llm import AssistantMessage
        from ..llm import ImageContent
        from ..llm import TextContent
        from ..llm import ToolResultMessage
        from ..llm import UserMessage
        from ..loop import ToolResult

        assert self.built is not None
        for message in self.built.agent.messages:
            if isinstance(message, UserMessage):
                for block in message.content if isinstance(message.content, list) else ():
                    if isinstance(block, TextContent):
                        self._update({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": block.text}})
                    elif isinstance(block, ImageContent) and block.data is not None:
                        self._update(
                            {
                                "sessionUpdate": "user_message_chunk",
                                "content": {"type": "image", "data": block.data, "mimeType": block.mime_type},
                            }
                        )
            elif isinstance(message, AssistantMessage):
                for part in message.content:
                    if part.type == "thinking" and part.thinking:
                        self._update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": part.thinking}})
                    elif part.type == "text" and part.text:
                        self._update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": part.text}})
                    elif part.type == "tool_call":
                        self._tool_start(part.id, part.name, part.args)
            elif isinstance(message, ToolResultMessage):
                result = ToolResult(content=list(message.content), details=message.details, is_error=message.is_error)
                self._tool_end(message.tool_call_id, message.tool_name, result, message.is_error)

    # -- permissions --
    async def _ask(self, request: PermissionRequest) -> Approval:
        from ..permissions import Approval

        call_id = _CALL.get() or f"call-{uuid.uuid4().hex[:8]}"
        described = self.titles.get(call_id) or self._describe(call_id, request.tool_name, request.args)
        options = [{"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"}]
        if request.suggested_rules:
            rules = ", ".join(str(r) for r in request.suggested_rules)
            options.append({"optionId": "allow_always", "name": f"Always allow {rules}", "kind": "allow_always"})
        options.append({"optionId": "reject_once", "name": "Reject", "kind": "reject_once"})
        tool_call = {k: v for k, v in described.items() if k != "status"}
        asking = asyncio.ensure_future(
            self.rpc.request("session/request_permission", {"sessionId": self.id, "toolCall": tool_call, "options": options})
        )
        cancelled = asyncio.ensure_future(self.cancelled.wait())
        try:
            await asyncio.wait({asking, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if not asking.done():
            asking.cancel()
            return Approval.deny("The user cancelled the prompt.")
        try:
            answer = asking.result()
        except RpcError as exc:
            return Approval.deny(f"The permission request failed: {exc}")
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        chosen = outcome.get("optionId") if isinstance(outcome, dict) and outcome.get("outcome") == "selected" else None
        if chosen == "allow_once":
            self._update({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
            self.started.add(call_id)
            return Approval.once()
        if chosen == "allow_always":
            self._update({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
            self.started.add(call_id)
            return Approval.always()
        if chosen is None:
            return Approval.deny("The user cancelled the prompt.")
        return Approval.deny(None)


def _marked(gate: Callable[[ToolCallInfo], Any]) -> Callable[[ToolCallInfo], Awaitable[Any]]:
    """The permission gate with the call's id known to the approver (:data:`_CALL`)."""
    import inspect

    async def marked(call: ToolCallInfo) -> Any:
        token = _CALL.set(call.tool_call.id)
        try:
            verdict = gate(call)
            return await verdict if inspect.isawaitable(verdict) else verdict
        finally:
            _CALL.reset(token)

    return marked


def _settings(args: argparse.Namespace, root: Path) -> Settings:
    from ._config import finish_settings
    from ._config import load_settings
    from ._main import _flags

    settings = load_settings(root, _flags(args), trust=args.trust_project)
    finish_settings(settings, args.allow, None)
    return settings


def _mcp_entries(servers: list[Any]) -> dict[str, dict[str, Any]]:
    """The editor's MCP servers (``session/new``'s ``mcpServers``) as ``.mcp.json`` entries."""
    entries: dict[str, dict[str, Any]] = {}
    for i, server in enumerate(servers):
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            raise RpcError(INVALID_PARAMS, f"mcpServers[{i}] must be an object with a name")
        name = server["name"]
        kind = server.get("type", "stdio")
        if kind == "stdio" or "command" in server:
            env = {e["name"]: e["value"] for e in server.get("env") or () if isinstance(e, dict) and "name" in e}
            entries[name] = {"command": server.get("command"), "args": list(server.get("args") or []), "env": env}
        elif kind in ("http", "sse"):
            headers = {h["name"]: h["value"] for h in server.get("headers") or () if isinstance(h, dict) and "name" in h}
            entries[name] = {"type": kind, "url": server.get("url"), "headers": headers}
        else:
            raise RpcError(INVALID_PARAMS, f"mcpServers[{i}] ({name}): type {kind!r} is not supported (stdio, http, sse)")
    return entries


def _prompt_content(blocks: list[Any]) -> tuple[str, list[Any]]:
    """The text and images of a prompt's content blocks: resource links and embedded
    resources become text the model reads (an embedded text resource inside
    ``<context uri="…">`` tags)."""
    from ..llm import ImageContent

    texts: list[str] = []
    images: list[Any] = []
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "image" and isinstance(block.get("data"), str):
            images.append(ImageContent(data=block["data"], mime_type=str(block.get("mimeType") or "image/png")))
        elif kind == "resource_link":
            texts.append(f"[{block.get('name') or 'resource'}]({block.get('uri', '')})")
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            if isinstance(resource.get("text"), str):
                texts.append(f'<context uri="{resource.get("uri", "")}">\n{resource["text"]}\n</context>')
            else:
                texts.append(f"[binary resource {resource.get('uri', '')} ({resource.get('mimeType') or 'unknown type'}), not shown]")
        else:
            raise RpcError(INVALID_PARAMS, f"prompt[{i}]: content of type {kind!r} is not supported (text, image, resource_link, resource)")
    return "\n".join(texts), images


# -- the editor's file system and terminals -----------------------------------------------------


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


class EditorFileTool:
    """ketch's ``write`` or ``edit`` tool with the write going through the editor
    (``fs/write_text_file``): the change is worked out by ketch's tool (its checks, the
    read-before-write rule), and refused when the editor's buffer of the file holds
    unsaved changes (``fs/read_text_file`` differs from the file on disk)."""

    def __init__(self, inner: Any, session: AcpSession) -> None:
        self.inner = inner
        self.session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def precheck(self, args: dict[str, Any]) -> str | None:
        result: str | None = self.inner.precheck(args)
        return result

    def touched_paths(self, args: dict[str, Any]) -> list[str]:
        try:
            return [os.fspath(self.inner.workspace.resolve(args.get("path", "")))]
        except Exception:
            return []

    def is_read_only(self, args: dict[str, Any]) -> bool:
        return False

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        from ..loop import ToolResult

        change = await self.inner._change(args, ctx)
        if isinstance(change, ToolResult):
            return change
        path: Path = change.path
        shown = self.inner.workspace.display(path)
        rpc, sid = self.session.rpc, self.session.id
        on_disk = _read(path)
        if on_disk is not None and self.session.acp.client_fs_read:
            try:
                answer = await rpc.request("fs/read_text_file", {"sessionId": sid, "path": str(path)})
            except RpcError:
                answer = None
            buffer = answer.get("content") if isinstance(answer, dict) else None
            if isinstance(buffer, str) and buffer != on_disk.decode("utf-8", "replace"):
                return ToolResult.error(
                    f"{shown} has unsaved changes in the editor. Ask the user to save or discard them, "
                    "then read the file again before you change it."
                )
        try:
            await rpc.request("fs/write_text_file", {"sessionId": sid, "path": str(path), "content": change.data.decode("utf-8")})
        except RpcError as exc:
            return ToolResult.error(f"The editor could not write {shown}: {exc}")
        written = _read(path)
        try:
            info: os.stat_result | None = os.stat(path)
        except OSError:
            info = None
        if written == change.data and info is not None:
            self.inner.workspace.record(path, change.data, info)
        else:  # the editor did not save it to disk (yet): read it again before the next change
            self.inner.workspace.forget(path)
        result: ToolResult = change.result
        return result


class EditorTerminalBash:
    """ketch's ``bash`` tool, when its commands would run outside a sandbox anyway,
    running them in an editor terminal (``terminal/create``, ``wait_for_exit``,
    ``output``, ``release``; ``kill`` on abort or timeout). The command gets the tool's
    allow-listed environment (no secrets). Not checkpointed for rewinds."""

    def __init__(self, inner: Any, session: AcpSession) -> None:
        self.inner = inner
        self.session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def sandboxed(self) -> bool:
        return False

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        from ..llm import Aborted
        from ..loop import ToolResult

        inner = self.inner
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolResult.error("command is empty. Give a shell command to run.")
        if args.get("background"):
            result: ToolResult = await inner.execute(args, ctx)  # ketch's own task registry
            return result
        timeout = args.get("timeout", inner.default_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            return ToolResult.error(f"timeout must be a positive number of seconds, got {timeout!r}.")
        ws = inner.workspace
        try:
            cwd = ws.resolve(args["cwd"]) if args.get("cwd") is not None else ws.root
        except Exception as exc:
            return ToolResult.error(str(exc))
        rpc, sid = self.session.rpc, self.session.id
        try:
            created = await rpc.request(
                "terminal/create",
                {
                    "sessionId": sid,
                    "command": inner.shell,
                    "args": ["-c", command],
                    "env": [{"name": k, "value": v} for k, v in inner.env.items()],
                    "cwd": str(cwd),
                    "outputByteLimit": 1 << 20,
                },
            )
            terminal = str(created["terminalId"])
        except (RpcError, KeyError, TypeError) as exc:
            return ToolResult.error(f"The editor could not start a terminal: {exc}")
        self.session._update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": ctx.call_id,
                "status": "in_progress",
                "content": [{"type": "terminal", "terminalId": terminal}],
            }
        )
        timed_out = aborted = False
        try:
            try:
                async with asyncio.timeout(min(float(timeout), inner.max_timeout)), ctx.signal.scope():
                    exit_status = await rpc.request("terminal/wait_for_exit", {"sessionId": sid, "terminalId": terminal})
            except TimeoutError:
                timed_out = True
                exit_status = None
            except Aborted:
                aborted = True
                exit_status = None
            if exit_status is None:
                try:
                    await rpc.request("terminal/kill", {"sessionId": sid, "terminalId": terminal})
                except RpcError:
                    pass
            output = await rpc.request("terminal/output", {"sessionId": sid, "terminalId": terminal})
        except RpcError as exc:
            return ToolResult.error(f"The editor's terminal failed: {exc}")
        finally:
            try:
                await rpc.request("terminal/release", {"sessionId": sid, "terminalId": terminal})
            except RpcError:
                pass
        text = str(output.get("output", "")) if isinstance(output, dict) else ""
        status = exit_status if isinstance(exit_status, dict) else (output.get("exitStatus") if isinstance(output, dict) else None)
        code = status.get("exitCode") if isinstance(status, dict) else None
        details = {"command": command, "cwd": str(cwd), "exit_code": code, "timed_out": timed_out, "aborted": aborted, "terminal_id": terminal}
        if timed_out:
            return ToolResult(content=f"{text}\n[timed out after {timeout:g} s]".lstrip(), details=details, is_error=True)
        if aborted:
            return ToolResult(content=f"{text}\n[aborted]".lstrip(), details=details, is_error=True)
        if code not in (0, None):
            return ToolResult(content=f"{text}\n[exit code {code}]".lstrip(), details=details, is_error=True)
        return ToolResult(content=text or "(no output)", details=details)


def acp_command(argv: list[str]) -> int:
    """``ketch acp``: serve the Agent Client Protocol until stdin ends; the exit code."""
    if any(a in ("-h", "--help") for a in argv):
        _parser().parse_args(argv)  # prints the help and exits
    agent: AcpAgent | None = None

    def gone() -> None:
        if agent is not None and agent.lines is not None:
            agent.ending = True
            agent.lines.end()

    async def main() -> int:
        nonlocal agent
        agent = AcpAgent(argv, JsonLines(on_broken=gone))
        return await agent.serve()

    return asyncio.run(main())
