"""Helpers for the hook tests: hook scripts in tmp_path, a recording tool, event labels."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from ketch import Agent
from ketch.hooks import HookNotice
from ketch.hooks import HookRunner
from ketch.loop import Tool
from support import describe


def write_script(directory: Path, name: str, body: str, *, shell: str = "/bin/sh") -> str:
    """An executable script ``name`` in ``directory``; returns its path (the hook command)."""
    path = directory / name
    path.write_text(f"#!{shell}\n{body.lstrip()}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def py_script(directory: Path, name: str, body: str) -> str:
    """An executable python3 script (the event's input is in ``data``)."""
    header = "import json, sys\ndata = json.load(sys.stdin)\n"
    return write_script(directory, name, header + body.lstrip(), shell="/usr/bin/env python3")


def bash_tool(calls: list[dict[str, Any]], *, fail: str | None = None, raises: str | None = None) -> Tool:
    """A ``bash`` tool that records its arguments and answers ``ran: <command>``."""

    async def run(args: dict[str, Any], ctx: Any) -> Any:
        calls.append(dict(args))
        if raises is not None:
            raise RuntimeError(raises)
        if fail is not None:
            from ketch.loop import ToolResult

            return ToolResult.error(fail)
        return f"ran: {args['command']}"

    schema = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
        "additionalProperties": False,
    }
    return Tool("bash", "Run a command.", schema, run)


def runner(tmp_path: Path, notices: list[HookNotice] | None = None, **kw: Any) -> HookRunner:
    """A runner in ``tmp_path`` with a fixed session id, recording its notices."""
    sink = notices if notices is not None else []
    kw.setdefault("session_id", "s-1")
    kw.setdefault("environment", {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    return HookRunner(cwd=tmp_path, on_notice=sink.append, **kw)


def recorded(agent: Agent) -> list[str]:
    """Subscribe to ``agent``; the returned list fills with event labels (no message updates)."""
    labels: list[str] = []
    agent.subscribe(lambda ev: labels.append(describe(ev)) if ev.type != "message_update" else None)
    return labels


def read_json(path: Path) -> Any:
    """The JSON a hook script wrote."""
    return json.loads(path.read_text())


def read_lines(path: str | Path) -> list[Any]:
    """The JSON lines a hook script appended."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def tool_turn(call_id: str) -> list[str]:
    """The labels of one assistant turn with one tool call ``call_id``, after turn_start."""
    return [
        "message_start:assistant",
        "message_end:assistant",
        f"tool_execution_start:{call_id}",
        f"tool_execution_end:{call_id}",
        "message_start:tool_result",
        "message_end:tool_result",
        "turn_end",
    ]


START = ["agent_start", "turn_start", "message_start:user", "message_end:user"]
TEXT_END = ["message_start:assistant", "message_end:assistant", "turn_end", "agent_end"]
