"""The values the MCP client hands out and takes: states, statuses, elicitation, logs."""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal
from typing import TypeAlias

from ketch.loop import Tool

ServerState: TypeAlias = Literal["stopped", "starting", "running", "failed", "disabled"]

LoggingLevel: TypeAlias = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]

LOG_LEVELS: tuple[LoggingLevel, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""The MCP log levels (syslog's), least severe first."""

TaskSupport: TypeAlias = Literal["forbidden", "optional", "required"]


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """A server asks the user for input (``elicitation/create``).

    ``mode`` is ``"form"`` (answer with ``content`` matching ``requested_schema``) or
    ``"url"`` (the user is to open ``url``; answer ``accept`` once they have done what
    the page asks). A URL elicitation comes as a request, or as a tool call's
    ``-32042`` error naming the URL(s) to open first: after an ``accept`` the call is made
    again. ``elicitation_id`` is the server's id of a URL elicitation.
    """

    server: str
    message: str
    mode: Literal["form", "url"] = "form"
    requested_schema: dict[str, Any] = field(default_factory=dict)
    url: str | None = None
    elicitation_id: str | None = None


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
    ``failed`` (start-up failed, the connection died or the configuration is broken;
    ``error`` says why; the next use starts it again), ``disabled`` (``"disabled":
    true`` in its configuration: never started). ``tools`` are the ketch names of its
    tools as last listed; ``protocol`` the MCP version the connection speaks.
    """

    name: str
    type: str
    state: ServerState
    tools: tuple[str, ...] = ()
    error: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class ServerLog:
    """One log message of a server (``notifications/message``): its ``level`` (one of
    :data:`LOG_LEVELS`), the ``logger`` it names (if any) and its ``data`` (any JSON)."""

    server: str
    level: str
    logger: str | None
    data: Any

    @property
    def text(self) -> str:
        """``data`` as one line of text (a string as it is, anything else as JSON)."""
        import json

        text = self.data if isinstance(self.data, str) else json.dumps(self.data, ensure_ascii=False, default=str)
        return " ".join(text.split())


class MCPTool(Tool):
    """A ketch tool backed by an MCP server's tool (``server``, ``mcp_name``).

    ``task_support`` is the tool's ``execution.taskSupport`` (``forbidden`` when it
    declares none): see :class:`~ketch.mcp.MCPManager` for when a call is a task."""

    __slots__ = ("mcp_name", "server", "task_support")

    def __init__(
        self, name: str, *, server: str, mcp_name: str, task_support: TaskSupport = "forbidden", **kwargs: Any
    ) -> None:
        super().__init__(name, **kwargs)
        self.server = server
        self.mcp_name = mcp_name
        self.task_support: TaskSupport = task_support


def schema(raw: Any) -> dict[str, Any]:
    """A tool's input schema as ketch wants it: an object schema without ``$schema``."""
    out = dict(raw) if isinstance(raw, Mapping) else {}
    out.pop("$schema", None)
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (the first of
    a group's exceptions)."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe(exc.exceptions[0])
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


