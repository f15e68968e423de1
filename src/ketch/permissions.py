"""Permission modes, rules and approval prompts, as a ``before_tool_call`` gate.

A tool call *changes things* when its tool says so through ``Tool.is_sequential(args)``:
the built-in ``write`` and ``edit`` tools always do, ``bash`` does unless its command is
classified read-only. Read-only calls always pass. For the others the mode decides::

    default       ask the approver (deny when there is none)
    accept-edits  edit tools (``write``, ``edit``) pass; anything else asks
    bypass        everything passes
    plan          denied: read-only tools only

Rules are strings such as ``"edit"`` (every call of a tool) or ``"bash(git status*)"``
(calls whose subject matches a glob; the subject is ``command`` for bash, else ``path``
or ``pattern``). Deny rules win over everything, even ``bypass``; allow rules (from
configuration, or remembered when the user answers "always") let a call through
without asking, except in ``plan`` mode. An allow rule matches a compound bash command
only when every part (split at ``;``, ``&&``, ``||``, ``|``, ``&`` and newlines) matches,
and never a command with substitutions or redirections; a deny rule matches when any
part does. Path patterns are matched against the path as given, normalised, and relative
to the gate's ``root``.

Use it with any agent::

    gate = PermissionGate("default", approver=ask_user, allow=["bash(git status*)"])
    agent = Agent(model, tools=tools, before_tool_call=gate.before_tool_call)

A denial becomes the tool's error result, so the model reads why.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .loop.config import BeforeToolCallResult, ToolCallInfo
from .loop.tool import Tool

__all__ = [
    "CHECK_FAILED",
    "NO_APPROVER",
    "PERMISSION_MODES",
    "PLAN_DENIED",
    "RULE_DENIED",
    "USER_DENIED",
    "Approval",
    "Approver",
    "Denial",
    "PermissionGate",
    "PermissionMode",
    "PermissionRequest",
    "Rule",
    "rule_subject",
]

PermissionMode: TypeAlias = Literal["default", "accept-edits", "bypass", "plan"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("default", "accept-edits", "bypass", "plan")

_RULE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)
_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\||&|\n)\s*")
_SPLIT_ALL = re.compile(r"\s*(?:&&|\|\||;|\||&|\n|\$\(|`|\(|\)|[<>])\s*")
_UNSAFE = re.compile(r"\$\(|`|[<>]")


def rule_subject(tool_name: str, args: dict[str, Any]) -> str | None:
    """The argument a rule pattern is matched against: ``command`` for bash, else
    ``path`` or ``pattern``; None when the call has none of them."""
    keys = ("command",) if tool_name == "bash" else ("path", "pattern", "command")
    for key in keys:
        value = args.get(key)
        if isinstance(value, str):
            return value
    return None


@dataclass(frozen=True, slots=True)
class Rule:
    """A permission rule: a tool name and an optional glob over the call's subject.

    An ``exact`` rule (what an "always" answer remembers for bash) matches only its
    pattern as written, character for character.
    """

    tool: str
    pattern: str | None = None
    exact: bool = False

    @classmethod
    def parse(cls, text: str) -> Rule:
        """Parse ``"name"`` or ``"name(glob)"``; raises ``ValueError`` for anything else."""
        m = _RULE.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"Invalid permission rule {text!r}: expected 'tool' or 'tool(pattern)'")
        pattern = m.group(2)
        if pattern is not None:
            pattern = pattern.strip()
        return cls(m.group(1).lower(), pattern or None)

    def matches(self, tool_name: str, args: dict[str, Any], *, root: str | None = None, deny: bool = False) -> bool:
        """Whether this rule covers a call of ``tool_name`` with ``args``.

        Paths are also tried normalised and, when ``root`` is given, relative to it. As
        a ``deny`` rule, a bash pattern matches when any part of the command matches.
        """
        if tool_name.lower() != self.tool:
            return False
        if self.pattern is None:
            return True
        subject = rule_subject(tool_name, args)
        if subject is None:
            return False
        if self.exact:
            return subject == self.pattern
        pattern = self.pattern
        if tool_name == "bash":
            command = subject.strip()
            if deny:
                parts = [p for p in _SPLIT_ALL.split(command) if p]
                return fnmatch.fnmatchcase(command, pattern) or any(fnmatch.fnmatchcase(p, pattern) for p in parts)
            if _UNSAFE.search(command):
                return False
            parts = [p for p in _SPLIT.split(command) if p]
            return bool(parts) and all(fnmatch.fnmatchcase(p, pattern) for p in parts)
        return any(fnmatch.fnmatchcase(c, pattern) for c in _path_forms(subject, root))

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"


def _path_forms(subject: str, root: str | None) -> set[str]:
    forms = {subject, os.path.normpath(subject)}
    if root is not None:
        absolute = os.path.normpath(os.path.join(root, os.path.expanduser(subject)))
        forms.add(absolute)
        if absolute == root or absolute.startswith(root.rstrip(os.sep) + os.sep):
            forms.add(os.path.relpath(absolute, root))
    return forms


def _rules(items: Iterable[str | Rule]) -> list[Rule]:
    return [r if isinstance(r, Rule) else Rule.parse(r) for r in items]


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A call waiting for the user's answer.

    ``kind`` is ``edit`` for edit tools and ``execute`` otherwise; ``subject`` is the
    command or path the call acts on; ``suggested_rule`` is what "always" remembers
    (the exact bash command, or the whole tool for other tools).
    """

    tool_name: str
    args: dict[str, Any]
    kind: Literal["edit", "execute"]
    subject: str | None
    suggested_rule: Rule
    mode: PermissionMode


@dataclass(frozen=True, slots=True)
class Approval:
    """The answer to a :class:`PermissionRequest`: allow once, always (this session), or deny."""

    decision: Literal["allow", "always", "deny"]
    reason: str | None = None

    @classmethod
    def once(cls) -> Approval:
        """Allow this call only."""
        return cls("allow")

    @classmethod
    def always(cls) -> Approval:
        """Allow this call and remember the request's suggested rule for the session."""
        return cls("always")

    @classmethod
    def deny(cls, reason: str | None = None) -> Approval:
        """Deny the call; ``reason`` is passed on to the model."""
        return cls("deny", reason or None)


Approver: TypeAlias = Callable[[PermissionRequest], Awaitable[Approval]]


@dataclass(frozen=True, slots=True)
class Denial:
    """A denied call, as recorded in :attr:`PermissionGate.denials`."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    reason: str


USER_DENIED = "Permission denied by the user."
NO_APPROVER = (
    "Permission denied: {tool} changes things and needs approval, but nobody can approve it in "
    "this run (permission mode {mode}). Do not retry it; use read-only tools or explain what you "
    "would do instead."
)
PLAN_DENIED = (
    "Permission denied: plan mode allows read-only tools only, and this {tool} call would change "
    "things. Describe the change instead of making it."
)
RULE_DENIED = "Permission denied: the call matches the deny rule {rule}."
CHECK_FAILED = "Permission check failed: {error}"

Verdict: TypeAlias = Literal["allow", "ask", "deny"]


def _check_mode(mode: str) -> PermissionMode:
    for known in PERMISSION_MODES:
        if mode == known:
            return known
    raise ValueError(f"Unknown permission mode {mode!r}; expected one of {', '.join(PERMISSION_MODES)}")


class PermissionGate:
    """Decides, per tool call, whether it runs; asks ``approver`` when the mode says ask.

    Pass :meth:`before_tool_call` as the loop hook. ``allow`` / ``deny`` are rules (strings
    or :class:`Rule`); ``edit_tools`` names the tools ``accept-edits`` lets through;
    ``no_approver_message`` is the denial text when a call needs approval and there is
    no approver (``{tool}`` and ``{mode}`` are filled in); ``root`` is the directory
    relative paths in rules refer to. Prompts are asked one at a
    time; an "always" answer also covers calls already waiting. ``session_rules`` holds
    the rules remembered from "always" answers, ``denials`` every denied call.
    """

    __slots__ = (
        "_lock",
        "allow",
        "approver",
        "denials",
        "deny",
        "edit_tools",
        "mode",
        "no_approver_message",
        "root",
        "session_rules",
    )

    def __init__(
        self,
        mode: PermissionMode | str = "default",
        approver: Approver | None = None,
        *,
        allow: Iterable[str | Rule] = (),
        deny: Iterable[str | Rule] = (),
        edit_tools: Iterable[str] = ("write", "edit"),
        no_approver_message: str = NO_APPROVER,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.mode: PermissionMode = _check_mode(mode)
        self.root = os.path.realpath(os.fspath(root)) if root is not None else None
        self.approver = approver
        self.allow = _rules(allow)
        self.deny = _rules(deny)
        self.edit_tools = frozenset(edit_tools)
        self.no_approver_message = no_approver_message
        self.session_rules: list[Rule] = []
        self.denials: list[Denial] = []
        self._lock: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"PermissionGate(mode={self.mode!r}, allow={[str(r) for r in self.allow]}, deny={[str(r) for r in self.deny]})"

    def set_mode(self, mode: PermissionMode | str) -> None:
        """Switch the mode (``ValueError`` for an unknown one)."""
        self.mode = _check_mode(mode)

    def changes_things(self, tool: Tool, args: dict[str, Any]) -> bool:
        """Whether a call may change things (the tool's ``sequential`` declaration)."""
        try:
            return tool.is_sequential(args)
        except Exception:
            return True

    def check(self, tool: Tool, args: dict[str, Any]) -> tuple[Verdict, str | None]:
        """The policy verdict for a call without asking anyone: allow, ask, or deny (with reason)."""
        name = tool.name
        root = self.root
        for rule in self.deny:
            if rule.matches(name, args, root=root, deny=True):
                return "deny", RULE_DENIED.format(rule=rule)
        if not self.changes_things(tool, args):
            return "allow", None
        mode = self.mode
        if mode == "plan":
            return "deny", PLAN_DENIED.format(tool=name)
        if mode == "bypass":
            return "allow", None
        for rules in (self.allow, self.session_rules):
            if any(r.matches(name, args, root=root) for r in rules):
                return "allow", None
        if mode == "accept-edits" and name in self.edit_tools:
            return "allow", None
        return "ask", None

    def request_for(self, tool: Tool, args: dict[str, Any]) -> PermissionRequest:
        """The :class:`PermissionRequest` an approver gets for this call."""
        name = tool.name
        subject = rule_subject(name, args)
        suggested = Rule(name.lower(), subject, exact=True) if name == "bash" and subject else Rule(name.lower())
        kind: Literal["edit", "execute"] = "edit" if name in self.edit_tools else "execute"
        return PermissionRequest(name, dict(args), kind, subject, suggested, self.mode)

    async def before_tool_call(self, call: ToolCallInfo) -> BeforeToolCallResult | None:
        """The ``before_tool_call`` hook: ``None`` to run the call, or a block with the reason."""
        verdict, reason = self.check(call.tool, call.args)
        if verdict == "ask":
            if self.approver is None:
                reason = self.no_approver_message.format(tool=call.tool.name, mode=self.mode)
            else:
                if self._lock is None:
                    self._lock = asyncio.Lock()
                async with self._lock:
                    verdict, reason = self.check(call.tool, call.args)
                    if verdict == "ask":
                        verdict, reason = await self._ask(call)
            if verdict == "allow":
                return None
        elif verdict == "allow":
            return None
        text = reason or USER_DENIED
        self.denials.append(Denial(call.tool_call.id, call.tool.name, dict(call.args), text))
        return BeforeToolCallResult(block=True, reason=text)

    async def _ask(self, call: ToolCallInfo) -> tuple[Verdict, str | None]:
        assert self.approver is not None
        request = self.request_for(call.tool, call.args)
        try:
            answer = await self.approver(request)
        except Exception as exc:
            return "deny", CHECK_FAILED.format(error=str(exc) or type(exc).__name__)
        if answer.decision == "always":
            self.session_rules.append(request.suggested_rule)
            return "allow", None
        if answer.decision == "allow":
            return "allow", None
        text = USER_DENIED if not answer.reason else f"{USER_DENIED} Reason: {answer.reason}"
        return "deny", text
