"""Permissions: modes, rules, hooks and approvals deciding whether a tool call runs.

:class:`PermissionEngine` is a ``before_tool_call`` gate. For each call it consults, in
order: the PreToolUse ``hooks`` -> ``deny`` rules -> ``ask`` rules -> the mode -> ``allow``
rules (and rules remembered from "always" answers) -> the ``can_use_tool`` callback -> the
mode's default, which asks the ``approver`` (denied when there is none). Deny rules win
in every mode, ``bypass`` included, and are checked again against arguments a hook or
the callback replaced. Modes::

    default       read-only tools run; everything else asks
    accept_edits  also file edits inside the workspace, and bash when it is sandboxed
    plan          read-only tools, and bash only when sandboxed (the kernel makes the
                  filesystem read-only); edits and unsandboxed bash are denied
    bypass        everything runs except what deny rules name

A tool is read-only when it is not ``bash``, not an edit tool and declares itself
``read_only`` (for the call's arguments; ``sequential`` is scheduling only and plays no
part); bash is never judged read-only by looking at its command. Rules
(Claude Code style): ``Bash``, ``Bash(git status)`` (that command exactly),
``Bash(npm run test:*)`` (that command and any arguments), ``Edit(src/**)`` (``Edit``
covers ``edit`` and ``write``), ``Write(docs/*)``, ``Read(./.env)`` (``Read`` covers
``read``, ``grep``, ``find`` and ``ls``), ``Read(~/.ssh/**)``, ``Read(//etc/**)``,
``mcp__server``, ``mcp__server__tool``; tool names match case-insensitively.

Bash rules are matched against every simple command the shell would run, found by a
conservative parser (:func:`parse_command`) that unwraps ``env``, ``command``,
``time``, ``nice``, ``nohup``, ``timeout``, ``xargs``, ``find -exec``, ``bash -c`` …;
an allow rule must match each of them, a deny rule any; a command the parser cannot
resolve never matches an allow rule and matches a deny rule on any word that might name
its command. Paths are resolved (``~``, ``..``, symlinks) and matched relative to
``root`` with gitignore-like ``**`` semantics; a path resolving outside the workspace
never matches a workspace-relative allow rule.

Every decision is recorded in :attr:`PermissionEngine.decisions` and returned as the
``note`` of the gate's result, which the loop emits as a ``tool_call_note`` event::

    engine = PermissionEngine("default", approver=ask_user, allow=["Bash(git status)"], root=".")
    agent = Agent(model, tools=tools, before_tool_call=engine.before_tool_call)
"""

from ._engine import CHECK_FAILED
from ._engine import HOOK_DENIED
from ._engine import HOOK_STOPPED
from ._engine import NO_APPROVER
from ._engine import PERMISSION_MODES
from ._engine import PLAN_DENIED
from ._engine import PRECHECK
from ._engine import RULE_DENIED
from ._engine import USER_DENIED
from ._engine import Approval
from ._engine import Approver
from ._engine import CanUseTool
from ._engine import HookVerdict
from ._engine import PermissionAllow
from ._engine import PermissionDecision
from ._engine import PermissionDeny
from ._engine import PermissionEngine
from ._engine import PermissionMode
from ._engine import PermissionRequest
from ._engine import PrecheckedTool
from ._engine import PreToolUseHook
from ._engine import ReportsSandboxPolicy
from ._engine import SandboxedTool
from ._engine import Verdict
from ._engine import args_digest
from ._engine import parse_mode
from ._rules import RULE_FORMS
from ._rules import Rule
from ._rules import parse_rules
from ._rules import rule_subject
from ._shell import SimpleCommand
from ._shell import parse_command

__all__ = [
    "CHECK_FAILED",
    "HOOK_DENIED",
    "HOOK_STOPPED",
    "NO_APPROVER",
    "PERMISSION_MODES",
    "PLAN_DENIED",
    "PRECHECK",
    "RULE_DENIED",
    "RULE_FORMS",
    "USER_DENIED",
    "Approval",
    "Approver",
    "CanUseTool",
    "HookVerdict",
    "PermissionAllow",
    "PermissionDecision",
    "PermissionDeny",
    "PermissionEngine",
    "PermissionMode",
    "PermissionRequest",
    "PreToolUseHook",
    "PrecheckedTool",
    "ReportsSandboxPolicy",
    "Rule",
    "SandboxedTool",
    "SimpleCommand",
    "Verdict",
    "args_digest",
    "parse_command",
    "parse_mode",
    "parse_rules",
    "rule_subject",
]
