"""The tools a teammate gets: ``send_message``, ``broadcast`` and ``list_teammates``.

Each teammate has its own three :class:`TeamTool` objects (a tool must know who calls
it: the team binds each to a function of its own for that teammate); their names,
descriptions and schemas are shared constants, so an idle teammate's tools cost a few
hundred bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

from ketch import Tool
from ketch import ToolContext
from ketch import ToolResult

_TEXT = {"type": "string", "description": "The message."}
_SEND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "description": "The teammate's name (see list_teammates)."},
        "text": _TEXT,
    },
    "required": ["to", "text"],
    "additionalProperties": False,
}
_BROADCAST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": _TEXT},
    "required": ["text"],
    "additionalProperties": False,
}
_LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
_DESCRIPTIONS = {
    "send_message": "Send a message to one teammate (or to the team lead). It is delivered at once; "
    "the teammate reads it at its next turn and may answer with send_message.",
    "broadcast": "Send the same message to every other teammate (not the team lead).",
    "list_teammates": "List the team: each teammate's name, role, state (idle or working) and unread messages.",
}
_SCHEMAS = {"send_message": _SEND_SCHEMA, "broadcast": _BROADCAST_SCHEMA, "list_teammates": _LIST_SCHEMA}


class TeamTool(Tool):
    """One of a teammate's team tools: ``run`` (given by the team, bound to the calling
    teammate) does the work."""

    __slots__ = ("_run",)

    def __init__(self, name: str, run: Callable[[dict[str, Any]], Awaitable[ToolResult]]) -> None:
        super().__init__(
            name,
            _DESCRIPTIONS[name],
            _SCHEMAS[name],
            read_only=name == "list_teammates",
            reports_progress=False,
            deferred=False,  # never hidden behind tool search: teammates need them
        )
        self._run = run

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Run the tool for the teammate it belongs to."""
        return await self._run(args)
