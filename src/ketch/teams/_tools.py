"""The tools a teammate gets: ``send_message``, ``broadcast`` and ``list_teammates``.

Each teammate has its own three :class:`TeamTool` objects (a tool must know who calls
it); their names, descriptions and schemas are shared constants, so an idle teammate's
tools cost a few hundred bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from ketch import Tool
from ketch import ToolContext
from ketch import ToolResult

if TYPE_CHECKING:
    from ._team import Team
    from ._team import Teammate

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
    """One of a teammate's team tools, bound to the team and the calling teammate."""

    __slots__ = ("member", "team")

    def __init__(self, name: str, team: Team, member: Teammate) -> None:
        super().__init__(
            name,
            _DESCRIPTIONS[name],
            _SCHEMAS[name],
            read_only=name == "list_teammates",
            reports_progress=False,
            deferred=False,  # never hidden behind tool search: teammates need them
        )
        self.team = team
        self.member = member

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Run the tool for the teammate it belongs to."""
        if self.name == "send_message":
            return await _send(self.team, self.member.name, args)
        if self.name == "broadcast":
            return await _broadcast(self.team, self.member.name, args)
        return _list(self.team, self.member.name)


def team_tools(team: Team, member: Teammate) -> tuple[Tool, Tool, Tool]:
    """The three team tools of ``member``."""
    return (
        TeamTool("send_message", team, member),
        TeamTool("broadcast", team, member),
        TeamTool("list_teammates", team, member),
    )


async def _send(team: Team, me: str, args: dict[str, Any]) -> ToolResult:
    to, text = args.get("to"), args.get("text")
    problem = team._problem(me, to, text)
    if problem is not None:
        return ToolResult.error(problem)
    assert isinstance(to, str) and isinstance(text, str)
    mail = await team._post(me, to, text)
    note = ""
    target = team._members.get(to)
    if target is not None and target.failed:
        note = f" Note: {to}'s last run failed ({target.last_error}); this message starts a new one."
    return ToolResult(
        content=f"Message #{mail.id} sent to {to}.{note}",
        details={"id": mail.id, "to": to, "seq": mail.seq},
    )


async def _broadcast(team: Team, me: str, args: dict[str, Any]) -> ToolResult:
    text = args.get("text")
    problem = team._broadcast_problem(me, text)
    if problem is not None:
        return ToolResult.error(problem)
    assert isinstance(text, str)
    sent = [await team._post(me, to, text, broadcast=True) for to in team._recipients(me)]
    names = ", ".join(m.to for m in sent)
    return ToolResult(
        content=f"Message sent to {len(sent)} teammates: {names}.",
        details={"ids": [m.id for m in sent], "to": [m.to for m in sent]},
    )


def _list(team: Team, me: str) -> ToolResult:
    lines = [f"Team {team.name!r} (you are {me!r}):"]
    rows: list[dict[str, Any]] = []
    lines.append(f"- {team.lead}: the team lead (runs the team; reads its messages itself)")
    for m in team._members.values():
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
