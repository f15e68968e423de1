"""Running one hook (a shell command or a Python callback) and merging the results of
the hooks of one event.

Shell hooks follow the Claude Code contract: the input JSON on stdin; exit 0 continues
(stdout may be a JSON object with a decision, or plain text); exit 2 blocks, with stderr
as the reason; any other exit code is a non-blocking error. A hook that runs past its
timeout has its whole process group killed and counts as a non-blocking error.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

import msgspec

from .._proc import spawn_group
from .._proc import stop_group
from .._proc import untrack_process_group
from ..llm import exception_text
from ._spec import HookSpec

MAX_TEXT = 10_000
"""Longest hook text (reason, context, message) passed on; longer text is clipped."""

# Events whose plain (non-JSON) stdout on exit 0 is context for the model.
_STDOUT_IS_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})


class HookResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A hook's answer, with the fields of Claude Code's hook output JSON in snake case.

    Python callbacks may return one (or the JSON-shaped dict). ``decision="block"`` with a
    ``reason`` blocks (the tool result / stop / prompt, per event; for PreCompact,
    SessionStart, SessionEnd and Notification, which cannot block, the reason is only
    shown to the user); ``continue_=False``
    stops the run (``stop_reason`` is shown to the user); ``system_message`` is shown to
    the user; ``additional_context`` reaches the model. For PreToolUse:
    ``permission_decision`` (allow, deny, ask), ``permission_decision_reason`` and
    ``updated_input`` (replacement arguments).
    """

    decision: Literal["block", "approve"] | None = None
    reason: str | None = None
    continue_: bool = msgspec.field(default=True, name="continue")
    stop_reason: str | None = None
    system_message: str | None = None
    suppress_output: bool = False
    permission_decision: Literal["allow", "deny", "ask"] | None = None
    permission_decision_reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: str | None = None


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    text: str = value.strip()
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " … [clipped]"


def parse_output(data: Mapping[str, Any]) -> HookResult:
    """A :class:`HookResult` from Claude Code's output JSON (camelCase; fields of the wrong
    type are ignored)."""
    specific = data.get("hookSpecificOutput")
    if not isinstance(specific, Mapping):
        specific = {}
    decision = data.get("decision")
    permission = specific.get("permissionDecision")
    updated = specific.get("updatedInput")
    return HookResult(
        decision=decision if decision in ("block", "approve") else None,
        reason=_text(data.get("reason")),
        continue_=data.get("continue") is not False,
        stop_reason=_text(data.get("stopReason")),
        system_message=_text(data.get("systemMessage")),
        suppress_output=data.get("suppressOutput") is True,
        permission_decision=permission if permission in ("allow", "deny", "ask") else None,
        permission_decision_reason=_text(specific.get("permissionDecisionReason")),
        updated_input=dict(updated) if isinstance(updated, Mapping) else None,
        additional_context=_text(specific.get("additionalContext")),
    )


@dataclass(slots=True)
class HookRun:
    """What one hook did: its ``result``, or an ``error`` (a non-blocking failure: a crash,
    an exit code other than 0 and 2, a timeout). ``exit_code`` is set for shell hooks."""

    spec: HookSpec
    result: HookResult = field(default_factory=HookResult)
    exit_code: int | None = None
    stderr: str = ""
    error: str | None = None


def _from_stdout(event: str, stdout: str) -> HookResult:
    text = stdout.strip()
    if text.startswith("{"):
        try:
            data = msgspec.json.decode(text)
        except msgspec.DecodeError:
            data = None
        if isinstance(data, dict):
            return parse_output(data)
    if text and event in _STDOUT_IS_CONTEXT:
        return HookResult(additional_context=_text(text))
    return HookResult()


async def _run_command(
    spec: HookSpec, payload: bytes, cwd: str, env: Mapping[str, str], event: str
) -> HookRun:
    assert isinstance(spec.handler, str)
    try:
        proc = await spawn_group(
            "/bin/sh",
            "-c",
            spec.handler,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
        )
    except OSError as exc:
        return HookRun(spec, error=f"could not start: {exc.strerror or exc}")
    try:
        async with asyncio.timeout(spec.timeout):
            out, err = await proc.communicate(payload)
    except TimeoutError:
        await stop_group(proc)
        return HookRun(spec, error=f"timed out after {spec.timeout:g}s and was stopped")
    except BaseException:  # cancelled (the run was aborted): stop the hook, then go on cancelling
        await stop_group(proc)
        raise
    untrack_process_group(proc.pid, unless_alive=True)
    code = proc.returncode
    stderr = err.decode(errors="replace")
    if code == 0:
        return HookRun(spec, _from_stdout(event, out.decode(errors="replace")), 0, stderr)
    if code == 2:
        reason = _text(stderr) or f"blocked by hook {spec.label} (exit code 2)"
        return HookRun(spec, HookResult(decision="block", reason=reason), 2, stderr)
    detail = _text(stderr)
    shown = f"exited with code {code}" if code is not None and code >= 0 else f"was killed by signal {-(code or 0)}"
    return HookRun(spec, exit_code=code, stderr=stderr, error=f"{shown}: {detail}" if detail else shown)


async def _run_callback(spec: HookSpec, data: dict[str, Any], event: str) -> HookRun:
    assert not isinstance(spec.handler, str)
    try:
        value = spec.handler(data)
        if inspect.isawaitable(value):
            try:
                async with asyncio.timeout(spec.timeout):
                    value = await value
            except TimeoutError:
                return HookRun(spec, error=f"timed out after {spec.timeout:g}s and was cancelled")
    except Exception as exc:
        return HookRun(spec, error=f"raised {exception_text(exc)}")
    if value is None:
        return HookRun(spec)
    if isinstance(value, HookResult):
        return HookRun(spec, value)
    if isinstance(value, Mapping):
        return HookRun(spec, parse_output(value))
    if isinstance(value, str):
        return HookRun(spec, _from_stdout(event, value))
    return HookRun(spec, error=f"returned {type(value).__name__}; expected None, a dict or a HookResult")


def run_hook(
    spec: HookSpec, event: str, data: dict[str, Any], payload: bytes, cwd: str, env: Mapping[str, str] | None
) -> Any:
    """The coroutine running ``spec`` on ``data`` (``payload`` is its JSON). Never raises
    except on cancellation (which kills a shell hook's process group)."""
    if isinstance(spec.handler, str):
        return _run_command(spec, payload, cwd, env or {}, event)
    return _run_callback(spec, msgspec.json.decode(payload), event)


@dataclass(slots=True)
class HookOutcome:
    """The merged result of the hooks of one event, in registration order.

    ``blocked``/``reason``: a hook blocked (exit 2 or ``decision: block``; for PreToolUse a
    ``deny``), with the blocking hooks' reasons joined. ``decision`` (PreToolUse): deny >
    ask > allow. ``updated_input``: the last replacement given by a hook that did not deny.
    ``stop``/``stop_reason``: a hook said ``"continue": false``. ``context``: every hook's
    additional context, joined. ``messages``: system messages for the user; ``errors``:
    non-blocking failures (each naming its hook). ``runs``: each hook's own result.
    """

    event: str
    runs: list[HookRun] = field(default_factory=list)
    blocked: bool = False
    reason: str | None = None
    decision: Literal["allow", "deny", "ask"] | None = None
    updated_input: dict[str, Any] | None = None
    stop: bool = False
    stop_reason: str | None = None
    context: str | None = None
    messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _join(parts: list[str]) -> str | None:
    return "\n".join(parts) if parts else None


_RANK = {"allow": 1, "ask": 2, "deny": 3}
_CANNOT_BLOCK = frozenset({"PreCompact", "SessionStart", "SessionEnd", "Notification"})


def merge(event: str, runs: list[HookRun]) -> HookOutcome:
    """Merge ``runs`` (in registration order) deterministically: block and deny win, then
    ask, then allow; texts are joined in order."""
    outcome = HookOutcome(event, runs)
    contexts: list[str] = []
    stop_reasons: list[str] = []
    blocks: list[str] = []
    decisions: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    best: str | None = None
    for run in runs:
        spec = run.spec
        if run.error is not None:
            outcome.errors.append(f"{event} hook {spec.label} {run.error}")
            continue
        r = run.result
        if not r.continue_:
            outcome.stop = True
            if r.stop_reason:
                stop_reasons.append(r.stop_reason)
        if r.system_message:
            outcome.messages.append(r.system_message)
        if r.additional_context:
            contexts.append(r.additional_context)
        if event == "PreToolUse":
            decision = r.permission_decision or {"block": "deny", "approve": "allow"}.get(r.decision or "")
            if decision is None:
                if r.updated_input is not None:
                    outcome.updated_input = r.updated_input
                continue
            reason = r.permission_decision_reason or r.reason
            if reason:
                decisions[decision].append(reason)
            if decision != "deny" and r.updated_input is not None:
                outcome.updated_input = r.updated_input
            if best is None or _RANK[decision] > _RANK[best]:
                best = decision
        elif r.decision == "block":
            if event in _CANNOT_BLOCK:  # nothing to block: the reason is for the user only
                outcome.errors.append(f"{event} hook {spec.label} (exit code 2): {r.reason or 'no reason given'}")
            else:
                blocks.append(r.reason or f"blocked by hook {spec.label}")
    if event == "PreToolUse":
        outcome.decision = best  # type: ignore[assignment]
        if best is not None:
            outcome.reason = _join(decisions[best])
        outcome.blocked = best == "deny"
        if best == "deny":
            outcome.updated_input = None
    else:
        outcome.blocked = bool(blocks)
        outcome.reason = _join(blocks)
    outcome.stop_reason = _join(stop_reasons)
    outcome.context = _join(contexts)
    return outcome
