"""Hook events, hook specs, matchers, and reading the Claude-Code-shaped ``hooks`` settings."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal
from typing import TypeAlias
from typing import get_args

import msgspec

HookEvent: TypeAlias = Literal[
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionStart",
    "SessionEnd",
    "Notification",
]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
"""Every event a hook can be registered for, in the order of the Claude Code reference."""

DEFAULT_TIMEOUT = 60.0
"""Seconds a hook may run before it is stopped (its process group is killed)."""

HookCallback: TypeAlias = Callable[[dict[str, Any]], "Awaitable[Any] | Any"]
"""A Python hook: called with the event's input (the JSON a shell hook reads on stdin, as a
dict); returns None, a dict in the Claude Code output shape, or a :class:`HookResult`."""

# Which input field an event's matcher is matched against; events not listed match always.
MATCH_FIELD: dict[str, str] = {
    "PreToolUse": "tool_name",
    "PostToolUse": "tool_name",
    "PostToolUseFailure": "tool_name",
    "SessionStart": "source",
    "SessionEnd": "reason",
    "PreCompact": "trigger",
    "Notification": "notification_type",
    "SubagentStop": "agent_type",
}

_PLAIN = re.compile(r"[A-Za-z0-9_\-]*")


class HookConfigError(ValueError):
    """A hook entry in settings is invalid; the message names the entry and what is allowed."""


def _compile(matcher: str | None) -> re.Pattern[str] | None:
    """None for match-all (``None``, ``""`` or ``"*"``), else a case-insensitive full-match regex.

    A plain name (letters, digits, ``_``, ``-``) matches exactly (case-insensitively, so
    Claude Code's ``Bash`` matches ketch's ``bash``); anything else is a regex (``Edit|Write``,
    ``mcp__.*``).
    """
    if matcher is None or matcher.strip() in ("", "*"):
        return None
    text = matcher.strip()
    pattern = re.escape(text) if _PLAIN.fullmatch(text) else text
    return re.compile(pattern, re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One hook: the ``event`` it runs on, its ``handler`` (a shell command string or a
    Python callback), an optional ``matcher`` and a ``timeout`` in seconds.

    ``matcher``: ``None``, ``""`` or ``"*"`` match everything; a plain name matches exactly
    (case-insensitively); anything else is a regular expression that must match the whole
    value. What is matched depends on the event: the tool name (PreToolUse, PostToolUse,
    PostToolUseFailure), ``source`` (SessionStart: startup, resume, clear, compact),
    ``reason`` (SessionEnd), ``trigger`` (PreCompact: manual, auto), ``notification_type``
    (Notification), ``agent_type`` (SubagentStop). UserPromptSubmit and Stop hooks always
    run. ``origin`` says where the spec came from (a settings file), for messages. The
    timeout stops a shell hook (its process group is killed) or an async callback (it is
    cancelled); a plain function runs inline and cannot be interrupted, so keep it quick.
    Raises ``ValueError`` for an unknown event, a bad matcher or a non-positive timeout.
    """

    event: HookEvent
    handler: str | HookCallback
    matcher: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    origin: str = "code"
    pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.event not in HOOK_EVENTS:
            raise ValueError(f"unknown hook event {self.event!r}; expected one of {', '.join(HOOK_EVENTS)}")
        if isinstance(self.handler, str):
            if not self.handler.strip():
                raise ValueError("a command hook needs a non-empty command")
        elif not callable(self.handler):
            raise ValueError(f"a hook handler must be a command string or a callable, got {type(self.handler).__name__}")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.matcher is not None and not isinstance(self.matcher, str):
            raise ValueError(f"matcher must be a string, got {self.matcher!r}")
        try:
            pattern = _compile(self.matcher)
        except re.error as exc:
            raise ValueError(f"matcher {self.matcher!r} is not a valid regular expression: {exc}") from None
        object.__setattr__(self, "pattern", pattern)

    @property
    def is_command(self) -> bool:
        """True for a shell command hook."""
        return isinstance(self.handler, str)

    @property
    def label(self) -> str:
        """How messages name this hook: the command, or the callback's name."""
        if isinstance(self.handler, str):
            text = " ".join(self.handler.split())
            return text if len(text) <= 80 else text[:77] + "..."
        return getattr(self.handler, "__qualname__", None) or repr(self.handler)

    def matches(self, data: Mapping[str, Any]) -> bool:
        """Whether this hook runs for an event with input ``data``."""
        if self.pattern is None:
            return True
        name = MATCH_FIELD.get(self.event)
        if name is None:
            return True
        value = data.get(name)
        return isinstance(value, str) and self.pattern.fullmatch(value) is not None


def parse_hooks(hooks: Any, origin: str = "settings") -> list[HookSpec]:
    """Hook specs from a Claude-Code-shaped ``hooks`` object::

        {"PreToolUse": [{"matcher": "bash",
                         "hooks": [{"type": "command", "command": "./check.sh", "timeout": 5}]}]}

    (in TOML: ``[[hooks.PreToolUse]]`` with ``matcher`` and ``[[hooks.PreToolUse.hooks]]``
    entries). Only ``type = "command"`` is supported; other keys of an entry are ignored.
    Raises :class:`HookConfigError` naming the bad entry (``hooks.PreToolUse[0].hooks[1]``).
    """
    if not isinstance(hooks, Mapping):
        raise HookConfigError(f"{origin}: hooks must be a table of events, got {type(hooks).__name__}")
    specs: list[HookSpec] = []
    for event, groups in hooks.items():
        where = f"hooks.{event}"
        if event not in HOOK_EVENTS:
            raise HookConfigError(
                f"{origin}: {where}: unknown hook event {event!r}; expected one of {', '.join(HOOK_EVENTS)}"
            )
        if not isinstance(groups, list):
            raise HookConfigError(f"{origin}: {where} must be a list of matcher entries")
        for i, group in enumerate(groups):
            at = f"{where}[{i}]"
            if not isinstance(group, Mapping):
                raise HookConfigError(f"{origin}: {at} must be a table with 'matcher' and 'hooks'")
            matcher = group.get("matcher")
            if matcher is not None and not isinstance(matcher, str):
                raise HookConfigError(f"{origin}: {at}.matcher must be a string, got {matcher!r}")
            entries = group.get("hooks")
            if not isinstance(entries, list) or not entries:
                raise HookConfigError(f"{origin}: {at}.hooks must be a non-empty list of hooks")
            for j, entry in enumerate(entries):
                specs.append(_entry(event, matcher, entry, f"{origin}: {at}.hooks[{j}]", origin))
    return specs


def _entry(event: HookEvent, matcher: str | None, entry: Any, at: str, origin: str) -> HookSpec:
    if not isinstance(entry, Mapping):
        raise HookConfigError(f"{at} must be a table with type = \"command\" and a command")
    kind = entry.get("type", "command")
    if kind != "command":
        raise HookConfigError(f"{at}: unsupported hook type {kind!r}; ketch runs type = \"command\" hooks")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise HookConfigError(f"{at}: 'command' must be a non-empty string")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise HookConfigError(f"{at}: timeout must be a positive number of seconds, got {timeout!r}")
    try:
        return HookSpec(event, command, matcher, float(timeout), origin)
    except ValueError as exc:
        raise HookConfigError(f"{at}: {exc}") from None


def hooks_from_json(text: str | bytes, origin: str = "settings.json") -> list[HookSpec]:
    """Hook specs from JSON text: a Claude Code settings file (its ``hooks`` key) or a bare
    ``hooks`` object. Raises :class:`HookConfigError` for invalid JSON or entries."""
    try:
        data = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise HookConfigError(f"{origin}: invalid JSON: {exc}") from None
    if isinstance(data, dict) and "hooks" in data and not set(data).intersection(HOOK_EVENTS):
        data = data["hooks"]
    return parse_hooks(data, origin)
