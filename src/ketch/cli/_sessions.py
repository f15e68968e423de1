"""Sessions in the command: opening the session of a run, and ``ketch sessions``.

Every run of the command is saved as a session in :func:`ketch.sessions.default_store`
(``--no-session``: not). ``--resume ID`` continues a session (an unambiguous prefix of
its id is enough), ``--continue`` the latest one of the working directory.

``ketch sessions list [-o json] [--all]`` lists the sessions of the working directory
(``--all``: of every directory), newest first; ``show ID [-o json]`` prints the
transcript; ``export ID --format markdown|json`` writes it as a document;
``delete ID`` deletes the session. An unknown id is a usage error (exit code 2).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import msgspec

from ._args import OneLineParser
from ._config import ConfigError
from ._config import Settings
from ._config import directory
from ._lines import result_preview
from ._lines import tool_call_line
from ._wire import EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .. import RunState
    from ..permissions import PermissionEngine
    from ..sessions import Session
    from ..sessions import SessionInfo
    from ..sessions import SessionStore



@dataclass(slots=True)
class SessionOptions:
    """The session flags of a run: ``--resume`` (``""``: choose one), ``--continue``,
    ``--no-session`` (``enabled`` false) and the decisions on a paused run's calls."""

    resume: str | None = None
    continue_latest: bool = False
    enabled: bool = True
    approve: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)

    @property
    def resuming(self) -> bool:
        """Whether the run continues an earlier session."""
        return self.resume is not None or self.continue_latest


def store() -> SessionStore:
    """The store of the command's sessions (:func:`ketch.sessions.default_store`)."""
    from ..sessions import default_store

    return default_store()


def unknown_session(text: str) -> ConfigError:
    """The error for a session id that names no session."""
    return ConfigError(f"unknown session {text!r}: 'ketch sessions list --all' shows the session ids")


async def _all_sessions(sessions: SessionStore, cwd: str | None = None) -> list[SessionInfo]:
    found: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await sessions.list(cwd=cwd, limit=200, cursor=cursor)
        found.extend(page.sessions)
        cursor = page.next_cursor
        if cursor is None or not page.sessions:
            return found


async def resolve_id(sessions: SessionStore, text: str) -> str:
    """The id of the session ``text`` names: its id, or a prefix of exactly one id."""
    from ..sessions import SessionNotFoundError

    if not text.strip():
        raise unknown_session(text)
    try:
        await sessions.info(text)
        return text
    except SessionNotFoundError:
        pass
    matches = [info.id for info in await _all_sessions(sessions) if info.id.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"session id {text!r} is ambiguous: it starts {len(matches)} sessions; give more of it")
    raise unknown_session(text)


async def open_session(options: SessionOptions, root: Path, sessions: SessionStore | None = None) -> Session | None:
    """The session a run writes to: none with ``--no-session``, the one ``--resume`` or
    ``--continue`` names, else a new one for ``root``. Raises :class:`ConfigError` for an
    unknown id, a session open elsewhere or a store that cannot be written."""
    if not options.enabled:
        return None
    from ..sessions import Session
    from ..sessions import SessionLockedError

    sessions = store() if sessions is None else sessions
    try:
        if options.resume:
            session_id = await resolve_id(sessions, options.resume)
            session = await Session.open(sessions, session_id)
            if session.cwd and session.cwd != str(root):
                sys.stderr.write(
                    f"ketch: warning: session {session.id} was started in {session.cwd}; "
                    f"the tools work in {root} (-C {session.cwd} works there)\n"
                )
            return session
        if options.continue_latest:
            latest = await Session.latest(sessions, cwd=str(root))
            if latest is None:
                raise ConfigError(f"--continue: no saved session in {root}; start one without --continue")
            return latest
    except SessionLockedError as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, ValueError) as exc:  # unreadable storage
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot open the session: {detail}") from None
    try:
        return await Session.create(sessions, cwd=str(root))
    except Exception as exc:  # the run goes on without being saved; it is not lost work yet
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        sys.stderr.write(f"ketch: warning: this run is not saved as a session: {detail}\n")
        return None


def use_recorded_model(settings: Settings, session: Session | None) -> None:
    """A resumed session keeps the model it was last run with, unless ``--model`` (or
    the test script variable) names one."""
    import os

    from ._scripted import SCRIPT_ENV

    recorded = session.model if session is not None else None
    if not recorded or recorded.startswith("scripted:") or os.environ.get(SCRIPT_ENV):
        return
    if settings.sources.get("model", "").startswith("flag"):
        return
    settings.model = recorded
    settings.sources["model"] = f"session {session.id if session is not None else ''}"


def pre_approve(engine: PermissionEngine, state: RunState, decisions: Mapping[str, Any]) -> None:
    """The calls of a paused run the user approved (``decisions``) run without being asked
    again when ``engine`` has an approver (on a terminal): each is allowed once."""
    from ..loop import Approve
    from ..permissions import Approval
    from ..permissions import PermissionRequest
    from ..permissions import args_digest

    approver = engine.approver
    approved = {
        (p.tool_name, args_digest(p.args)) for p in state.awaiting if isinstance(decisions.get(p.tool_call_id), Approve)
    }
    if approver is None or not approved:
        return

    async def ask(request: PermissionRequest) -> Approval:
        key = (request.tool_name, args_digest(request.args))
        if key in approved:
            approved.discard(key)
            return Approval.once()
        return await approver(request)

    engine.approver = ask


# -- ketch sessions -----------------------------------------------------------------------


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def info_dict(info: SessionInfo) -> dict[str, Any]:
    """A session's metadata as the JSON object ``ketch sessions list -o json`` writes:
    every :class:`~ketch.sessions.SessionInfo` field (``forked_from`` a list or null)."""
    out: dict[str, Any] = msgspec.to_builtins(info)
    return out


def list_lines(infos: Sequence[SessionInfo], *, current: str | None = None) -> list[str]:
    """The sessions as the text lines of ``ketch sessions list`` (a header, then one line
    each: id, updated time, messages, cost, title); ``current`` is marked with ``*``."""
    rows = [f"  {'ID':<32}  {'UPDATED':<16}  {'MSGS':>4}  {'COST':>8}  TITLE"]
    for info in infos:
        mark = "*" if info.id == current else " "
        title = info.title or "(no prompt yet)"
        rows.append(f"{mark} {info.id:<32}  {_when(info.updated):<16}  {info.message_count:>4}  ${info.cost:>7.4f}  {title}")
    return rows


def transcript_lines(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The transcript as the text lines of ``ketch sessions show``: each message's role
    and text, tool calls as ``→ tool argument`` and the first lines of their results."""
    from ..sessions._export import content_text

    out: list[str] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            out.append(f"user: {content_text(content)}")
        elif role == "assistant":
            text = content_text(content)
            if text:
                out.append(f"assistant: {text}")
            for block in content or []:
                if isinstance(block, dict) and block.get("type") == "tool_call":
                    out.append(tool_call_line(str(block.get("name", "")), block.get("args")) + f"  [{block.get('id', '')}]")
            if message.get("stop_reason") in ("error", "aborted"):
                out.append(f"  ({message['stop_reason']}: {message.get('error_message') or 'no message'})")
        elif role == "tool_result":
            out.extend(result_preview(content_text(content), bool(message.get("is_error"))))
        elif role == "context_summary":
            out.append(f"summary of the earlier conversation: {message.get('summary', '')}")
        else:
            out.append(f"{role}: {content_text(content) or message.get('text', '')}")
    return out


async def _list(args: Any) -> int:
    sessions = store()
    root = _root(args)
    infos = await _all_sessions(sessions, None if args.all else str(root))
    if args.output == "json":
        sys.stdout.write(json.dumps([info_dict(i) for i in infos], ensure_ascii=False) + "\n")
    elif not infos:
        where = "" if args.all else f" in {root}"
        sys.stderr.write(f"ketch: no saved sessions{where}\n")
    else:
        sys.stdout.write("\n".join(list_lines(infos)) + "\n")
    return 0


async def _show(args: Any) -> int:
    from ..sessions import export_json
    from ..sessions._export import transcript

    sessions = store()
    session_id = await resolve_id(sessions, args.id)
    entries = await sessions.load(session_id)
    if args.output == "json":
        sys.stdout.write(export_json(entries, session_id=session_id))
    else:
        lines = transcript_lines(transcript(entries))
        sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


async def _export(args: Any) -> int:
    from ..sessions import export_json
    from ..sessions import export_markdown

    sessions = store()
    session_id = await resolve_id(sessions, args.id)
    entries = await sessions.load(session_id)
    render = export_markdown if args.format == "markdown" else export_json
    sys.stdout.write(render(entries, session_id=session_id))
    return 0


async def _delete(args: Any) -> int:
    from ..sessions import SessionLockedError

    sessions = store()
    session_id = await resolve_id(sessions, args.id)
    try:
        await sessions.delete(session_id)
    except SessionLockedError as exc:
        raise ConfigError(str(exc)) from None
    sys.stderr.write(f"ketch: deleted session {session_id}\n")
    return 0


def _root(args: Any) -> Path:
    return directory(args.cwd)


def _sessions_parser() -> OneLineParser:
    parser = OneLineParser(prog="ketch sessions", description="Saved sessions: list, show, export, delete.")
    sub = parser.add_subparsers(dest="action", metavar="list|show|export|delete", parser_class=OneLineParser)
    sub.required = True
    listing = sub.add_parser("list", help="the sessions of this directory, newest first")
    listing.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    listing.add_argument("--all", action="store_true", help="the sessions of every directory")
    listing.add_argument("-C", "--cwd", help="the directory whose sessions to list")
    show = sub.add_parser("show", help="the transcript of a session")
    show.add_argument("id", help="session id (or a unique prefix)")
    show.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    export = sub.add_parser("export", help="the session as a Markdown or JSON document on stdout")
    export.add_argument("id", help="session id (or a unique prefix)")
    export.add_argument("--format", choices=("markdown", "json"), default="markdown", help="document format")
    delete = sub.add_parser("delete", help="delete a session")
    delete.add_argument("id", help="session id (or a unique prefix)")
    return parser


def sessions_command(argv: Sequence[str]) -> int:
    """Run ``ketch sessions …``; returns the exit code."""
    args = _sessions_parser().parse_args(argv)
    action = {"list": _list, "show": _show, "export": _export, "delete": _delete}[args.action]
    try:
        return asyncio.run(action(args))
    except ConfigError as exc:
        sys.stderr.write(f"ketch: {exc}\n")
        return EXIT_USAGE


async def rewind_prompt(session: Session, agent: Any, arg: str) -> list[tuple[str, str]]:
    """``/rewind [N]`` (interactive and ACP): without N, the lines listing the user's
    prompts; with N, undo prompt N and everything after it (the conversation and the file
    changes, bash's included) and the lines saying what was done. Each line comes with
    its style (``""``, ``"dim"``, ``"yellow"``, ``"red"``)."""
    from ..llm import UserMessage
    from ..llm._messages import message_text

    prompts = [(i, message_text(m)) for i, m in enumerate(agent.messages) if type(m) is UserMessage]
    if not prompts:
        return [("nothing to rewind: no prompt yet", "yellow")]
    if not arg:
        lines = []
        for number, (_, text) in enumerate(prompts, 1):
            line = " ".join(text.split())
            lines.append((f"{number:>3}. {line[:100]}{'…' if len(line) > 100 else ''}", ""))
        lines.append(("/rewind N undoes prompt N and everything after it (conversation and file changes)", "dim"))
        return lines
    if not arg.isdigit() or not 1 <= int(arg) <= len(prompts):
        return [(f"/rewind {arg}: expected a prompt number from 1 to {len(prompts)} (/rewind lists them)", "red")]
    index, text = prompts[int(arg) - 1]
    await session.sync()
    # back to just after the message before prompt N; before the first prompt: back to
    # just after it (its files restored), then the empty conversation
    report = await session.rewind(session.message_ids[max(index - 1, 0)], files=True, conversation=True)
    if index == 0:
        agent.messages = []
        await session.sync()
    lines = [(f"rewound to before prompt {arg}: {' '.join(text.split())[:80]}", "")]
    if report.restored or report.deleted:
        lines.append((f"files restored: {', '.join([*report.restored, *report.deleted])}", ""))
    if report.conflicts:
        lines.append((f"changed outside ketch since, left as they are: {', '.join(report.conflicts)}", "yellow"))
    if report.skipped:
        skipped = ", ".join(report.skipped)
        lines.append((f"not restored, their earlier content was not saved (too big, unreadable): {skipped}", "yellow"))
    return lines
