"""Lifecycle hooks: Python callbacks and shell commands run at points of an agent's life.

Events: ``PreToolUse``, ``PostToolUse``, ``PostToolUseFailure``, ``UserPromptSubmit``,
``Stop``, ``SubagentStop``, ``PreCompact``, ``SessionStart``, ``SessionEnd``,
``Notification``. Shell hooks follow the Claude Code hook contract, so existing hook
scripts work unchanged: the event's input as JSON on stdin (``session_id``,
``transcript_path``, ``cwd``, ``permission_mode``, ``hook_event_name`` and the event's
fields such as ``tool_name``, ``tool_input``, ``tool_response``, ``prompt``,
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

from ._exec import HookOutcome, HookResult, HookRun
from ._runner import (
    DENIED_TEXT,
    NO_APPROVER_TEXT,
    PROMPT_BLOCKED_TEXT,
    STOPPED_TEXT,
    HookNotice,
    HookRunner,
    PromptCheck,
)
from ._spec import (
    DEFAULT_TIMEOUT,
    HOOK_EVENTS,
    HookCallback,
    HookConfigError,
    HookEvent,
    HookSpec,
    hooks_from_json,
    parse_hooks,
)

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
