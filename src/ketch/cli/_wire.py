"""The ``stream-json`` and ``json`` output formats of ``ketch run``.

``stream-json`` writes one JSON object per line: an ``init`` line, then every agent event
(``{"type": <event type>, ...}``, the fields of :mod:`ketch.loop._events`), then a
``result`` line. To keep the stream linear in the size of the answer, these events are
slimmed:

- ``message_update`` carries ``event``, the underlying stream event without the partial
  message (``text_delta``: ``index``, ``delta``; ``toolcall_start``: ``index``, ``id``,
  ``name``; ``toolcall_delta``: ``index`` and ``delta``, a fragment of the call's JSON
  arguments; ``toolcall_end``: ``index``, ``id``, ``name``; ``hosted_tool``: ``index``
  and ``block``, a provider-hosted tool's call or result without its ``native`` block; …). The ``toolcall_delta``
  fragments of a call, concatenated, are its arguments' JSON text; consecutive fragments
  of one call are joined into one line (:class:`~ketch.llm.ToolCallDeltaJoiner`, up to
  1024 characters a line);
- ``tool_execution_start``, ``tool_execution_update`` and ``approval_required`` carry the
  ``tool_call_id`` and ``tool_name``, not the arguments again (they are the call's in the
  assistant message's ``message_end`` line);
- ``turn_end`` carries ``turn`` and the ids of its tool results, not the messages again;
- ``agent_end`` carries the ``summary`` only.

So a call's arguments are written twice: streamed as fragments, then parsed in its
message. Every message appears in full in its ``message_end`` line (user and tool-result
messages also in ``message_start``). ``json`` writes only the ``result`` object. A lone
surrogate in a string (JSON cannot carry one) is written as U+FFFD.

When the reader of stdout goes away (``ketch run … | head``), :class:`BrokenPipeGuard`
aborts the run and the command exits with :data:`EXIT_BROKEN_PIPE`, without a traceback.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any
from typing import BinaryIO

import msgspec
from msgspec import UNSET
from msgspec import UnsetType

from ..llm import AssistantMessage
from ..llm import Usage
from ..loop import AgentEvent
from ..loop import RunSummary
from ..permissions import PermissionDecision
from ._args import EXIT_BROKEN_PIPE as EXIT_BROKEN_PIPE
from ._args import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ._args import EXIT_USAGE as EXIT_USAGE
from ._args import OUTPUT_FORMATS as OUTPUT_FORMATS
from ._args import OutputFormat as OutputFormat
from ._args import silence_stdout as silence_stdout
from ._stdio import encode_line as encode_line


class _Sink(io.RawIOBase):
    def __init__(self, guard: BrokenPipeGuard) -> None:
        self._guard = guard

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self._guard._write(data)
        return size


class BrokenPipeGuard:
    """Stdout for a run whose reader may go away: write to :attr:`stream`. On the first
    ``BrokenPipeError`` stdout is silenced (:func:`silence_stdout`), :attr:`broken`
    becomes true and ``on_broken`` (abort the run) is called; later writes are dropped
    and call it again (so a break before the run started aborts the run too)."""

    __slots__ = ("_on_broken", "_out", "broken", "stream")

    def __init__(self, out: BinaryIO, on_broken: Callable[[], object]) -> None:
        self._out = out
        self._on_broken = on_broken
        self.broken = False
        self.stream: BinaryIO = io.BufferedWriter(_Sink(self))

    def _write(self, data: Any) -> None:
        if self.broken:
            self._on_broken()
            return
        view = memoryview(data).cast("B")
        try:
            # A pipe whose reader leaves during a long write takes part of it and returns
            # the count; writing the rest raises BrokenPipeError.
            while view:
                written = self._out.write(view)
                view = view[written if written is not None else len(view) :]
            self._out.flush()
        except BrokenPipeError:
            self.broken = True
            silence_stdout()
            self._on_broken()

EXIT_CODES: dict[str, int] = {
    "stop": 0,
    "stop_sequence": 0,
    "denied": 1,
    "error": 1,
    "stop_guard": 1,
    "guardrail": 1,
    "max_turns": 3,
    "max_budget": 4,
    "usage_limit": 4,
    "approval_required": 5,
    "aborted": EXIT_INTERRUPTED,
}
"""Exit code per end reason. Usage and configuration errors exit with 2."""


def exit_code_for(end_reason: str) -> int:
    """The process exit code for a run's end reason."""
    return EXIT_CODES.get(end_reason, 1)


class Init(msgspec.Struct, kw_only=True, tag="init", tag_field="type"):
    """The first ``stream-json`` line: what the run works with."""

    model: str
    provider: str
    cwd: str
    tools: list[str]
    permission_mode: str
    thinking: str
    version: str
    session_id: str | None = None


class Denied(msgspec.Struct, kw_only=True):
    """A tool call the permission gate denied."""

    tool_call_id: str
    tool_name: str
    reason: str


class Pending(msgspec.Struct, kw_only=True):
    """A tool call a paused run waits on (end reason ``approval_required``)."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    reason: str


class Result(msgspec.Struct, kw_only=True, tag="result", tag_field="type"):
    """The final object: the ``json`` output and the last ``stream-json`` line.

    ``text`` is the final assistant text; ``duration`` is in seconds; ``cost`` in US
    dollars; ``session_id`` the session the run is saved in (None with ``--no-session``);
    ``pending_approvals`` the calls a run paused for approval waits on; ``truncated`` is
    true when the final answer was cut off at the output token limit (the last model call
    ended with stop reason ``length``).
    """

    end_reason: str
    is_error: bool
    exit_code: int
    text: str
    error: str | None
    turns: int
    tool_calls: int
    tool_errors: int
    usage: Usage
    cost: float
    duration: float
    model: str
    permission_denials: list[Denied]
    permission_decisions: list[PermissionDecision] = msgspec.field(default_factory=list)
    session_id: str | None = None
    pending_approvals: list[Pending] = msgspec.field(default_factory=list)
    truncated: bool = False


def make_result(
    summary: RunSummary,
    final: AssistantMessage | None,
    model: str,
    denials: list[Denied],
    decisions: list[PermissionDecision] | None = None,
    session_id: str | None = None,
    pending: list[Pending] | None = None,
) -> Result:
    """The result object for a finished run."""
    code = exit_code_for(summary.end_reason)
    return Result(
        end_reason=summary.end_reason,
        is_error=code != 0,
        exit_code=code,
        text=final.text if final is not None else "",
        error=summary.error,
        turns=summary.turns,
        tool_calls=summary.tool_calls,
        tool_errors=summary.tool_errors,
        usage=summary.usage,
        cost=summary.usage.cost.total,
        duration=round(summary.duration, 6),
        model=model,
        permission_denials=denials,
        permission_decisions=list(decisions or ()),
        session_id=session_id,
        pending_approvals=list(pending or ()),
        truncated=final is not None and final.stop_reason == "length",
    )


class _Slim(msgspec.Struct, kw_only=True):
    """A block event without its partial message: its ``type``, the fields its kind keeps
    (the unset ones are not written) and its ``index``."""

    type: str
    id: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    delta: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    block: Any = UNSET
    index: int


# The fields a block event keeps besides ``index``; the tool-call events take the call's
# id and name from the partial message or the call.
_SLIM_FIELDS: dict[str, tuple[str, ...]] = {
    "text_start": (),
    "thinking_start": (),
    "text_delta": ("delta",),
    "thinking_delta": ("delta",),
    "toolcall_delta": ("delta",),
    "text_end": ("content",),
    "thinking_end": ("content",),
}


class _ToolStart(msgspec.Struct, kw_only=True, tag="tool_execution_start", tag_field="type"):
    tool_call_id: str
    tool_name: str


class _ToolUpdate(msgspec.Struct, kw_only=True, tag="tool_execution_update", tag_field="type"):
    tool_call_id: str
    tool_name: str
    partial: Any


class _Approval(msgspec.Struct, kw_only=True, tag="approval_required", tag_field="type"):
    tool_call_id: str
    tool_name: str
    reason: str | None


class _Update(msgspec.Struct, kw_only=True, tag="message_update", tag_field="type"):
    event: Any


class _TurnEnd(msgspec.Struct, kw_only=True, tag="turn_end", tag_field="type"):
    turn: int
    stop_reason: str
    tool_result_ids: list[str]


class _AgentEnd(msgspec.Struct, kw_only=True, tag="agent_end", tag_field="type"):
    summary: RunSummary


def _slim(event: Any) -> Any:
    """The stream event of a ``message_update`` without its partial message."""
    if event.type == "toolcall_delta":
        return _Slim(type=event.type, index=event.index, delta=event.delta)
    if event.type == "toolcall_start":
        block = event.partial.content[event.index]
        return _Slim(type=event.type, index=event.index, id=block.id, name=block.name)
    if event.type == "toolcall_end":
        call = event.tool_call
        return _Slim(type=event.type, index=event.index, id=call.id, name=call.name)
    if event.type == "hosted_tool":  # the block without the provider's own (it is in the message)
        return _Slim(type=event.type, index=event.index, block=msgspec.structs.replace(event.block, native=None))
    fields = _SLIM_FIELDS.get(event.type)
    if fields is None:
        return {"type": event.type}
    return _Slim(type=event.type, index=event.index, **{name: getattr(event, name) for name in fields})




def encode_event(event: AgentEvent) -> Any:
    """The object written for ``event`` (slimmed as described in the module docstring)."""
    if event.type == "message_update":
        return _Update(event=_slim(event.event))
    if event.type == "turn_end":
        return _TurnEnd(
            turn=event.turn,
            stop_reason=event.message.stop_reason,
            tool_result_ids=[m.tool_call_id for m in event.tool_results],
        )
    if event.type == "agent_end":
        return _AgentEnd(summary=event.summary)
    if event.type == "tool_execution_start":
        return _ToolStart(tool_call_id=event.tool_call_id, tool_name=event.tool_name)
    if event.type == "tool_execution_update":
        if getattr(event.partial, "type", None) == "subagent_event":
            from ._subagents import encode_nested

            return encode_nested(event, encode_event)
        return _ToolUpdate(tool_call_id=event.tool_call_id, tool_name=event.tool_name, partial=event.partial)
    if event.type == "approval_required":
        return _Approval(tool_call_id=event.tool_call_id, tool_name=event.tool_name, reason=event.reason)
    return event



