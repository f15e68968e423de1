"""Tool execution: the per-call pipeline and the batch scheduler.

Per call: unknown tool -> circuit breaker -> malformed arguments -> ``prepare_arguments``
-> schema validation -> ``before_tool_call`` -> middlewares (outermost first) -> execute
(with timeout, cancellation and progress) -> ``after_tool_call``. Every failure becomes
an error :class:`ToolResult`; nothing raises out of a call. An exception's text is
:func:`ketch.llm.errors.exception_text` (``Type: message``), as for model errors.

The scheduler starts calls in order (FIFO, never skipping ahead): a concurrency-safe
call starts while nothing unsafe runs and the limit allows; an unsafe (sequential) call
starts only when nothing else runs, and nothing behind it starts before it ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from ..llm.errors import exception_text
from ..llm.messages import AssistantMessage, ToolCall
from ..llm.signal import AbortSignal
from .config import (
    AfterToolCallResult,
    BeforeToolCallResult,
    Conversation,
    LoopConfig,
    ToolCallInfo,
)
from .tool import Tool, ToolContext, ToolResult, to_tool_result
from .validate import malformed_arguments_message, validate_arguments

__all__ = [
    "ABORTED_TEXT",
    "BLOCKED_TEXT",
    "SKIPPED_TEXT",
    "CallOutcome",
    "ToolRunner",
    "truncated_call_text",
]

BLOCKED_TEXT = "Tool execution was blocked"
SKIPPED_TEXT = "Skipped due to queued user message."
INTERRUPTED_TEXT = "Cancelled due to queued user message."
ABORTED_TEXT = "Tool execution was aborted."


def truncated_call_text(name: str) -> str:
    """The result text for a call that was not run because the response hit the output limit."""
    return (
        f'Tool call "{name}" was not executed: the response hit the output token limit, so its '
        "arguments may be truncated. Re-issue the tool call with complete arguments."
    )


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class CallOutcome:
    """A finished call: its result, whether it counts as a failure, and its duration;
    ``note`` and ``stop`` are what ``before_tool_call`` said (its note; block and stop)."""

    __slots__ = ("call", "counts_as_failure", "duration", "note", "result", "stop")

    def __init__(
        self,
        call: ToolCall,
        result: ToolResult,
        duration: float,
        counts_as_failure: bool,
        note: Any = None,
        stop: bool = False,
    ) -> None:
        self.call = call
        self.result = result
        self.duration = duration
        self.counts_as_failure = counts_as_failure
        self.note = note
        self.stop = stop


class ToolRunner:
    """Runs the calls of one assistant message; lives for one run (holds the breaker)."""

    __slots__ = ("_failures", "config")

    def __init__(self, config: LoopConfig[Any]) -> None:
        self.config = config
        self._failures: dict[str, int] = {}

    def is_sequential(self, call: ToolCall, tools: dict[str, Tool]) -> bool:
        """Whether ``call`` must run alone."""
        if self.config.tool_execution == "sequential":
            return True
        tool = tools.get(call.name)
        if tool is None:
            return False
        try:
            return tool.is_sequential(call.arguments)
        except Exception:
            return True

    def record(self, outcome: CallOutcome) -> None:
        """Update the consecutive-failure breaker with a finished call."""
        if self.config.max_tool_errors is None:
            return
        name = outcome.call.name
        if outcome.counts_as_failure:
            self._failures[name] = self._failures.get(name, 0) + 1
        elif not outcome.result.is_error:
            self._failures.pop(name, None)

    async def run_call(
        self,
        call: ToolCall,
        tools: dict[str, Tool],
        assistant: AssistantMessage,
        conversation: Conversation,
        signal: AbortSignal,
        report: Callable[[Any], Awaitable[None]],
    ) -> CallOutcome:
        """Run one call through the whole pipeline. Never raises (except cancellation)."""
        started = time.monotonic()
        result, failure, verdict = await self._pipeline(call, tools, assistant, conversation, signal, report)
        duration = time.monotonic() - started
        if verdict is None:
            return CallOutcome(call, result, duration, failure)
        return CallOutcome(call, result, duration, failure, verdict.note, verdict.block and verdict.stop)

    async def _pipeline(
        self,
        call: ToolCall,
        tools: dict[str, Tool],
        assistant: AssistantMessage,
        conversation: Conversation,
        signal: AbortSignal,
        report: Callable[[Any], Awaitable[None]],
    ) -> tuple[ToolResult, bool, BeforeToolCallResult | None]:
        """The call's result, whether it counts as a failure, and the ``before_tool_call``
        verdict (None when there was none)."""
        cfg = self.config
        tool = tools.get(call.name)
        if tool is None:
            return ToolResult.error(f'Tool "{call.name}" not found'), True, None
        limit = cfg.max_tool_errors
        if limit is not None and self._failures.get(call.name, 0) >= limit:
            return ToolResult.error(f'Tool "{call.name}" disabled after {limit} consecutive errors'), False, None
        if call.parse_error is not None:
            text = malformed_arguments_message(call.name, call.parse_error, call.raw_arguments or "")
            return ToolResult.error(text), True, None
        verdict: BeforeToolCallResult | None = None
        try:
            args = call.arguments
            if tool.prepare_arguments is not None:
                args = await _maybe_await(tool.prepare_arguments(args))
            args, problem = validate_arguments(tool.name, tool.parameters, args)
            if problem is not None:
                return ToolResult.error(problem), True, None
            if cfg.before_tool_call is not None:
                info = ToolCallInfo(call, tool, args, assistant, conversation, signal)
                verdict = await _maybe_await(cfg.before_tool_call(info))
                if verdict is not None:
                    if verdict.block:
                        blocked = ToolResult.error(verdict.reason or BLOCKED_TEXT)
                        blocked.terminate = verdict.stop
                        return blocked, False, verdict
                    if verdict.args is not None:
                        args = verdict.args
        except Exception as exc:
            return ToolResult.error(exception_text(exc)), True, verdict

        try:
            result = await self._execute(tool, call, args, assistant, conversation, signal, report)
            failure = result.is_error
        except TimeoutError:
            timeout = tool.timeout if tool.timeout is not None else cfg.tool_timeout
            return ToolResult.error(f'Tool "{call.name}" timed out after {timeout:g}s'), True, verdict
        except Exception as exc:
            return ToolResult.error(exception_text(exc)), True, verdict

        if cfg.after_tool_call is not None:
            try:
                info = ToolCallInfo(call, tool, args, assistant, conversation, signal)
                override: AfterToolCallResult | None = await _maybe_await(cfg.after_tool_call(info, result))
            except Exception as exc:
                return ToolResult.error(exception_text(exc)), True, verdict
            if override is not None:
                result = ToolResult(
                    content=override.content if override.content is not None else result.content,
                    details=result.details if override.details is msgspec.UNSET else override.details,
                    is_error=override.is_error if override.is_error is not None else result.is_error,
                    terminate=override.terminate if override.terminate is not None else result.terminate,
                )
        return result, failure, verdict

    async def _execute(
        self,
        tool: Tool,
        call: ToolCall,
        args: dict[str, Any],
        assistant: AssistantMessage,
        conversation: Conversation,
        signal: AbortSignal,
        report: Callable[[Any], Awaitable[None]],
    ) -> ToolResult:
        ctx = ToolContext(
            call_id=call.id,
            tool_name=tool.name,
            signal=signal,
            report=report,
            messages=conversation.messages,
            assistant_message=assistant,
            deps=self.config.deps,
        )

        async def innermost(final_args: dict[str, Any]) -> ToolResult:
            return to_tool_result(await tool.execute(final_args, ctx))

        run: Callable[[dict[str, Any]], Awaitable[ToolResult]] = innermost
        middlewares = self.config.middlewares
        if middlewares:
            info = ToolCallInfo(call, tool, args, assistant, conversation, signal)
            for mw in reversed(middlewares):
                run = _wrap(mw, info, run)
        timeout = tool.timeout if tool.timeout is not None else self.config.tool_timeout
        if timeout is None:
            return await run(args)
        async with asyncio.timeout(timeout):
            return await run(args)


def _wrap(
    mw: Any, info: ToolCallInfo, inner: Callable[[dict[str, Any]], Awaitable[ToolResult]]
) -> Callable[[dict[str, Any]], Awaitable[ToolResult]]:
    async def call(args: dict[str, Any]) -> ToolResult:
        current = info if args is info.args else dataclasses.replace(info, args=args)
        return to_tool_result(await mw(current, inner))

    return call


StopKind = Literal["aborted", "skipped", "interrupted"]


def stopped_result(kind: StopKind) -> ToolResult:
    """The error result for a call that was aborted, skipped, or cancelled by steering."""
    text = {"aborted": ABORTED_TEXT, "skipped": SKIPPED_TEXT, "interrupted": INTERRUPTED_TEXT}[kind]
    return ToolResult.error(text)
