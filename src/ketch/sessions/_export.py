"""Exporting a session: its transcript as Markdown (to read) or JSON (to process).

Both rebuild the transcript from the session's entries the way loading does: ``message``
entries append (``detached`` ones, such as a compaction's summary, only become known),
a ``compaction`` or ``rewind`` entry replaces the transcript with the messages it lists.
Other entry types (checkpoints, run summaries, mode changes …) are not part of the
transcript.

Markdown shows user and assistant text, each tool call with its arguments as a JSON code
block, each tool result (cut after :data:`RESULT_CHARS` characters), errors and the
summaries of compactions; thinking is left out. JSON is an object with the session's id,
title, working directory and the transcript as a list of :func:`ketch.message_to_dict`
objects.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ._entries import content_text as content_text
from ._entries import message_title

if TYPE_CHECKING:
    from ._entries import Entry

RESULT_CHARS = 2000
"""A tool result longer than this is cut in the Markdown export (the JSON keeps it whole)."""



def transcript(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """The messages (as :func:`ketch.message_to_dict` dicts) of the transcript the entries
    leave, in order."""
    known: dict[str, dict[str, Any]] = {}
    current: list[dict[str, Any]] = []
    for entry in entries:
        kind = entry.type
        payload = entry.payload
        if kind == "message":
            message = payload.get("message")
            if not isinstance(message, dict):
                continue
            known[entry.id] = message
            if not payload.get("detached"):
                current.append(message)
        elif kind in ("compaction", "rewind"):
            ids = payload.get("message_ids")
            if isinstance(ids, list):
                current = [known[i] for i in ids if isinstance(i, str) and i in known]
    return current


def session_title(entries: Sequence[Entry]) -> str:
    """The title the stores list the session under (the latest ``title`` entry's, else
    :func:`message_title` of the first user message with text), or ""."""
    found = ""
    named = False
    for entry in entries:
        if entry.type == "title":
            given = entry.payload.get("title")
            found = given if isinstance(given, str) else ""
            named = True
        elif entry.type == "message" and not found and not named:
            found = message_title(entry.payload.get("message"))
    return found


def _cwd(entries: Sequence[Entry]) -> str | None:
    for entry in entries:
        if entry.type == "session":
            cwd = entry.payload.get("cwd")
            return cwd if isinstance(cwd, str) else None
    return None


def export_json(entries: Sequence[Entry], *, session_id: str | None = None) -> str:
    """The session as a JSON object: ``session_id``, ``title``, ``cwd`` and ``messages``
    (the transcript, each message as :func:`ketch.message_to_dict` gives it)."""
    data = {
        "session_id": session_id,
        "title": session_title(entries),
        "cwd": _cwd(entries),
        "messages": transcript(entries),
    }
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _fence(text: str, info: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{info}\n{body}{fence}"


def _cut(text: str, limit: int = RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit} more characters)"


def _blocks_text(content: Any) -> list[str]:
    """The text and image blocks of a user-side content list, as Markdown paragraphs."""
    if isinstance(content, str):
        return [content] if content else []
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                parts.append(str(block["text"]))
            elif block.get("type") == "image":
                parts.append(f"*[image: {block.get('url') or block.get('mime_type', 'image')}]*")
    return parts


def _assistant(message: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append(str(block["text"]))
        elif kind == "tool_call":
            args = json.dumps(block.get("args") or {}, ensure_ascii=False, indent=2)
            parts.append(f"**Tool call** `{block.get('name', '')}` (`{block.get('id', '')}`):\n\n{_fence(args, 'json')}")
    if message.get("stop_reason") in ("error", "aborted"):
        detail = message.get("error_message") or message["stop_reason"]
        parts.append(f"*{message['stop_reason']}: {detail}*")
    return parts


def _section(message: dict[str, Any]) -> tuple[str, list[str]]:
    """The heading and the paragraphs of one message."""
    role = message.get("role")
    if role == "user":
        return "User", _blocks_text(message.get("content"))
    if role == "assistant":
        return "Assistant", _assistant(message)
    if role == "tool_result":
        text = _cut(content_text(message.get("content"))) or "(no output)"
        heading = f"Tool result `{message.get('tool_name', '')}` (`{message.get('tool_call_id', '')}`)"
        if message.get("is_error"):
            heading += ": error"
        return heading, [_fence(text)]
    if role == "context_summary":
        return "Summary of the earlier conversation", [str(message.get("summary", ""))]
    note = message.get("text")
    body = [note] if isinstance(note, str) and note else _blocks_text(message.get("content"))
    return f"Note ({role})", body


def export_markdown(entries: Sequence[Entry], *, session_id: str | None = None) -> str:
    """The session's transcript as a Markdown document: a title, the session's id and
    working directory, then one section per message."""
    title = session_title(entries) or "(untitled session)"
    lines = [f"# {title}", ""]
    if session_id is not None:
        lines.append(f"- Session: `{session_id}`")
    cwd = _cwd(entries)
    if cwd is not None:
        lines.append(f"- Directory: `{cwd}`")
    messages = transcript(entries)
    lines.append(f"- Messages: {len(messages)}")
    for message in messages:
        heading, parts = _section(message)
        lines += ["", f"## {heading}"]
        for part in parts:
            lines += ["", part]
    return "\n".join(lines) + "\n"
