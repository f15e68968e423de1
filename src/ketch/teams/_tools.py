"""The tools a teammate gets: ``send_message``, ``broadcast`` and ``list_teammates``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ketch import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from ._team import Team, Teammate


def _text_param(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def team_tools(team: Team, member: Teammate) -> tuple[Tool, Tool, Tool]:
    """The three team tools of ``member`` (each knows who is calling)."""
    me = member.name

    async def send_message(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        to, text = args.get("to"), args.get("text")
        problem = team._problem(me, to, text)
        if problem is not None:
            return ToolResult.error(problem)
        assert isinstance(to, str) and isinstance(text, str)
        mail = await team._post(me, to, text)
        note = ""
        target = team._members.get(to)
        if target is not None and target.failures and target.last_result is not None:
            note = f" Note: {to}'s last run failed ({target.last_error}); this message starts a new one."
        return ToolResult(
            content=f"Message #{mail.id} sent to {to}.{note}",
            details={"id": mail.id, "to": to, "seq": mail.seq},
        )

    async def broadcast(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
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

    async def list_teammates(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        lines = [f"Team {team.name!r} (you are {me!r}):"]
        rows: list[dict[str, Any]] = []
        lines.append(f"- {team.lead}: the team lead (runs the team; reads its messages itself)")
        for m in team._members.values():
            you = " (you)" if m.name == me else ""
            role = f": {m.description}" if m.description else ""
            lines.append(f"- {m.name}{you}{role} [{m.state}, {m.unread} unread]")
            rows.append({"name": m.name, "description": m.description, "state": m.state, "unread": m.unread})
        return ToolResult(content="\n".join(lines), details=rows)

    return (
        Tool(
            "send_message",
            "Send a message to one teammate (or to the team lead). It is delivered at once; "
            "the teammate reads it at its next turn and may answer with send_message.",
            {
                "type": "object",
                "properties": {
                    "to": _text_param("The teammate's name (see list_teammates)."),
                    "text": _text_param("The message."),
                },
                "required": ["to", "text"],
                "additionalProperties": False,
            },
            send_message,
            reports_progress=False,
        ),
        Tool(
            "broadcast",
            "Send the same message to every other teammate (not the team lead).",
            {
                "type": "object",
                "properties": {"text": _text_param("The message.")},
                "required": ["text"],
                "additionalProperties": False,
            },
            broadcast,
            reports_progress=False,
        ),
        Tool(
            "list_teammates",
            "List the team: each teammate's name, role, state (idle or working) and unread messages.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            list_teammates,
            read_only=True,
            reports_progress=False,
        ),
    )
