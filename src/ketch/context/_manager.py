"""The default context manager, :class:`Compactor`: projection, summary compaction, overflow recovery.

Before every request the loop asks :meth:`Compactor.manage`. Under the threshold
(window minus a reserve) nothing happens. Over it, cheap transient strategies run first
(clear old tool results, trim long old text); if the request is still too large, an LLM
writes a structured summary of the older part of the transcript, which is committed:
the transcript becomes the summary plus the most recent messages, and later requests
reuse it instead of summarising again.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Literal

from ..llm import Message
from ..llm import Model
from ..llm import Request
from ..llm import StreamOptions
from ..llm import UserMessage
from ..llm import complete
from ..llm._tokens import ContextMeter
from ..llm._tokens import estimate_message_tokens
from ..loop import CompactionEnd
from ..loop import CompactionStart
from ..loop import ContextRequest
from ..loop import Projection
from ._strategies import ClearedView
from ._strategies import trim_long_text
from ._summary import SUMMARY_SYSTEM_PROMPT
from ._summary import ContextSummary
from ._summary import extract_summary
from ._summary import file_lists
from ._summary import find_cut
from ._summary import summary_prompt


def default_reserve(window: int) -> int:
    """Tokens kept free for the response: ``clamp(0.13 * window, 4096, 16384)``, and never
    more than half of a small window."""
    return min(max(4096, min(16384, int(0.13 * window))), window // 2)


@dataclass(frozen=True, slots=True)
class PreCompact:
    """Argument of the ``pre_compact`` hook."""

    reason: Literal["threshold", "overflow", "manual"]
    messages: Sequence[Message]
    tokens: int
    instructions: str | None


PreCompactHook = Callable[[PreCompact], "bool | str | Awaitable[bool | str | None] | None"]
"""Return False to veto the compaction, a string to add instructions, None to proceed."""


class _Estimate:
    """Running token estimate of an append-only transcript (O(new messages) per call)."""

    __slots__ = ("_first", "_last", "_seen", "_total")

    def __init__(self) -> None:
        self._seen = 0
        self._total = 0
        self._first: Message | None = None
        self._last: Message | None = None

    def of(self, messages: Sequence[Message]) -> int:
        seen = self._seen
        if seen and (len(messages) < seen or messages[0] is not self._first or messages[seen - 1] is not self._last):
            seen = 0
            self._total = 0
        for m in messages[seen:]:
            self._total += estimate_message_tokens(m)
        self._seen = len(messages)
        if messages:
            self._first, self._last = messages[0], messages[-1]
        return self._total


class Compactor:
    """The default :class:`~ketch.loop.ContextManager`: keeps requests inside the model's context window.

    ``window`` defaults to the model's (``model.context_window``); ``reserve`` to
    :func:`default_reserve`; ``keep_recent_tokens`` (the newest part kept verbatim by a
    summary) to ``clamp(threshold / 4, 2000, 20000)``. ``summary_model`` writes the
    summaries (default: the agent's model, always with thinking off).
    ``max_failures`` consecutive summary failures open a circuit breaker: automatic
    compaction then falls back to the cheap strategies only.
    """

    def __init__(
        self,
        *,
        window: int | None = None,
        reserve: int | None = None,
        keep_recent_tokens: int | None = None,
        keep_tool_results: int = 5,
        summary_model: Model | None = None,
        summary_max_tokens: int | None = None,
        pre_compact: PreCompactHook | None = None,
        max_failures: int = 3,
    ) -> None:
        self.window = window
        self.reserve = reserve
        self.keep_recent_tokens = keep_recent_tokens
        self.keep_tool_results = keep_tool_results
        self.summary_model = summary_model
        self.summary_max_tokens = summary_max_tokens
        self.pre_compact = pre_compact
        self.max_failures = max_failures
        self.failures = 0
        self.summary_calls = 0
        self._estimate = _Estimate()
        self._meter = ContextMeter()
        self._cleared = ClearedView(keep_tool_results)
        self._projected = False

    def limits(self, model: Model) -> tuple[int, int]:
        """``(window, threshold)`` for ``model``."""
        window = self.window or model.context_window
        reserve = self.reserve if self.reserve is not None else default_reserve(window)
        return window, max(1, window - reserve)

    def tokens(self, messages: Sequence[Message], window: int) -> int:
        """Tokens the full transcript would take in a request."""
        anchored = self._meter.measure(messages, window).tokens
        if not self._projected:
            return anchored
        # The last request sent a projected view, so its reported size undercounts the transcript.
        return max(anchored, self._estimate.of(messages))

    async def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
        """Project, compact or recover ``messages`` for ``request`` (see the class docstring)."""
        window, threshold = self.limits(request.model)
        if request.reason == "manual":
            async for item in self._compact(messages, request, "manual", window, threshold):
                yield item
            return
        if request.reason == "overflow":
            async for item in self._compact(messages, request, "overflow", window, threshold):
                yield item
            return
        tokens = self.tokens(messages, window)
        if tokens <= threshold:
            self._projected = False
            yield Projection(messages=messages)
            return
        view = self._cleared.update(messages)
        saved = max(0, self._estimate.of(messages) - self._cleared.tokens)
        if tokens - saved > threshold:
            view, more = trim_long_text(view)
            saved += more
        else:
            view = list(view)
        if tokens - saved <= threshold or self.failures >= self.max_failures:
            self._projected = True
            yield Projection(messages=view)
            return
        committed = False
        async for item in self._compact(messages, request, "threshold", window, threshold):
            if type(item) is Projection and item.commit is not None:
                committed = True
            if type(item) is Projection and item.commit is None:
                item = Projection(messages=view)
            yield item
        self._projected = not committed

    async def _compact(
        self,
        messages: list[Message],
        request: ContextRequest,
        reason: Literal["threshold", "overflow", "manual"],
        window: int,
        threshold: int,
    ) -> AsyncIterator[Any]:
        tokens = self.tokens(messages, window) if reason != "overflow" else max(
            self._estimate.of(messages), self._meter.measure(messages, window).tokens
        )
        instructions = request.instructions
        if self.pre_compact is not None:
            verdict = self.pre_compact(PreCompact(reason, messages, tokens, instructions))
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is False:
                yield Projection(messages=messages)
                return
            if isinstance(verdict, str):
                instructions = f"{instructions}\n{verdict}" if instructions else verdict
        keep = self.keep_recent_tokens or min(max(2000, min(20000, threshold // 4)), threshold // 2)
        if reason == "overflow":
            # The provider measured more than we estimate: keep a quarter of what is there.
            keep = min(keep, max(1, tokens // 4))
        cut = find_cut(messages, keep)
        if cut is None:
            yield Projection(messages=messages)
            return
        previous = messages[0] if isinstance(messages[0], ContextSummary) else None
        summarized_end = cut.turn_start if cut.turn_start is not None else cut.index
        history = [m for m in messages[:summarized_end] if not isinstance(m, ContextSummary)]
        prefix = (
            [m for m in messages[cut.turn_start : cut.index] if not isinstance(m, ContextSummary)]
            if cut.turn_start is not None
            else []
        )
        yield CompactionStart(reason=reason, tokens_before=tokens)
        model = self.summary_model or request.model
        prompt = summary_prompt(history, previous, prefix, instructions)
        options = StreamOptions(
            max_tokens=self.summary_max_tokens or max(1024, int(0.8 * (window - threshold))),
            thinking="off",
            signal=request.signal,
        )
        self.summary_calls += 1
        answer = await complete(
            model, Request(system_prompt=SUMMARY_SYSTEM_PROMPT, messages=[UserMessage(content=prompt)]), options
        )
        cost = answer.usage.cost.total
        used = answer.usage
        text = extract_summary(answer.text) if answer.stop_reason not in ("error", "aborted") else ""
        if not text:
            self.failures += 1
            error = answer.error_message or "the summary model returned no text"
            yield CompactionEnd(
                reason=reason,
                tokens_before=tokens,
                tokens_after=tokens,
                messages_summarized=0,
                cost=cost,
                error=error,
                usage=used,
            )
            yield Projection(messages=messages)
            return
        self.failures = 0
        read, modified = file_lists(messages[: cut.index], previous)
        summary = ContextSummary(
            summary=text,
            tokens_before=tokens,
            messages_summarized=cut.index,
            read_files=read,
            modified_files=modified,
        )
        kept = messages[cut.index :]
        new = [summary, *kept]
        after = sum(estimate_message_tokens(m) for m in new)
        yield CompactionEnd(
            reason=reason,
            tokens_before=tokens,
            tokens_after=after,
            messages_summarized=cut.index,
            cost=cost,
            usage=used,
        )
        yield Projection(messages=new, commit=new)


def summary_of(messages: Sequence[Message]) -> ContextSummary | None:
    """The compaction summary a transcript starts with, if any."""
    return messages[0] if messages and isinstance(messages[0], ContextSummary) else None
