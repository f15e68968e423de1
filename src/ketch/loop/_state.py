"""A run paused for approval: :class:`RunState`, and the decisions that resume it.

When a turn has tool calls that need approval (a tool's ``requires_approval``, or a
``before_tool_call`` hook answering :meth:`BeforeToolCallResult.approval_required`), the
loop stops starting calls, lets the running ones finish, and ends the run with
``end_reason == "approval_required"``. :attr:`RunResult.state` then holds everything
needed to continue it later, in this process or another one: the transcript, the calls
still to run, the results of the calls that did run (not yet committed), the run's
usage so far, and a fingerprint of the configuration.

``RunState.to_json()`` writes a versioned JSON object; :meth:`RunState.from_json`
reads every version written so far.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any
from typing import ClassVar
from typing import Literal
from typing import TypeAlias

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import ToolResultMessage
from ..llm._messages import Usage
from ..llm._messages import message_from_dict
from ..llm._messages import message_to_dict
from ..llm._model import Model
from ._tool import Tool

RUN_STATE_VERSION = 1
"""The version :meth:`RunState.to_json` writes."""

DENIED_TEXT = "Permission denied by the user."


class Approve(msgspec.Struct, frozen=True, tag="approve", tag_field="type"):
    """Run the call as the model asked."""

    type: ClassVar[Literal["approve"]] = "approve"


class Deny(msgspec.Struct, frozen=True, tag="deny", tag_field="type"):
    """Do not run the call; the model gets an error result with ``reason``. ``stop``
    also ends the run after the batch (``end_reason == "denied"``)."""

    type: ClassVar[Literal["deny"]] = "deny"
    reason: str | None = None
    stop: bool = False


class Edit(msgspec.Struct, frozen=True, tag="edit", tag_field="type"):
    """Run the call with ``args`` instead of the model's arguments (validated again)."""

    type: ClassVar[Literal["edit"]] = "edit"
    args: dict[str, Any]


Decision: TypeAlias = Approve | Deny | Edit
"""A decision on one paused call: :func:`approve`, :func:`deny` or :func:`edit`."""


def approve() -> Approve:
    """Approve a paused call."""
    return Approve()


def deny(reason: str | None = None, *, stop: bool = False) -> Deny:
    """Deny a paused call; ``reason`` is what the model is told. ``stop`` also ends the
    run after this batch, with ``end_reason == "denied"``."""
    return Deny(reason=reason, stop=stop)


def edit(args: dict[str, Any]) -> Edit:
    """Approve a paused call with new arguments."""
    return Edit(args=dict(args))


def denied_text(reason: str | None = None) -> str:
    """The error result text of a call the user denied, live (the permission engine's
    approver) or while the run was paused (:func:`deny`): one text either way."""
    return f"{DENIED_TEXT} Reason: {reason}" if reason else DENIED_TEXT


class PendingCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call of the paused turn that has not run.

    ``needs_decision`` is True for the calls that asked for approval (``reason`` says
    why, when known); the others were simply not started yet, because calls start in
    order, and run on resume without a decision.
    """

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    needs_decision: bool
    reason: str | None = None


class RunState(msgspec.Struct, kw_only=True):
    """A run paused with ``end_reason == "approval_required"``.

    - ``messages``: the transcript at the pause; it ends with the assistant message whose
      calls wait (any results of that message are in ``completed``, not here);
    - ``pending``: that message's calls still to run, in call order;
    - ``completed``: results of its calls that already ran, in call order;
    - ``run_messages``: how many of the last ``messages`` the paused run committed;
    - ``turn``, ``turns`` and ``usage``: the turn number and the run's model calls and
      usage so far;
    - ``steering`` and ``follow_ups``: queued messages (the :class:`~ketch.Agent` fills
      them; they are queued again on resume);
    - ``fingerprint``: model, system prompt and tools the run had (see
      :func:`config_fingerprint`); resuming with a different configuration is refused.
    """

    messages: list[Message]
    pending: list[PendingCall]
    completed: list[ToolResultMessage] = msgspec.field(default_factory=list)
    run_messages: int = 0
    turn: int = 1
    turns: int = 0
    usage: Usage = msgspec.field(default_factory=Usage)
    steering: list[Message] = msgspec.field(default_factory=list)
    follow_ups: list[Message] = msgspec.field(default_factory=list)
    fingerprint: str = ""
    version: int = RUN_STATE_VERSION

    @property
    def message(self) -> AssistantMessage:
        """The assistant message whose calls wait."""
        last = self.messages[-1] if self.messages else None
        if not isinstance(last, AssistantMessage):
            raise ValueError("RunState.messages must end with the assistant message whose calls wait")
        return last

    @property
    def awaiting(self) -> list[PendingCall]:
        """The pending calls that need a decision."""
        return [p for p in self.pending if p.needs_decision]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible dict, tagged with ``version``."""
        return {
            "version": RUN_STATE_VERSION,
            "messages": [message_to_dict(m) for m in self.messages],
            "pending": msgspec.to_builtins(self.pending),
            "completed": [message_to_dict(m) for m in self.completed],
            "run_messages": self.run_messages,
            "turn": self.turn,
            "turns": self.turns,
            "usage": msgspec.to_builtins(self.usage),
            "steering": [message_to_dict(m) for m in self.steering],
            "follow_ups": [message_to_dict(m) for m in self.follow_ups],
            "fingerprint": self.fingerprint,
        }

    def to_json(self) -> str:
        """The state as a versioned JSON object."""
        return msgspec.json.encode(self.to_dict()).decode()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """Read a state written by :meth:`to_dict` (any version so far)."""
        if not isinstance(data, dict):
            raise ValueError(f"RunState must be a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version != 1:
            raise ValueError(f"Unknown RunState version {version!r}; this ketch reads version 1")
        completed = [message_from_dict(m) for m in data.get("completed", [])]
        return cls(
            messages=[message_from_dict(m) for m in data["messages"]],
            pending=msgspec.convert(data["pending"], list[PendingCall]),
            completed=[m for m in completed if isinstance(m, ToolResultMessage)],
            run_messages=int(data.get("run_messages", 0)),
            turn=int(data.get("turn", 1)),
            turns=int(data.get("turns", 0)),
            usage=msgspec.convert(data.get("usage", {}), Usage),
            steering=[message_from_dict(m) for m in data.get("steering", [])],
            follow_ups=[message_from_dict(m) for m in data.get("follow_ups", [])],
            fingerprint=str(data.get("fingerprint", "")),
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> RunState:
        """Read a state written by :meth:`to_json` (any version so far)."""
        try:
            raw = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise ValueError(f"RunState is not valid JSON: {exc}") from None
        return cls.from_dict(raw)

    def __repr__(self) -> str:
        ids = [p.tool_call_id for p in self.pending]
        return f"RunState(messages={len(self.messages)}, pending={ids!r}, turn={self.turn})"


def config_fingerprint(model: Model, system_prompt: str, tools: Sequence[Tool]) -> str:
    """A short hash of what a paused run depends on: the model's provider and id, the
    system prompt, and each tool's name and parameter schema."""
    doc = {
        "model": f"{model.provider}:{model.id}",
        "system_prompt": str(system_prompt),
        "tools": [[t.name, t.parameters] for t in tools],
    }
    return hashlib.sha256(msgspec.json.encode(doc, order="sorted")).hexdigest()[:16]
