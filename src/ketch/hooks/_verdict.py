"""The seam between hooks and the permission engine.

These two types belong to :mod:`ketch.permissions` (the engine defines them and never
imports hooks). Until that package is merged they are defined here with the same
fields; the merge replaces this module's body with an import from ``ketch.permissions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..loop.config import ToolCallInfo

__all__ = ["HookVerdict", "PreToolUseHook"]


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """What PreToolUse hooks decided about one call.

    ``decision``: ``allow`` (skip ask/mode/allow; deny rules still apply), ``ask`` (force
    the ask path), ``deny`` (deny with ``reason``) or None (no opinion). ``updated_input``
    replaces the arguments and is re-checked against deny rules. ``stop`` (a hook's
    ``"continue": false``) denies the call and stops the run with ``stop_reason``.
    """

    decision: Literal["allow", "deny", "ask"] | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    stop: bool = False
    stop_reason: str | None = None


class PreToolUseHook(Protocol):
    """Anything that can give a :class:`HookVerdict` for a tool call (``HookRunner`` does)."""

    async def pre_tool_use(self, call: ToolCallInfo) -> HookVerdict | None:
        """The hooks' verdict on ``call``, or None when no hook had an opinion."""
        ...
