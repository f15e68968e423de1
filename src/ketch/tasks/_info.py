"""What a background task is, as its registry and its tools show it."""

from __future__ import annotations

from typing import Literal
from typing import TypeAlias

import msgspec

TaskStatus: TypeAlias = Literal["running", "completed", "failed", "stopped"]


class TaskInfo(msgspec.Struct, kw_only=True):
    """A background task as :meth:`TaskRegistry.list` shows it.

    ``status`` is ``running``, ``completed`` (its work returned; a shell command's exit
    code is in ``exit_code``), ``failed`` (it raised; ``error`` says what) or
    ``stopped`` (:meth:`TaskRegistry.stop`). ``output_chars`` counts every character of
    output so far, ``dropped_chars`` those no longer kept. ``result`` is the task's
    final text (a subagent's answer; a shell command's summary line).
    """

    id: str
    kind: str
    description: str
    status: TaskStatus = "running"
    started: float = 0.0
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    result: str | None = None
    output_chars: int = 0
    dropped_chars: int = 0
    pgid: int | None = None


def task_facts(info: TaskInfo, description: str, exit_code: str, error: str) -> list[str]:
    """The facts shown about a task after its id, kind and status, each written by its
    format (``{}`` is the value), in this order: the description (when there is one),
    the exit code (when known), the error (when there is one)."""
    facts: list[str] = []
    if info.description:
        facts.append(description.format(info.description))
    if info.exit_code is not None:
        facts.append(exit_code.format(info.exit_code))
    if info.error:
        facts.append(error.format(info.error))
    return facts


class TaskOutput(msgspec.Struct, kw_only=True):
    """New output of a task since an offset (:meth:`TaskRegistry.output`).

    ``text`` is the output from ``since`` (or from the oldest kept character, when
    output before it was dropped: ``dropped`` says how many characters were skipped);
    ``next_offset`` is the offset to ask from next time; ``status`` the task's status.
    """

    id: str
    text: str
    next_offset: int
    dropped: int
    status: TaskStatus


class TaskNotFoundError(LookupError):
    """No task has this id."""


class TaskFailed(Exception):
    """Raised by a task's work to fail it with exactly this message as its ``error``
    (any other exception is recorded as ``"<type>: <message>"``)."""
