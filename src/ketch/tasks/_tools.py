"""The model's tools on a :class:`TaskRegistry`: task_list, task_output, task_wait, task_stop."""

from __future__ import annotations

import time
from typing import Any
from typing import Protocol

from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult
from ._info import TaskInfo
from ._info import TaskNotFoundError
from ._info import TaskOutput
from ._info import task_facts


class Tasks(Protocol):
    """What the task tools use of a :class:`~ketch.tasks.TaskRegistry`."""

    def list(self) -> list[TaskInfo]: ...
    def output(self, task_id: str, since: int = 0) -> TaskOutput: ...
    async def wait(self, task_id: str, timeout: float | None = None) -> TaskInfo: ...  # noqa: ASYNC109
    async def stop(self, task_id: str) -> TaskInfo: ...

MAX_WAIT = 600.0
"""The longest ``task_wait`` may wait, in seconds."""

_ID = {"type": "string", "description": "The task id (from task_list or the tool that started it)."}


def describe(info: TaskInfo) -> str:
    """One line about a task: id, status, kind, description, age or exit."""
    parts = [f"{info.id} [{info.status}] {info.kind}"]
    parts += task_facts(info, ": {}", " (exit code {})", " (error: {})")
    end = info.ended if info.ended is not None else time.time()
    parts.append(f" — {max(0.0, end - info.started):.0f}s, {info.output_chars} chars of output")
    return "".join(parts)


def _task_id(args: dict[str, Any]) -> str | ToolResult:
    task_id = args.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        return ToolResult.error(f"task_id must be a task id string, got {task_id!r}.")
    return task_id


def task_tools(registry: Tasks) -> list[Tool]:
    """``task_list``, ``task_output``, ``task_wait`` and ``task_stop`` on ``registry``."""

    async def task_list(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        tasks = registry.list()
        if not tasks:
            return ToolResult(content="No background tasks.")
        return ToolResult(content="\n".join(describe(t) for t in tasks))

    async def task_output(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        task_id = _task_id(args)
        if isinstance(task_id, ToolResult):
            return task_id
        since = args.get("since", 0)
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            return ToolResult.error(f"since must be an offset >= 0 (from next_offset), got {since!r}.")
        try:
            out = registry.output(task_id, since)
        except TaskNotFoundError as exc:
            return ToolResult.error(str(exc.args[0]))
        lines = []
        if out.dropped:
            lines.append(f"[{out.dropped} earlier characters were dropped; showing what is kept]")
        lines.append(out.text if out.text else "(no new output)")
        lines.append(f"[status: {out.status}; next_offset: {out.next_offset}]")
        return ToolResult(
            content="\n".join(lines), details={"next_offset": out.next_offset, "status": out.status}
        )

    async def task_wait(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        task_id = _task_id(args)
        if isinstance(task_id, ToolResult):
            return task_id
        timeout = args.get("timeout", 30)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            return ToolResult.error(f"timeout must be a number of seconds >= 0, got {timeout!r}.")
        try:
            async with ctx.signal.scope():
                info = await registry.wait(task_id, min(float(timeout), MAX_WAIT))
        except TaskNotFoundError as exc:
            return ToolResult.error(str(exc.args[0]))
        text = describe(info)
        if info.status == "running":
            text += "\n[still running; wait again or read its output with task_output]"
        elif info.result:
            text += "\n\n" + info.result
        return ToolResult(content=text, details={"status": info.status})

    async def task_stop(args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        task_id = _task_id(args)
        if isinstance(task_id, ToolResult):
            return task_id
        try:
            info = await registry.stop(task_id)
        except TaskNotFoundError as exc:
            return ToolResult.error(str(exc.args[0]))
        return ToolResult(content=describe(info), details={"status": info.status})

    one = {
        "type": "object",
        "properties": {"task_id": _ID},
        "required": ["task_id"],
        "additionalProperties": False,
    }
    return [
        Tool(
            "task_list",
            "List the background tasks (shell commands, subagents) with their status.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            task_list,
            read_only=True,
            reports_progress=False,
        ),
        Tool(
            "task_output",
            "Read a background task's output. Pass `since` (the next_offset of the previous "
            "read) to get only what is new.",
            {
                "type": "object",
                "properties": {
                    "task_id": _ID,
                    "since": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Offset to read from (default 0).",
                    },
                },
                "required": ["task_id"],
                "additionalProperties": False,
            },
            task_output,
            read_only=True,
            reports_progress=False,
        ),
        Tool(
            "task_wait",
            f"Wait for a background task to finish (at most `timeout` seconds, default 30, max {MAX_WAIT:g}) "
            "and return its status and result.",
            {
                "type": "object",
                "properties": {
                    "task_id": _ID,
                    "timeout": {"type": "number", "minimum": 0, "maximum": MAX_WAIT},
                },
                "required": ["task_id"],
                "additionalProperties": False,
            },
            task_wait,
            read_only=True,
            interrupt="cancel",
        ),
        Tool("task_stop", "Stop a background task (kills a shell command's processes).", one, task_stop),
    ]
