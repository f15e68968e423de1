"""Lifecycle hooks: Python callbacks and shell commands run at points of an agent's life.

Events: ``PreToolUse``, ``PostToolUse``, ``PostToolUseFailure``, ``UserPromptSubmit``,
``Stop``, ``SubagentStop``, ``PreCompact``, ``SessionStart``, ``SessionEnd``,
``Notification``. Shell hooks follow the Claude Code hook contract: the event's input as
JSON on stdin (``session_id``,
``transcript_path``, ``cwd``, ``permission_mode``, ``hook_event_name`` and the event's
fields such as ``tool_name`` (ketch's name: ``write``, ``bash``), ``tool_input`` (a
``path`` also given as Claude Code's ``file_path``), ``tool_response``, ``prompt``,
``stop_hook_active``); exit 0 continues (stdout may be a JSON object with ``decision``,
``reason``, ``continue``/``stopReason``, ``systemMessage`` and ``hookSpecificOutput``
with ``additionalContext``, and for PreToolUse ``permissionDecision`` and
``updatedInput``; plain stdout of UserPromptSubmit and SessionStart hooks is context for
the model); exit 2 blocks with stderr as the reason; other exit codes are non-blocking
errors shown to the user. Python callbacks get the same input as a dict and return None,
such a dict, or a :class:`HookResult`.

The matching hooks of an event run in parallel; their results merge in registration
order (deny > ask > allow; a block wins). A failing, crashing or timed-out hook (its
process group is killed) is reported through ``on_notice`` and never fails the run::

    runner = HookRunner(parse_hooks(settings["hooks"]), cwd=workspace)

    @runner.on("PreToolUse", matcher="bash")
    def no_rm(event: dict) -> dict | None:
        if "rm " in event["tool_input"]["command"]:
            return {"decision": "block", "reason": "rm is not allowed here"}
        return None

    agent = Agent(model, tools=tools, **runner.agent_config())
    result = await runner.prompt(agent, "clean up the build directory")
"""

from ._exec import HookOutcome
from ._exec import HookResult
from ._exec import HookRun
from ._runner import DENIED_TEXT
from ._runner import NO_APPROVER_TEXT
from ._runner import PROMPT_BLOCKED_TEXT
from ._runner import STOPPED_TEXT
from ._runner import HookNotice
from ._runner import HookRunner
from ._runner import PromptCheck
from ._spec import DEFAULT_TIMEOUT
from ._spec import HOOK_EVENTS
from ._spec import HookCallback
from ._spec import HookConfigError
from ._spec import HookEvent
from ._spec import HookSpec
from ._spec import hooks_from_json
from ._spec import parse_hooks

__all__ = [
    "DEFAULT_TIMEOUT",
    "DENIED_TEXT",
    "HOOK_EVENTS",
    "NO_APPROVER_TEXT",
    "PROMPT_BLOCKED_TEXT",
    "STOPPED_TEXT",
    "HookCallback",
    "HookConfigError",
    "HookEvent",
    "HookNotice",
    "HookOutcome",
    "HookResult",
    "HookRun",
    "HookRunner",
    "HookSpec",
    "PromptCheck",
    "hooks_from_json",
    "parse_hooks",
]
