"""The permission engine: a ``before_tool_call`` gate evaluating hooks, rules, the mode,
a ``can_use_tool`` callback and the user's answer, in that order, recording every decision."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Literal
from typing import Protocol
from typing import TypeAlias
from typing import get_args
from typing import runtime_checkable

import msgspec

from .._paths import has_wildcard
from .._paths import pattern_base
from .._paths import within
from ..loop import BeforeToolCallResult
from ..loop import Tool
from ..loop import ToolCallInfo
from ..loop import denied_text
from ..sandbox import DEFAULT_PROTECTED
from ..sandbox import SandboxPolicy
from ._rules import Rule
from ._rules import absolute_pattern
from ._rules import parse_rules
from ._rules import resolve_path
from ._rules import rule_subject
from ._rules import search_links
from ._rules import workspace_pattern
from ._shell import SimpleCommand
from ._shell import parse_command

PermissionMode: TypeAlias = Literal["default", "accept_edits", "plan", "bypass"]
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)
_MODE_ALIASES = {"accept-edits": "accept_edits"}


def parse_mode(text: str) -> PermissionMode:
    """A permission mode from its name (``accept-edits`` is accepted for ``accept_edits``);
    ``ValueError`` naming the value and the modes otherwise."""
    name = _MODE_ALIASES.get(text, text) if isinstance(text, str) else text
    for mode in PERMISSION_MODES:
        if name == mode:
            return mode
    raise ValueError(
        f"Unknown permission mode {text!r}; expected one of {', '.join(PERMISSION_MODES)} (or accept-edits)"
    )


# -- seams -----------------------------------------------------------------------------------
@runtime_checkable
class ReportsSandboxPolicy(Protocol):
    """A sandboxed tool that tells the policy its next command runs under (the bash tool
    does): ``plan`` lets a sandboxed call run without asking only when that policy is
    read-only."""

    def policy(self) -> SandboxPolicy:
        """The sandbox policy of a call made now."""
        ...


def _read_only_now(tool: Tool) -> bool:
    """Whether ``tool``'s next command runs in a read-only sandbox (False when unknown)."""
    if not isinstance(tool, ReportsSandboxPolicy):
        return False
    try:
        return not tool.policy().write
    except Exception:
        return False


@runtime_checkable
class PrecheckedTool(Protocol):
    """A tool that can tell, before it runs, that a call would fail (the ``edit`` and
    ``write`` tools do: a file not read yet, or changed since). The engine asks
    :meth:`precheck` before it asks the user (or pauses the run) about a call; a message
    denies the call with that message as its result and nobody is asked."""

    def precheck(self, args: dict[str, Any]) -> str | None:
        """Why a call with ``args`` would fail now (the tool's error message), or None."""
        ...


def _precheck(tool: Tool, args: dict[str, Any]) -> str | None:
    """The tool's :meth:`PrecheckedTool.precheck` message for a call (None when it has no
    precheck, passes it, or the precheck itself fails)."""
    if not isinstance(tool, PrecheckedTool):
        return None
    try:
        problem = tool.precheck(args)
    except Exception:
        return None
    return problem if isinstance(problem, str) and problem else None


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """What a PreToolUse hook says about a call (``None`` fields: no opinion).

    ``decision`` allow skips ask rules, the mode, allow rules and the callback (deny rules
    still apply); ask forces the question; deny denies with ``reason``. ``updated_input``
    replaces the arguments (and is checked against deny rules); ``stop`` denies the call
    and ends the run with ``stop_reason``.
    """

    decision: Literal["allow", "deny", "ask"] | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    stop: bool = False
    stop_reason: str | None = None


class PreToolUseHook(Protocol):
    """Anything that can vote on a tool call before it runs (implemented by ``ketch.hooks``)."""

    async def pre_tool_use(self, call: ToolCallInfo) -> HookVerdict | None:
        """The verdict for ``call``, or None for no opinion."""
        ...


@runtime_checkable
class SandboxedTool(Protocol):
    """A tool that says whether its commands run inside an OS sandbox (the bash tool does).

    ``accept_edits`` lets a sandboxed bash call run without asking; ``plan`` does too when
    the tool also reports a read-only policy for it (:class:`ReportsSandboxPolicy`).
    """

    @property
    def sandboxed(self) -> bool:
        """Whether commands run sandboxed."""
        ...


@dataclass(frozen=True, slots=True)
class PermissionAllow:
    """``can_use_tool`` result: run the call, with ``updated_input`` as its arguments when given."""

    updated_input: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PermissionDeny:
    """``can_use_tool`` result: deny the call with ``message``; ``stop`` also ends the run."""

    message: str
    stop: bool = False


CanUseTool: TypeAlias = Callable[[ToolCallInfo], Awaitable[PermissionAllow | PermissionDeny | None]]
"""The application's callback, consulted where the mode would ask; None falls through to asking."""


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A call waiting for the user's answer.

    ``kind`` is ``edit`` for edit tools and ``execute`` otherwise; ``subject`` is the
    command or path; ``suggested_rules`` are what "always" remembers (empty when the call
    cannot be covered by a rule, e.g. an unresolved bash command); ``reason`` says why it
    is asked.
    """

    tool_name: str
    args: dict[str, Any]
    kind: Literal["edit", "execute"]
    subject: str | None
    suggested_rules: tuple[Rule, ...]
    mode: PermissionMode
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Approval:
    """The answer to a :class:`PermissionRequest`: allow once, always, or deny."""

    decision: Literal["allow", "always", "deny"]
    reason: str | None = None

    @classmethod
    def once(cls) -> Approval:
        """Allow this call only."""
        return cls("allow")

    @classmethod
    def always(cls) -> Approval:
        """Allow this call and remember the request's suggested rules for the session."""
        return cls("always")

    @classmethod
    def deny(cls, reason: str | None = None) -> Approval:
        """Deny the call; ``reason`` is passed on to the model."""
        return cls("deny", reason or None)


Approver: TypeAlias = Callable[[PermissionRequest], Awaitable[Approval]]


class PermissionDecision(msgspec.Struct, kw_only=True, frozen=True):
    """One permission decision: the tool, the call, a digest of its arguments (first 16 hex
    digits of the SHA-256 of their canonical JSON), what decided (``deny rule Bash(rm:*)
    from project``, ``mode plan``, ``hook``, ``callback``, ``user`` …), the outcome, whether
    the user was asked, and the denial message."""

    tool_name: str
    tool_call_id: str
    args_digest: str
    decided_by: str
    outcome: Literal["allow", "deny", "approval_required"]
    asked: bool = False
    reason: str | None = None


def args_digest(args: Mapping[str, Any]) -> str:
    """The first 16 hex digits of the SHA-256 of ``args`` as canonical JSON."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_GLOB = frozenset("*?[")

USER_DENIED = denied_text()
NO_APPROVER = (
    "Permission denied: {tool} needs approval, but nobody can approve it in this run "
    "(permission mode {mode}). Do not retry it; use read-only tools or explain what you would do instead."
)
PLAN_DENIED = (
    "Permission denied: plan mode allows read-only tools only, and this {tool} call may change "
    "things. Describe the change instead of making it."
)
RULE_DENIED = "Permission denied: the call matches the deny rule {rule}."
CHECK_FAILED = "Permission check failed: {error}"
HOOK_DENIED = "Denied by a PreToolUse hook: {reason}"
"""The tool result when a PreToolUse hook denies a call."""
HOOK_STOPPED = "Stopped by a PreToolUse hook: {reason}"
"""The tool result of a call whose PreToolUse hook said ``"continue": false``."""
STOPPED = "Permission denied: the run was stopped."
PRECHECK = "tool precheck"
"""``PermissionDecision.decided_by`` of a call denied because the tool's precheck says it would fail
(:class:`PrecheckedTool`); its ``reason`` is the tool's message."""

Outcome: TypeAlias = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The policy's answer without asking anyone: ``outcome``, what decided, the denial text."""

    outcome: Outcome
    decided_by: str
    reason: str | None = None


def _rule_source(kind: str, rule: Rule) -> str:
    return f"{kind} rule {rule} from {rule.source}"


def _searchable(pattern: str, root: str) -> bool:
    """Whether a sandbox can find what ``pattern`` names at each command in bounded time:
    no ``**`` but a final one (``X/**`` stands for ``X``), or none outside the workspace."""
    inner = pattern.removesuffix("/**")
    if inner in ("", "/"):  # the whole filesystem: nothing would run
        return False
    return "**" not in inner or within(pattern_base(inner), root)


def _unenforced_source(mode: str, rule: Rule, kind: str) -> str:
    return f"mode {mode}; the sandbox does not enforce the {kind} rule {rule} from {rule.source}"


class PermissionEngine:
    """Decides, per tool call, whether it runs. Pass :meth:`before_tool_call` as the loop hook.

    Order: ``hooks`` -> deny rules -> ask rules -> the mode -> allow rules (configured and
    remembered) -> ``can_use_tool`` -> the mode's default (ask ``approver``; deny when there
    is none, with ``no_approver_message``, ``{tool}`` and ``{mode}`` filled in; or, with
    ``no_approver="pause"``, pause the run for approval: ``end_reason ==
    "approval_required"``, to be resumed with a decision, see :meth:`ketch.Agent.resume`;
    a call resumed with approval is not asked again). Before asking or pausing, the tool's
    precheck (:class:`PrecheckedTool`) runs: a call it says would fail is denied with its
    message (``decided_by`` :data:`PRECHECK`) and nobody is asked. Deny rules
    win in every mode; arguments replaced by a hook or the callback are checked against
    them again. ``root`` is the workspace relative rule paths refer to; ``edit_tools``
    names the file-editing tools. ``protected`` are the workspace-relative paths the
    sandbox keeps read-only (default :data:`ketch.sandbox.DEFAULT_PROTECTED`; add the
    scripts hooks and MCP servers run, see :func:`ketch.sandbox.command_paths`): an edit
    of one is asked about in ``accept_edits`` mode too. ``decisions`` records every
    decision.
    """

    __slots__ = (
        "_lock",
        "_stopped",
        "allow",
        "approver",
        "ask",
        "can_use_tool",
        "decisions",
        "deny",
        "edit_tools",
        "hooks",
        "mode",
        "no_approver",
        "no_approver_message",
        "protected",
        "root",
        "session_rules",
    )

    def __init__(
        self,
        mode: PermissionMode | str = "default",
        *,
        allow: Iterable[str | Rule] = (),
        ask: Iterable[str | Rule] = (),
        deny: Iterable[str | Rule] = (),
        approver: Approver | None = None,
        can_use_tool: CanUseTool | None = None,
        hooks: PreToolUseHook | None = None,
        root: str | os.PathLike[str] | None = None,
        edit_tools: Iterable[str] = ("write", "edit"),
        no_approver_message: str = NO_APPROVER,
        no_approver: Literal["deny", "pause"] = "deny",
        protected: Iterable[str] | None = None,
    ) -> None:
        self.mode: PermissionMode = parse_mode(mode)
        self.protected: tuple[str, ...] = DEFAULT_PROTECTED if protected is None else tuple(protected)
        self.root = os.path.realpath(os.fspath(root)) if root is not None else None
        self.allow = parse_rules(allow)
        self.ask = parse_rules(ask)
        self.deny = parse_rules(deny)
        self.approver = approver
        self.can_use_tool = can_use_tool
        self.hooks = hooks
        self.edit_tools = frozenset(edit_tools)
        self.no_approver_message = no_approver_message
        if no_approver not in ("deny", "pause"):
            raise ValueError(f"no_approver must be 'deny' or 'pause', got {no_approver!r}")
        self.no_approver: Literal["deny", "pause"] = no_approver
        self.session_rules: list[Rule] = []
        self.decisions: list[PermissionDecision] = []
        self._lock: asyncio.Lock | None = None
        self._stopped: tuple[object, str] | None = None  # (the assistant message, the reason)
        # where symlinks the deny and ask rules' wildcard patterns name lead, as the session starts
        search_links((*self.deny, *self.ask), self.root)

    def __repr__(self) -> str:
        return (
            f"PermissionEngine(mode={self.mode!r}, allow={[str(r) for r in self.allow]}, "
            f"ask={[str(r) for r in self.ask]}, deny={[str(r) for r in self.deny]})"
        )

    def set_mode(self, mode: PermissionMode | str) -> None:
        """Switch the mode (``ValueError`` for an unknown one)."""
        self.mode = parse_mode(mode)

    @property
    def denials(self) -> list[PermissionDecision]:
        """The decisions that denied a call."""
        return [d for d in self.decisions if d.outcome == "deny"]

    # -- the sandbox's share ---------------------------------------------------------------
    def _base(self) -> str:
        return self.root if self.root is not None else os.path.realpath(os.getcwd())

    def _file_rules(self, rules: list[Rule]) -> tuple[list[Rule], list[Rule]]:
        """Of ``rules``, those on reading files and those on editing them."""
        reads = [r for r in rules if r.covers_tool("read")]
        edits = [r for r in rules if any(r.covers_tool(t) for t in self.edit_tools)]
        return reads, edits

    def _file_denials(self) -> tuple[list[Rule], list[Rule]]:
        """The deny rules on reading files and those on editing them."""
        return self._file_rules(self.deny)

    def _rule_kind(self, rule: Rule) -> str:
        return "deny" if any(rule is r for r in self.deny) else "ask"

    def _absolute(self, rules: list[Rule]) -> tuple[str, ...]:
        base = self._base()
        return tuple(dict.fromkeys(p for p in (absolute_pattern(r, base) for r in rules) if p is not None))

    def ask_read_paths(self) -> tuple[str, ...]:
        """The absolute path patterns the ``Read`` ask rules name, for a
        :class:`~ketch.tools.Workspace`'s ``ask_read``: the file tools then refuse such a
        path reached through a symlink made after the engine's check."""
        return self._absolute(self._file_rules(self.ask)[0])

    def ask_edit_paths(self) -> tuple[str, ...]:
        """The absolute path patterns the ``Edit`` ask rules name, for a
        :class:`~ketch.tools.Workspace`'s ``ask_edit`` (with the sandbox's
        ``DEFAULT_PROTECTED``, which the engine asks about too)."""
        return self._absolute(self._file_rules(self.ask)[1])

    def hidden_paths(self, *, all_rules: bool = False) -> tuple[str, ...]:
        """The absolute path patterns the ``Read`` deny rules name (workspace-relative ones
        taken from ``root``), for the bash tool's ``hidden``: the sandbox then keeps
        commands from reading what the file tools may not. A sandbox searches a pattern's
        ``**`` at each command, so one that would search outside the workspace
        (``~/**/*.pem``) is left out: :meth:`unenforced` names its rule. ``all_rules``
        keeps those too, for a :class:`~ketch.tools.Workspace`'s ``hidden`` (which only
        matches the paths the tools touch)."""
        base = self._base()
        return tuple(p for p in self._absolute(self._file_denials()[0]) if all_rules or _searchable(p, base))

    def protected_paths(self, *, all_rules: bool = False) -> tuple[str, ...]:
        """The workspace-relative path patterns the ``Edit`` deny rules name inside the
        workspace, for the bash tool's ``protected``: the sandbox then keeps commands from
        writing what the file tools may not. ``all_rules``: the absolute patterns of
        every ``Edit`` deny rule, also those reaching outside the workspace, for a
        :class:`~ketch.tools.Workspace`'s ``protected``."""
        found = self._absolute(self._file_denials()[1])
        if all_rules:
            return found
        base = self._base()
        relative = (workspace_pattern(p, base) for p in found)
        return tuple(dict.fromkeys(p for p in relative if p is not None))

    def unenforced(self, tool: Tool) -> Rule | None:
        """The first ``Read`` or ``Edit`` deny or ask rule the sandbox of ``tool`` does not
        enforce (None when it enforces all): a rule whose paths the policy :class:`tool
        reports <ReportsSandboxPolicy>` neither hides (reading) nor keeps read-only
        (editing), a rule without a path, and in a writable sandbox an ``Edit`` rule with
        wildcards (``Edit(*.lock)``: a command could create a new file it names). The
        modes let a sandboxed bash call run without asking only when there is none: a
        command could read or change what an ask rule names without anyone being asked."""
        deny_reads, deny_edits = self._file_denials()
        ask_reads, ask_edits = self._file_rules(self.ask)
        reads, edits = [*deny_reads, *ask_reads], [*deny_edits, *ask_edits]
        if not reads and not edits:
            return None
        if not isinstance(tool, ReportsSandboxPolicy):
            return (*reads, *edits)[0]
        try:
            policy = tool.policy()
        except Exception:
            return (*reads, *edits)[0]
        base = self._base()
        hidden = {os.fspath(p) for p in policy.hidden}
        for rule in reads:
            pattern = absolute_pattern(rule, base)
            if pattern is None or not _searchable(pattern, base) or os.fspath(Path(pattern)) not in hidden:
                return rule
        if not policy.write:
            return None
        workspace = os.path.realpath(policy.workspace)
        writable = [os.path.realpath(p) for p in policy.extra_writable]
        for rule in edits:
            pattern = absolute_pattern(rule, base)
            if pattern is None:
                return rule
            relative = workspace_pattern(pattern, workspace)
            if relative is not None:
                # a pattern keeps the files it names now read-only, but bwrap cannot keep
                # a command from creating a new one: only a path (or X/**) holds fully
                if relative not in policy.protected or has_wildcard(relative.removesuffix("/**")):
                    return rule
                continue
            reach = pattern_base(pattern)
            if any(within(reach, w) or within(w, reach) for w in (workspace, *writable)):
                return rule  # it reaches into a writable folder the policy does not protect
        return None

    # -- classification -------------------------------------------------------------------
    def _kind(self, tool: Tool, args: dict[str, Any]) -> Literal["bash", "edit", "read", "other"]:
        name = tool.name
        if name == "bash":
            return "bash"
        if name in self.edit_tools:
            return "edit"
        try:
            return "read" if tool.is_read_only(args) else "other"
        except Exception:
            return "other"

    def _inside(self, tool: Tool, args: dict[str, Any]) -> bool:
        """Whether the call's path resolves inside the workspace."""
        subject = rule_subject(tool.name, args)
        if subject is None:
            return False
        root = self.root if self.root is not None else os.path.realpath(os.getcwd())
        r = resolve_path(subject, root)
        return r.real_rel is not None and r.lexical_rel is not None and r.followed_rel is not None

    def _commands(self, tool: Tool, args: dict[str, Any]) -> list[SimpleCommand] | None:
        if tool.name != "bash":
            return None
        command = args.get("command")
        return parse_command(command) if isinstance(command, str) else []

    def _matching(
        self,
        rules: Iterable[Rule],
        tool: Tool,
        args: dict[str, Any],
        cmds: list[SimpleCommand] | None,
        *,
        allow: bool,
    ) -> Rule | None:
        for rule in rules:
            try:
                hit = (
                    rule.allows(tool.name, args, self.root, cmds)
                    if allow
                    else rule.denies(tool.name, args, self.root, cmds)
                )
            except Exception:
                hit = not allow  # a rule that fails to evaluate denies, never allows
            if hit:
                return rule
        return None

    def deny_verdict(self, tool: Tool, args: dict[str, Any]) -> Verdict | None:
        """The deny-rule verdict for a call, or None when no deny rule matches."""
        rule = self._matching(self.deny, tool, args, self._commands(tool, args), allow=False)
        if rule is None:
            return None
        return Verdict("deny", _rule_source("deny", rule), RULE_DENIED.format(rule=rule))

    def check(self, tool: Tool, args: dict[str, Any], *, skip_ask: bool = False) -> Verdict:
        """The policy verdict without hooks, callback or asking: deny rules, ask rules, the
        mode, allow rules, then the mode's default (``ask``)."""
        cmds = self._commands(tool, args)
        rule = self._matching(self.deny, tool, args, cmds, allow=False)
        if rule is not None:
            return Verdict("deny", _rule_source("deny", rule), RULE_DENIED.format(rule=rule))
        if not skip_ask:
            rule = self._matching(self.ask, tool, args, cmds, allow=False)
            if rule is not None:
                return Verdict("ask", _rule_source("ask", rule))
        mode_verdict = self._mode(tool, args)
        if mode_verdict is not None:
            return mode_verdict
        rules = (*self.allow, *self.session_rules)
        if cmds is None or len(cmds) <= 1:
            rule = self._matching(rules, tool, args, cmds, allow=True)
            if rule is not None:
                return Verdict("allow", _rule_source("allow", rule))
        else:
            # each simple command needs an allow rule of its own
            found: list[Rule] = []
            for cmd in cmds:
                rule = self._matching(rules, tool, args, [cmd], allow=True)
                if rule is None:
                    break
                if rule not in found:
                    found.append(rule)
            else:
                return Verdict("allow", "; ".join(_rule_source("allow", r) for r in found))
        sandboxed_bash = self._kind(tool, args) == "bash" and isinstance(tool, SandboxedTool) and tool.sandboxed
        loose = self.unenforced(tool) if self.mode in ("accept_edits", "plan") and sandboxed_bash else None
        if loose is not None:
            return Verdict("ask", _unenforced_source(self.mode, loose, self._rule_kind(loose)))
        return Verdict("ask", f"mode {self.mode}")

    def _mode(self, tool: Tool, args: dict[str, Any]) -> Verdict | None:
        mode = self.mode
        kind = self._kind(tool, args)
        source = f"mode {mode}"
        if kind == "read" or mode == "bypass":
            return Verdict("allow", source)
        sandboxed = kind == "bash" and isinstance(tool, SandboxedTool) and tool.sandboxed
        if mode == "plan":
            # a writable sandbox (a subagent's mode, a tool built without write_allowed) is denied
            if sandboxed and _read_only_now(tool):
                # a rule the sandbox does not hold: allow rules, else ask (naming the rule)
                return Verdict("allow", source) if self.unenforced(tool) is None else None
            return Verdict("deny", source, PLAN_DENIED.format(tool=tool.name))
        if mode == "accept_edits":
            if sandboxed and self.unenforced(tool) is None:
                return Verdict("allow", source)
            if kind == "edit" and self._inside(tool, args) and not self._protected(tool, args):
                return Verdict("allow", source)
        return None

    def _protected(self, tool: Tool, args: dict[str, Any]) -> bool:
        """Whether the call's path is one the sandbox keeps read-only (:attr:`protected`:
        ``.git/config``, ``.git/hooks``, ``.ketch``, a hook's script, …): an edit there
        could turn a later command into code execution, so ``accept_edits`` asks for it."""
        from ..sandbox import protected_path

        subject = rule_subject(tool.name, args)
        if subject is None:
            return False
        root = self.root if self.root is not None else os.path.realpath(os.getcwd())
        return protected_path(root, os.path.expanduser(subject), self.protected) is not None

    def request_for(self, tool: Tool, args: dict[str, Any], reason: str = "") -> PermissionRequest:
        """The :class:`PermissionRequest` an approver gets for this call."""
        name = tool.name
        subject = rule_subject(name, args)
        suggested: tuple[Rule, ...]
        if name == "bash":
            cmds = self._commands(tool, args) or []
            # A word with * ? [ would be a wildcard in the remembered rule (Bash(rm -f 'tmp*')
            # would allow "rm -f tmp -r ~"): such a call is allowed once, nothing remembered.
            if cmds and all(
                c.resolved and not c.writes and c.words and not c.open_args and not any(_GLOB.intersection(w) for w in c.words)
                for c in cmds
            ):
                seen: dict[str, Rule] = {}
                for c in cmds:
                    text = f"Bash({_shell_join(c.words)})"
                    seen.setdefault(text, Rule.parse(text, "session"))
                suggested = tuple(seen.values())
            else:
                suggested = ()
        else:
            suggested = (Rule(name.lower(), None, name.lower(), "session"),)
        kind: Literal["edit", "execute"] = "edit" if name in self.edit_tools else "execute"
        return PermissionRequest(name, dict(args), kind, subject, suggested, self.mode, reason)

    # -- the gate ---------------------------------------------------------------------------
    async def before_tool_call(self, call: ToolCallInfo) -> BeforeToolCallResult:
        """The ``before_tool_call`` hook: run the call (possibly with new arguments) or block it
        with the reason; the decision rides along as the result's ``note``."""
        args = call.args
        outcome, decided_by, reason, new_args, stop, asked = await self._decide(call)
        if new_args is not None:
            args = new_args
        decision = PermissionDecision(
            tool_name=call.tool.name,
            tool_call_id=call.tool_call.id,
            args_digest=args_digest(args),
            decided_by=decided_by,
            outcome=outcome,
            asked=asked,
            reason=reason if outcome == "deny" else None,
        )
        self.decisions.append(decision)
        if stop:
            self._stopped = (call.assistant_message, reason or STOPPED)
        if outcome == "deny":
            return BeforeToolCallResult.blocked(reason or USER_DENIED, stop=stop, note=decision)
        if outcome == "approval_required":
            return BeforeToolCallResult.approval_required(reason, note=decision)
        return BeforeToolCallResult(args=new_args, note=decision)

    async def _decide(
        self, call: ToolCallInfo
    ) -> tuple[Literal["allow", "deny", "approval_required"], str, str | None, dict[str, Any] | None, bool, bool]:
        tool = call.tool
        args = call.args
        new_args: dict[str, Any] | None = None
        stopped = self._stopped
        if stopped is not None and stopped[0] is call.assistant_message:
            return "deny", "stop", stopped[1], None, True, False

        # 1. hooks
        forced_ask = False
        hook_allow = False
        if self.hooks is not None:
            try:
                verdict = await self.hooks.pre_tool_use(call)
            except Exception:
                verdict = None
            if verdict is not None:
                if verdict.stop:
                    text = HOOK_STOPPED.format(reason=verdict.stop_reason or verdict.reason or "no reason given")
                    return "deny", "hook", text, None, True, False
                if verdict.updated_input is not None:
                    new_args = dict(verdict.updated_input)
                    args = new_args
                if verdict.decision == "deny":
                    text = HOOK_DENIED.format(reason=verdict.reason or "no reason given")
                    return "deny", "hook", text, new_args, False, False
                hook_allow = verdict.decision == "allow"
                forced_ask = verdict.decision == "ask"

        # 2. deny rules (also for a hook's "allow" and its new arguments)
        denied = self.deny_verdict(tool, args)
        if denied is not None:
            return "deny", denied.decided_by, denied.reason, new_args, False, False
        if hook_allow:
            return "allow", "hook", None, new_args, False, False

        # 3-5. ask rules, the mode, allow rules
        if forced_ask:
            policy = Verdict("ask", "hook")
        else:
            policy = self.check(tool, args)
        if policy.outcome == "allow":
            return "allow", policy.decided_by, None, new_args, False, False
        if policy.outcome == "deny":
            return "deny", policy.decided_by, policy.reason, new_args, False, False
        asked_by_rule = forced_ask or policy.decided_by.startswith("ask rule")

        # 6. the application's callback (where the mode would ask)
        if self.can_use_tool is not None and not asked_by_rule:
            info = call if new_args is None else _with_args(call, args)
            try:
                answer = await self.can_use_tool(info)
            except Exception as exc:
                return (
                    "deny",
                    "callback",
                    CHECK_FAILED.format(error=str(exc) or type(exc).__name__),
                    new_args,
                    False,
                    False,
                )
            if isinstance(answer, PermissionDeny):
                return "deny", "callback", answer.message or USER_DENIED, new_args, answer.stop, False
            if isinstance(answer, PermissionAllow):
                if answer.updated_input is not None:
                    new_args = dict(answer.updated_input)
                    args = new_args
                # new arguments, or files changed while the callback ran: the deny rules again
                denied = self.deny_verdict(tool, args)
                if denied is not None:
                    return "deny", denied.decided_by, denied.reason, new_args, False, False
                return "allow", "callback", None, new_args, False, False

        # 7. the mode's default: ask
        outcome, decided_by, reason, asked = await self._ask(
            call, tool, args, policy.decided_by, asked_by_rule
        )
        return outcome, decided_by, reason, new_args, False, asked

    async def _ask(
        self, call: ToolCallInfo, tool: Tool, args: dict[str, Any], why: str, forced: bool
    ) -> tuple[Literal["allow", "deny", "approval_required"], str, str | None, bool]:
        if self.approver is None and self.no_approver == "deny":
            return (
                "deny",
                "no approver",
                self.no_approver_message.format(tool=tool.name, mode=self.mode),
                False,
            )
        # a call the tool would refuse anyway is not worth a question (nor a pause)
        problem = _precheck(tool, args)
        if problem is not None:
            return "deny", PRECHECK, problem, False
        if self.approver is None:
            return "approval_required", why, f"{tool.name} needs approval ({why})", False
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not forced:
                # an "always" answer given while this call waited may cover it now
                again = self.check(tool, args)
                if again.outcome == "allow":
                    return "allow", again.decided_by, None, False
                if again.outcome == "deny":
                    return "deny", again.decided_by, again.reason, False
            problem = _precheck(tool, args)  # the files may have changed while this call waited
            if problem is not None:
                return "deny", PRECHECK, problem, False
            request = self.request_for(tool, args, why)
            try:
                answer = await self.approver(request)
            except Exception as exc:
                return "deny", "user", CHECK_FAILED.format(error=str(exc) or type(exc).__name__), True
        if answer.decision in ("allow", "always"):
            # the file a path names may have changed while the user was asked (a background
            # command can turn it into a symlink to a denied file): the deny rules again
            denied = self.deny_verdict(tool, args)
            if denied is not None:
                return "deny", denied.decided_by, denied.reason, True
            if answer.decision == "always":
                self.session_rules.extend(request.suggested_rules)
            return "allow", "user", None, True
        text = denied_text(answer.reason)
        return "deny", "user", text, True


def _with_args(call: ToolCallInfo, args: dict[str, Any]) -> ToolCallInfo:
    import dataclasses

    return dataclasses.replace(call, args=args)


def _shell_join(words: Iterable[str]) -> str:
    import shlex

    return " ".join(shlex.quote(w) for w in words)
