""":class:`HookRunner`: runs the hooks of an event in parallel and attaches them to agents
through the loop's own hook fields (``before_tool_call``, ``after_tool_call``, ``on_stop``,
``stop_when``, a middleware) and the context manager's ``pre_compact``."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import uuid
from collections import deque
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

import msgspec

from .._schema import validate_arguments
from ..llm import AudioContent
from ..llm import DocumentContent
from ..llm import ImageContent
from ..llm import Message
from ..llm import TextContent
from ..llm import UserMessage
from ..llm import encode_json
from ..llm import exception_text
from ..loop import AfterToolCallResult
from ..loop import BeforeToolCallResult
from ..loop import RunResult
from ..loop import RunSummary
from ..loop import StopDecision
from ..loop import StopInfo
from ..loop import ToolCallInfo
from ..loop import ToolResult
from ..loop import TurnInfo
from ..permissions import HOOK_DENIED
from ..permissions import HOOK_STOPPED
from ..permissions import HookVerdict
from ._exec import HookOutcome
from ._exec import merge
from ._exec import run_hook
from ._spec import DEFAULT_TIMEOUT
from ._spec import HookCallback
from ._spec import HookEvent
from ._spec import HookSpec

if TYPE_CHECKING:
    from .. import Agent
    from ..context import PreCompact


log = logging.getLogger("ketch.hooks")

DENIED_TEXT = HOOK_DENIED
STOPPED_TEXT = HOOK_STOPPED
NO_APPROVER_TEXT = "A PreToolUse hook asked for the user's approval, and there is no one to ask: {reason}"
"""The tool result when a hook answers ``ask`` on an agent without an approval step."""
PROMPT_BLOCKED_TEXT = "Prompt blocked by a UserPromptSubmit hook: {reason}"
"""The run error (``end_reason`` ``stop_guard``) of a prompt a UserPromptSubmit hook blocked."""
FEEDBACK_TEXT = "{event} hook feedback: {text}"
CONTEXT_TEXT = "{event} hook context: {text}"

_MODES = {
    "default": "default",
    "accept-edits": "acceptEdits",
    "accept_edits": "acceptEdits",
    "plan": "plan",
    "bypass": "bypassPermissions",
}

_json = msgspec.json.Encoder(enc_hook=str)


def _hook_input(args: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as a hook reads them: a ``path`` is also given as Claude Code's
    ``file_path``, so a guard written for Claude Code's Read, Write and Edit sees it."""
    if isinstance(args.get("path"), str) and "file_path" not in args:
        return {**args, "file_path": args["path"]}
    return args


def _tool_input(updated: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """A hook's ``updatedInput`` as the tool's arguments: the ``file_path`` alias of
    :func:`_hook_input` goes back to ``path`` (a changed one wins)."""
    if "file_path" not in updated or "file_path" in args:
        return updated
    out = dict(updated)
    file_path = out.pop("file_path")
    if file_path != args.get("path") or "path" not in out:
        out["path"] = file_path
    return out


@dataclass(frozen=True, slots=True)
class HookNotice:
    """Something the user should see: a hook's ``error`` (non-blocking), ``message``
    (``systemMessage``), or ``stopped`` (``"continue": false`` with its reason)."""

    event: str
    kind: Literal["error", "message", "stopped"]
    text: str


@dataclass(frozen=True, slots=True)
class PromptCheck:
    """What UserPromptSubmit hooks said about a prompt: ``blocked`` with ``reason``, and
    ``context`` to add to it."""

    blocked: bool
    reason: str | None
    context: str | None
    outcome: HookOutcome


def _log_notice(notice: HookNotice) -> None:
    log.warning("%s", notice.text)


class HookRunner:
    """Runs lifecycle hooks: Python callbacks and shell commands from settings.

    ``hooks``: :class:`HookSpec` entries (from :func:`parse_hooks` or code; :meth:`add`
    and :meth:`on` register more). ``cwd`` is the workspace: shell hooks run there with
    ``KETCH_PROJECT_DIR`` and ``CLAUDE_PROJECT_DIR`` set to it, in ``environment`` (default:
    the tools' allow-list environment, :func:`ketch.sandbox.tool_environment`, widened by
    the ``env_allow`` patterns; secret-looking names and ``secret_names`` never pass).
    ``permission_mode`` (a string or a function returning one) is passed to hooks in
    Claude Code's spelling. ``on_notice`` receives what the user should see (default: the
    ``ketch.hooks`` logger). Stop hooks may continue a run at most
    ``max_stop_continuations`` times in a row.

    Attach to an :class:`~ketch.Agent` with ``Agent(..., **runner.agent_config())``
    (and ``Compactor(pre_compact=runner.pre_compact)``); send prompts through
    :meth:`prompt` for UserPromptSubmit. The permission engine calls :meth:`pre_tool_use`.
    """

    def __init__(
        self,
        hooks: Iterable[HookSpec] = (),
        *,
        cwd: str | Path = ".",
        session_id: str | None = None,
        transcript_path: str = "",
        permission_mode: str | Callable[[], str] | None = None,
        environment: Mapping[str, str] | None = None,
        secret_names: Iterable[str] = (),
        env_allow: Iterable[str] = (),
        on_notice: Callable[[HookNotice], Any] | None = None,
        max_stop_continuations: int = 8,
    ) -> None:
        self.cwd = str(Path(cwd).resolve())
        self.session_id = session_id or str(uuid.uuid4())
        self.transcript_path = transcript_path
        self.permission_mode = permission_mode
        self.on_notice = on_notice or _log_notice
        self.max_stop_continuations = max_stop_continuations
        self._environment = dict(environment) if environment is not None else None
        self._secret_names = tuple(secret_names)
        self._env_allow = tuple(env_allow)
        self._env: dict[str, str] | None = None
        self._by_event: dict[str, list[HookSpec]] = {}
        self._stops: dict[int, str | None] = {}
        self._tool_context: dict[str, str] = {}
        self._injected: deque[Message] = deque(maxlen=256)
        self._session_context: list[tuple[str, str]] = []
        self._background: set[asyncio.Task[Any]] = set()
        for spec in hooks:
            self._by_event.setdefault(spec.event, []).append(spec)

    # -- registering -------------------------------------------------------------------
    def add(
        self,
        event: HookEvent,
        handler: str | HookCallback,
        matcher: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> HookSpec:
        """Register a hook (a shell command or a callback) and return its spec."""
        spec = HookSpec(event, handler, matcher, timeout)
        self._by_event.setdefault(event, []).append(spec)
        return spec

    def on(
        self, event: HookEvent, matcher: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> Callable[[HookCallback], HookCallback]:
        """Decorator registering a Python callback: ``@runner.on("PreToolUse", "bash")``."""

        def register(fn: HookCallback) -> HookCallback:
            self.add(event, fn, matcher, timeout)
            return fn

        return register

    def has(self, event: HookEvent) -> bool:
        """Whether any hook is registered for ``event``."""
        return bool(self._by_event.get(event))

    @property
    def specs(self) -> list[HookSpec]:
        """Every registered hook, by event."""
        return [s for specs in self._by_event.values() for s in specs]

    # -- running -------------------------------------------------------------------------
    def _environment_for_hooks(self) -> dict[str, str]:
        if self._env is None:
            if self._environment is not None:
                env = dict(self._environment)
            else:
                from ..sandbox import tool_environment

                env = tool_environment(allow=self._env_allow, secret_names=self._secret_names)
            env["KETCH_PROJECT_DIR"] = self.cwd
            env["CLAUDE_PROJECT_DIR"] = self.cwd
            self._env = env
        return self._env

    def _mode(self) -> str | None:
        mode = self.permission_mode
        if callable(mode):
            try:
                mode = mode()
            except Exception:
                return None
        return _MODES.get(mode, mode) if isinstance(mode, str) else None

    async def fire(self, event: HookEvent, data: Mapping[str, Any]) -> HookOutcome:
        """Run every hook of ``event`` whose matcher matches ``data``, in parallel, and
        merge their results. The hooks' input is ``data`` plus ``session_id``,
        ``transcript_path``, ``cwd``, ``permission_mode`` and ``hook_event_name``. Never
        raises except on cancellation; failures are reported through ``on_notice``, and
        when the runner itself fails on a PreToolUse event the outcome denies the call
        (fail closed: the hooks that might have denied it were not asked)."""
        specs = [s for s in self._by_event.get(event, ()) if s.matches(data)]
        if not specs:
            return HookOutcome(event)
        seen: set[str] = set()
        unique: list[HookSpec] = []
        for spec in specs:  # the same command twice for one event runs once
            if isinstance(spec.handler, str):
                if spec.handler in seen:
                    continue
                seen.add(spec.handler)
            unique.append(spec)
        try:
            payload: dict[str, Any] = {
                "session_id": self.session_id,
                "transcript_path": self.transcript_path,
                "cwd": self.cwd,
            }
            mode = self._mode()
            if mode is not None:
                payload["permission_mode"] = mode
            payload["hook_event_name"] = event
            payload.update(data)
            encoded = encode_json(payload, _json)
            env = self._environment_for_hooks() if any(s.is_command for s in unique) else None
            coros = [run_hook(s, event, payload, encoded, self.cwd, env) for s in unique]
            runs = [await coros[0]] if len(coros) == 1 else list(await asyncio.gather(*coros))
            outcome = merge(event, runs)
        except Exception as exc:  # a bug: never fail the run, and never let a gate open by it
            text = f"{event} hooks failed: {exception_text(exc)}"
            if event == "PreToolUse":  # the hooks that might have denied the call were not asked
                outcome = HookOutcome(event, blocked=True, decision="deny", reason=text, errors=[text])
            else:
                outcome = HookOutcome(event, errors=[text])
        self._report(outcome)
        return outcome

    def _report(self, outcome: HookOutcome) -> None:
        notices = [HookNotice(outcome.event, "error", text) for text in outcome.errors]
        notices += [HookNotice(outcome.event, "message", text) for text in outcome.messages]
        if outcome.stop:
            notices.append(HookNotice(outcome.event, "stopped", f"{outcome.event} hook stopped the run: {outcome.stop_reason or 'no reason given'}"))
        for notice in notices:
            try:
                self.on_notice(notice)
            except Exception:
                log.exception("hook notice handler failed")

    # -- tools ---------------------------------------------------------------------------
    def _request_stop(self, context: Any, reason: str | None) -> None:
        self._stops[id(context)] = reason

    def stop_requested(self, info: TurnInfo) -> bool:
        """A ``stop_when`` predicate: True (once) after a tool hook said ``"continue": false``."""
        key = id(info.conversation)
        if key not in self._stops:
            return False
        del self._stops[key]
        return True

    async def pre_tool_use(self, call: ToolCallInfo) -> HookVerdict | None:
        """Run PreToolUse hooks for ``call``; their verdict, or None when none had an opinion.

        Exit code 2 (stderr as the reason) and ``decision: block`` deny; ``"continue":
        false`` stops (also recorded for :meth:`stop_requested`). Additional context is
        kept and added to the call's result by :meth:`after_tool_call` (for a call the
        gate blocks, to the next request).
        """
        if not self.has("PreToolUse"):
            return None
        outcome = await self.fire(
            "PreToolUse",
            {"tool_name": call.tool.name, "tool_input": _hook_input(call.args), "tool_use_id": call.tool_call.id},
        )
        if outcome.context:
            self._tool_context[call.tool_call.id] = outcome.context
        if outcome.stop:
            self._request_stop(call.conversation, outcome.stop_reason)
        if outcome.decision is None and outcome.updated_input is None and not outcome.stop:
            return None
        return HookVerdict(
            decision=outcome.decision,
            reason=outcome.reason,
            updated_input=None if outcome.updated_input is None else _tool_input(outcome.updated_input, call.args),
            stop=outcome.stop,
            stop_reason=outcome.stop_reason,
        )

    def _context_of_blocked(self, info: ToolCallInfo) -> None:
        """A blocked call gets no result to carry its PreToolUse hooks' additional
        context: it goes to the next request instead (``Conversation.add_context``)."""
        context = self._tool_context.pop(info.tool_call.id, None)
        if context:
            info.conversation.add_context(CONTEXT_TEXT.format(event="PreToolUse", text=context))

    async def before_tool_call(self, info: ToolCallInfo) -> BeforeToolCallResult | None:
        """``before_tool_call`` for an agent without a permission engine: a deny blocks
        the call with the hooks' reason (a stop also ends the run after the batch, with
        ``end_reason == "denied"``, as through the permission engine); ``updatedInput`` is validated
        against the tool's schema and replaces the arguments; ``ask`` blocks (there is no
        one to ask; use :meth:`gate` to hand it to an approval step)."""
        return await self._gate(info, None)

    def gate(
        self, then: Callable[[ToolCallInfo], Any] | None
    ) -> Callable[[ToolCallInfo], Awaitable[BeforeToolCallResult | None]]:
        """A ``before_tool_call`` running the hooks, then ``then`` (another
        ``before_tool_call``, e.g. a permission gate) on the possibly updated arguments, so
        an ``updatedInput`` is checked again. A hook's deny wins; ``allow`` does not skip
        ``then``."""

        async def hooked(info: ToolCallInfo) -> BeforeToolCallResult | None:
            return await self._gate(info, then)

        return hooked

    async def _gate(
        self, info: ToolCallInfo, then: Callable[[ToolCallInfo], Any] | None
    ) -> BeforeToolCallResult | None:
        verdict = await self.pre_tool_use(info)
        updated = False
        if verdict is not None:
            reason = verdict.reason or "no reason given"
            if verdict.stop:
                self._context_of_blocked(info)
                return BeforeToolCallResult.blocked(STOPPED_TEXT.format(reason=verdict.stop_reason or reason), stop=True)
            if verdict.decision == "deny":
                self._context_of_blocked(info)
                return BeforeToolCallResult.blocked(DENIED_TEXT.format(reason=reason))
            if verdict.updated_input is not None:
                args, problem = validate_arguments(info.tool.name, info.tool.parameters, verdict.updated_input)
                if problem is not None:
                    self._context_of_blocked(info)
                    return BeforeToolCallResult.blocked(f"A PreToolUse hook's updatedInput is invalid: {problem}")
                info = dataclasses.replace(info, args=args)
                updated = True
            if verdict.decision == "ask" and then is None:
                self._context_of_blocked(info)
                return BeforeToolCallResult.blocked(NO_APPROVER_TEXT.format(reason=reason))
        if then is not None:
            result = then(info)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                if result.block:
                    self._context_of_blocked(info)
                    return result  # type: ignore[no-any-return]
                if result.args is not None:
                    return result  # type: ignore[no-any-return]
        return BeforeToolCallResult.with_args(info.args) if updated else None

    async def after_tool_call(self, info: ToolCallInfo, result: ToolResult) -> AfterToolCallResult | None:
        """``after_tool_call``: PostToolUse (PostToolUseFailure for an error result).
        A block (exit 2 or ``decision: block``) adds its reason to the result the model
        reads; additional context (also a PreToolUse hook's) is added after it."""
        additions: list[str] = []
        earlier = self._tool_context.pop(info.tool_call.id, None)
        if earlier:
            additions.append(CONTEXT_TEXT.format(event="PreToolUse", text=earlier))
        event: HookEvent = "PostToolUseFailure" if result.is_error else "PostToolUse"
        if self.has(event):
            data: dict[str, Any] = {
                "tool_name": info.tool.name,
                "tool_input": _hook_input(info.args),
                "tool_use_id": info.tool_call.id,
            }
            if result.is_error:
                data["error"] = result.text
                data["is_interrupt"] = False
            else:
                response: dict[str, Any] = {"content": result.text, "is_error": False}
                if result.details is not None:
                    response["details"] = result.details
                data["tool_response"] = response
            outcome = await self.fire(event, data)
            if outcome.stop:
                self._request_stop(info.conversation, outcome.stop_reason)
            if outcome.blocked:
                additions.append(FEEDBACK_TEXT.format(event=event, text=outcome.reason))
            if outcome.context:
                additions.append(CONTEXT_TEXT.format(event=event, text=outcome.context))
        if not additions:
            return None
        blocks: list[TextContent | ImageContent | DocumentContent] = list(result.blocks)
        for text in additions:
            blocks.append(TextContent(text=f"\n\n{text}" if blocks else text))
        return AfterToolCallResult(content=blocks)

    async def middleware(self, call: ToolCallInfo, next: Callable[[dict[str, Any]], Awaitable[ToolResult]]) -> ToolResult:
        """A tool middleware: an exception from a tool becomes its error result (the text
        the loop would give it), so PostToolUseFailure hooks see failures that raise too."""
        try:
            return await next(call.args)
        except TimeoutError:
            raise
        except Exception as exc:
            return ToolResult.error(exception_text(exc))

    # -- stopping --------------------------------------------------------------------------
    def _continuations(self, messages: Sequence[Message]) -> int:
        """Stop-hook continuations since the last prompt that did not come from a Stop hook."""
        count = 0
        for message in reversed(messages):
            if type(message) is not UserMessage:
                continue
            if any(message is m for m in self._injected):
                count += 1
                continue
            break
        return count

    async def _stop(self, event: HookEvent, info: StopInfo, extra: dict[str, Any]) -> StopDecision | None:
        if not self.has(event):
            return None
        continued = self._continuations(info.conversation.messages)
        data = {"stop_hook_active": continued > 0, "last_assistant_message": info.message.text, **extra}
        outcome = await self.fire(event, data)
        if outcome.stop or not outcome.blocked:
            return None
        if continued >= self.max_stop_continuations:
            self._report(
                HookOutcome(
                    event,
                    errors=[f"{event} hooks continued the run {continued} times in a row; letting it end"],
                )
            )
            return None
        message = UserMessage(content=FEEDBACK_TEXT.format(event=event, text=outcome.reason))
        self._injected.append(message)
        return StopDecision.continue_with(message)

    async def on_stop(self, info: StopInfo) -> StopDecision | None:
        """``on_stop``: Stop hooks. A block (exit 2 or ``decision: block``) continues the
        run with the reason as a user message (``Stop hook feedback: <reason>``); on the
        next Stop, ``stop_hook_active`` is true."""
        return await self._stop("Stop", info, {})

    async def subagent_stop(
        self,
        info: StopInfo,
        *,
        agent_id: str = "",
        agent_type: str = "",
        agent_transcript_path: str = "",
    ) -> StopDecision | None:
        """SubagentStop hooks for a subagent about to finish (like :meth:`on_stop`; the
        input adds ``agent_id``, ``agent_type`` and ``agent_transcript_path``)."""
        extra = {"agent_id": agent_id, "agent_type": agent_type, "agent_transcript_path": agent_transcript_path}
        return await self._stop("SubagentStop", info, extra)

    def subagent_on_stop(
        self, *, agent_id: str = "", agent_type: str = "", agent_transcript_path: str = ""
    ) -> Callable[[StopInfo], Awaitable[StopDecision | None]]:
        """An ``on_stop`` for a subagent's loop that runs SubagentStop hooks."""

        async def on_stop(info: StopInfo) -> StopDecision | None:
            return await self.subagent_stop(
                info, agent_id=agent_id, agent_type=agent_type, agent_transcript_path=agent_transcript_path
            )

        return on_stop

    # -- compaction ----------------------------------------------------------------------
    async def pre_compact(self, request: PreCompact) -> None:
        """The context manager's ``pre_compact`` hook: PreCompact hooks (``trigger``
        manual or auto, ``custom_instructions``). They cannot veto a compaction."""
        if self.has("PreCompact"):
            trigger = "manual" if request.reason == "manual" else "auto"
            await self.fire("PreCompact", {"trigger": trigger, "custom_instructions": request.instructions or ""})
        return None

    # -- prompts and the session ---------------------------------------------------------
    async def user_prompt_submit(self, prompt: str) -> PromptCheck:
        """Run UserPromptSubmit hooks on ``prompt``. A block (exit 2, ``decision: block``
        or ``"continue": false``) rejects it; context (``additionalContext`` or plain
        stdout) is to be added to it."""
        outcome = await self.fire("UserPromptSubmit", {"prompt": prompt})
        blocked = outcome.blocked or outcome.stop
        reason = outcome.reason or outcome.stop_reason
        return PromptCheck(blocked, reason if blocked else None, outcome.context, outcome)

    async def prompt(
        self,
        agent: Agent[Any],
        text: str,
        *,
        images: Sequence[ImageContent] | None = None,
        attachments: Sequence[ImageContent | DocumentContent | AudioContent] | None = None,
    ) -> RunResult:
        """``agent.prompt(text)`` through UserPromptSubmit hooks. A blocked prompt is not
        sent: the result has no messages, ``end_reason`` ``stop_guard`` and the error
        ``Prompt blocked by a UserPromptSubmit hook: <reason>``. Hook context (and
        SessionStart context not delivered yet) goes with the prompt as extra text;
        ``attachments`` (documents, recordings, images) go after it, then ``images``."""
        check = await self.user_prompt_submit(text)
        if check.blocked:
            error = PROMPT_BLOCKED_TEXT.format(reason=check.reason or "no reason given")
            return RunResult(messages=[], summary=RunSummary(end_reason="stop_guard", error=error))
        extra = self._session_context
        self._session_context = []
        if check.context:
            extra = [*extra, ("UserPromptSubmit", check.context)]
        if not extra and not attachments:
            return await agent.prompt(text, images=images)
        content: list[TextContent | ImageContent | DocumentContent | AudioContent] = [TextContent(text=text)]
        content.extend(TextContent(text="\n\n" + CONTEXT_TEXT.format(event=e, text=t)) for e, t in extra)
        if attachments:
            content.extend(attachments)
        if images:
            content.extend(images)
        return await agent.prompt(UserMessage(content=content))

    async def session_start(self, source: str = "startup") -> HookOutcome:
        """SessionStart hooks (``source``: startup, resume, clear, compact). Their context
        (``additionalContext`` or plain stdout) goes with the next :meth:`prompt`."""
        outcome = await self.fire("SessionStart", {"source": source})
        if outcome.context:
            self._session_context.append(("SessionStart", outcome.context))
        return outcome

    async def session_end(self, reason: str = "other") -> HookOutcome:
        """SessionEnd hooks (``reason``: clear, logout, prompt_input_exit, other), after
        waiting for Notification hooks still running."""
        await self.drain()
        return await self.fire("SessionEnd", {"reason": reason})

    async def notification(
        self, message: str, *, notification_type: str = "permission_prompt", title: str | None = None
    ) -> HookOutcome:
        """Notification hooks (``message``, ``notification_type``, optional ``title``)."""
        data: dict[str, Any] = {"message": message, "notification_type": notification_type}
        if title is not None:
            data["title"] = title
        return await self.fire("Notification", data)

    def notify(self, message: str, *, notification_type: str = "permission_prompt", title: str | None = None) -> None:
        """Start Notification hooks in the background (they never delay the caller)."""
        if not self.has("Notification"):
            return
        task = asyncio.get_running_loop().create_task(
            self.notification(message, notification_type=notification_type, title=title)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for background Notification hooks."""
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # -- attaching -----------------------------------------------------------------------
    def agent_config(self) -> dict[str, Any]:
        """``LoopConfig`` fields attaching these hooks to an agent:
        ``Agent(model, tools=tools, **runner.agent_config())``."""
        return {
            "before_tool_call": self.before_tool_call,
            "after_tool_call": self.after_tool_call,
            "on_stop": self.on_stop,
            "stop_when": (self.stop_requested,),
            "middlewares": (self.middleware,),
        }

    def __repr__(self) -> str:
        counts = ", ".join(f"{e}={len(s)}" for e, s in self._by_event.items())
        return f"HookRunner({counts})"
