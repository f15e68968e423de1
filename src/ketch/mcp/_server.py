"""ketch as an MCP server: its tools, and a whole ketch agent, for any MCP client.

:class:`KetchMCPServer` serves a list of ketch :class:`~ketch.loop.Tool` objects (the
``ketch mcp serve`` command gives it the built-in coding tools of its workspace) and,
when given an ``agent`` runner, a ``ketch_agent`` tool that runs a full agent on a
``task`` and returns its final text. Over stdio (:meth:`KetchMCPServer.serve_stdio`)
or streamable HTTP bound to the loopback interface only
(:meth:`KetchMCPServer.serve_http`).

Each call goes through the pipeline a model's call goes through in a run: the tool's
``prepare_arguments``, schema validation (the same messages), then the ``gate`` (a
``before_tool_call`` hook such as :meth:`ketch.permissions.PermissionEngine.before_tool_call`;
a blocked call is an MCP error result carrying the gate's reason), then the tool, then
``after`` (an ``after_tool_call`` hook: PostToolUse hooks).
What a tool reports while it runs (bash output) and what the agent does (turns, tool
calls) reach the client as ``notifications/progress`` when it asked for progress.
Tool annotations come from the tools' declarations: ``readOnlyHint`` from
``read_only`` (a per-call ``read_only`` function counts as not read-only),
``destructiveHint`` and ``idempotentHint`` from what the built-in tools do.

The ``mcp`` SDK is imported when a server is built, never at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import signal
import socket
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ketch.tools import validate_arguments

from ..llm import AbortSignal
from ..llm import AssistantMessage
from ..llm import ImageContent
from ..llm import TextContent
from ..llm import ToolCall
from ..llm import exception_text
from ..loop import AfterToolCallResult
from ..loop import AgentEvent
from ..loop import BeforeToolCallResult
from ..loop import Conversation
from ..loop import RunResult
from ..loop import Tool
from ..loop import ToolCallInfo
from ..loop import ToolContext
from ..loop import ToolResult

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.lowlevel import Server

AGENT_TOOL = "ketch_agent"
"""The name of the tool that runs a whole ketch agent."""

AGENT_DESCRIPTION = (
    "Run a ketch coding agent on a task in this server's workspace and return its final answer. "
    "The agent reads, searches and (as its permissions allow) edits files and runs commands "
    "on its own, over as many turns as it needs. Give it a complete, self-contained task."
)

Gate = Callable[[ToolCallInfo], Awaitable[BeforeToolCallResult | None]]
"""A ``before_tool_call`` hook deciding whether a call runs."""

After = Callable[[ToolCallInfo, ToolResult], Awaitable[AfterToolCallResult | None]]
"""An ``after_tool_call`` hook that may change a call's result (PostToolUse hooks)."""

Progress = Callable[[str], Awaitable[None]]
"""Sends one progress message to the client."""

AgentRunner = Callable[[str, Callable[[AgentEvent], Awaitable[None]]], Awaitable[RunResult]]
"""Runs an agent on a task, calling the listener with every event; returns the run's result."""

# What the built-in tools do, beyond ``read_only``: (destructive, idempotent).
_HINTS: dict[str, tuple[bool, bool]] = {
    "write": (True, True),
    "edit": (True, False),
    "bash": (True, False),
}


def _annotations(tool: Tool) -> dict[str, Any]:
    """The MCP tool annotations for ``tool`` (camelCase keys)."""
    read_only = tool.read_only is True
    hints: dict[str, Any] = {"title": tool.label or tool.name, "readOnlyHint": read_only}
    if read_only:
        hints["idempotentHint"] = True
    else:
        destructive, idempotent = _HINTS.get(tool.name, (True, False))
        hints["destructiveHint"] = destructive
        hints["idempotentHint"] = idempotent
    hints["openWorldHint"] = False
    return hints


def _progress_text(partial: Any) -> str:
    if isinstance(partial, str):
        return partial
    if isinstance(partial, ToolResult):
        return partial.text
    return str(partial)


class KetchMCPServer:
    """Serves ``tools`` (each call passed through ``gate`` first) and, with ``agent``,
    the ``ketch_agent`` tool, as the MCP server ``name``."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        gate: Gate | None = None,
        after: After | None = None,
        agent: AgentRunner | None = None,
        name: str = "ketch",
        version: str = "",
        instructions: str | None = None,
    ) -> None:
        names = [t.name for t in tools]
        if agent is not None:
            names.append(AGENT_TOOL)
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tool names: {', '.join(names)}")
        self.tools = {t.name: t for t in tools}
        self.gate = gate
        self.after = after
        self.agent = agent
        self.name = name
        self.version = version
        self.instructions = instructions
        self._ids = itertools.count(1)

    # -- the tools ------------------------------------------------------------------------
    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools as MCP ``tools/list`` entries (name, description, inputSchema,
        annotations), ``ketch_agent`` last."""
        specs = [
            {
                "name": t.name,
                "description": t.description,
                "inputSchema": t.parameters,
                "annotations": _annotations(t),
            }
            for t in self.tools.values()
        ]
        if self.agent is not None:
            specs.append(
                {
                    "name": AGENT_TOOL,
                    "description": AGENT_DESCRIPTION,
                    "inputSchema": {
                        "type": "object",
                        "properties": {"task": {"type": "string", "description": "What the agent should do."}},
                        "required": ["task"],
                        "additionalProperties": False,
                    },
                    "annotations": {
                        "title": "ketch agent",
                        "readOnlyHint": False,
                        "destructiveHint": True,
                        "idempotentHint": False,
                        "openWorldHint": True,
                    },
                }
            )
        return specs

    async def call(self, name: str, arguments: dict[str, Any] | None, progress: Progress | None = None) -> ToolResult:
        """Run the tool ``name`` on ``arguments``; never raises (but for cancellation):
        every failure is an error result."""
        args = dict(arguments or {})
        if name == AGENT_TOOL and self.agent is not None:
            return await self._run_agent(args, progress)
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join([*self.tools, *([AGENT_TOOL] if self.agent is not None else [])])
            return ToolResult.error(f"Unknown tool {name!r}; the tools are {known}")
        call_id = f"mcp_{next(self._ids)}"
        signal = AbortSignal()
        try:
            return await self._call(tool, call_id, args, signal, progress)
        except asyncio.CancelledError:
            signal.abort("cancelled")
            raise
        except Exception as exc:
            return ToolResult.error(exception_text(exc))

    async def _call(
        self, tool: Tool, call_id: str, args: dict[str, Any], signal: AbortSignal, progress: Progress | None
    ) -> ToolResult:
        if tool.prepare_arguments is not None:
            prepared = tool.prepare_arguments(args)
            args = await prepared if inspect.isawaitable(prepared) else prepared
        args, problem = validate_arguments(tool.name, tool.parameters, args)
        if problem is not None:
            return ToolResult.error(problem)
        call = ToolCall(id=call_id, name=tool.name, args=args)
        assistant = AssistantMessage(content=[call])
        conversation = Conversation(tools=list(self.tools.values()))
        if self.gate is not None:
            info = ToolCallInfo(call, tool, args, assistant, conversation, signal)
            verdict = await self.gate(info)
            if verdict is not None:
                if verdict.block or verdict.approval:
                    return ToolResult.error(verdict.reason or "Tool execution was blocked")
                if verdict.args is not None:
                    args = verdict.args

        async def report(partial: Any) -> None:
            if progress is not None:
                await progress(_progress_text(partial))

        ctx: ToolContext[Any] = ToolContext(call_id=call_id, tool_name=tool.name, signal=signal, report=report)
        from ketch.loop import to_tool_result

        try:
            result = to_tool_result(await tool.execute(args, ctx))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = ToolResult.error(exception_text(exc))
        if self.after is not None:
            override = await self.after(ToolCallInfo(call, tool, args, assistant, conversation, signal), result)
            if override is not None:
                result = ToolResult(
                    content=override.content if override.content is not None else result.content,
                    details=result.details,
                    is_error=override.is_error if override.is_error is not None else result.is_error,
                )
        return result

    async def _run_agent(self, args: dict[str, Any], progress: Progress | None) -> ToolResult:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            return ToolResult.error("ketch_agent needs a non-empty string argument 'task'")
        assert self.agent is not None

        async def on_event(event: AgentEvent) -> None:
            if progress is None:
                return
            text = _event_text(event)
            if text is not None:
                await progress(text)

        try:
            result = await self.agent(task, on_event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return ToolResult.error(f"the ketch agent failed: {exception_text(exc)}")
        reason = result.end_reason
        text = result.text
        if reason == "stop" or reason == "stop_sequence":
            return ToolResult(content=text)
        detail = f": {result.summary.error}" if result.summary.error else ""
        note = f"[the ketch agent's run ended with {reason}{detail}]"
        return ToolResult(content=f"{text}\n\n{note}" if text else note, is_error=reason in ("error", "aborted"))

    # -- the MCP server ---------------------------------------------------------------------
    def build(self) -> Server[Any]:
        """The ``mcp`` SDK's low-level server for these tools."""
        import mcp_types as types
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool.model_validate(s) for s in self.tool_specs()])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            count = itertools.count(1)
            session = ctx.session

            async def progress(message: str) -> None:
                try:
                    await session.report_progress(next(count), None, message)
                except Exception:  # a client gone or not listening: the call goes on
                    pass

            result = await self.call(params.name, params.arguments, progress)
            return _mcp_result(result)

        return Server(
            self.name,
            version=self.version,
            instructions=self.instructions,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    async def serve_stdio(self) -> None:
        """Serve on stdin and stdout until stdin closes."""
        from mcp.server.stdio import stdio_server

        server = self.build()
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    async def serve_http(
        self, port: int = 0, *, path: str = "/mcp", on_ready: Callable[[str], None] | None = None
    ) -> None:
        """Serve streamable HTTP on ``127.0.0.1:port`` (``0``: a free port) until cancelled
        or stopped by SIGINT or SIGTERM (then it returns); ``on_ready(url)`` is called once it accepts connections."""
        import uvicorn

        app = self.build().streamable_http_app(streamable_http_path=path, host="127.0.0.1")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        url = f"http://127.0.0.1:{sock.getsockname()[1]}{path}"

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                # SIGINT and SIGTERM stop the server gracefully; the process then exits
                # normally (uvicorn would raise the signal again once shut down).
                handled = (signal.SIGINT, signal.SIGTERM)
                previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
                try:
                    yield
                finally:
                    for sig, handler in previous.items():
                        signal.signal(sig, handler)

            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                if on_ready is not None and not self.should_exit:
                    on_ready(url)

        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        try:
            await _Server(config).serve(sockets=[sock])
        finally:
            sock.close()


def _event_text(event: AgentEvent) -> str | None:
    """The progress message for an agent event (None: not worth one)."""
    if event.type == "turn_start":
        return f"turn {event.turn}"
    if event.type == "tool_execution_start":
        return f"calling {event.tool_name}"
    if event.type == "tool_execution_end":
        failed = event.is_error
        return f"{event.tool_name} {'failed' if failed else 'done'}"
    if event.type == "compaction_end":
        return "context compacted"
    return None


def _mcp_result(result: ToolResult) -> mcp_types.CallToolResult:
    """A ketch :class:`ToolResult` as an MCP ``CallToolResult``."""
    import mcp_types as types

    content: list[Any] = []
    for block in result.blocks:
        if type(block) is TextContent:
            content.append(types.TextContent(text=block.text))
        elif type(block) is ImageContent:
            if block.data is not None:
                content.append(types.ImageContent(data=block.data, mime_type=block.mime_type))
            else:
                content.append(types.TextContent(text=f"[image: {block.url}]"))
    return types.CallToolResult(content=content, is_error=result.is_error)
