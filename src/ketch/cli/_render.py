"""Terminal rendering of agent events for the interactive session (rich).

Text streams as Markdown one block at a time: a paragraph, list or fenced code block is
printed once it is complete (a blank line outside a code fence), the rest when the text
block ends. Thinking is shown dimmed, collapsed to its first line unless expanded.
Tool calls show their arguments, results their first lines, and edits their diff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ..llm import AssistantMessage
from ..llm import Usage
from ..llm import UserMessage
from ..llm._messages import message_text
from ..loop import AgentEvent
from ..loop import CompactionEnd
from ._subagents import subagent_line

if TYPE_CHECKING:
    from rich.console import Console


_RESULT_LINES = 6
_COMPACTION_REASONS = {"threshold": "automatic", "overflow": "context overflow", "manual": "manual"}
_ARG_CHARS = 160


def format_tokens(n: int) -> str:
    """A token count in a few characters: ``950``, ``12.3k``, ``200k``, ``1M``, ``1.5M``
    (the status line, the compaction notice and the models table alike)."""
    if n < 1000:
        return str(n)
    if n < 999_950:
        return f"{round(n / 1000, 1):g}k"
    return f"{round(n / 1_000_000, 1):g}M"


def _clip(text: str, limit: int) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TODO_MARKS = {"pending": "☐", "in_progress": "◐", "completed": "☒"}
"""The terminal's mark for each status of a to-do item."""


def tool_summary(name: str, args: dict[str, Any]) -> str:
    """A one-line view of a call: ``bash(ls -la)``, ``edit(src/a.py)``, ``todo_write(3 items)``,
    else ``name(k=v, …)``."""
    todos = args.get("todos")
    if name == "todo_write" and isinstance(todos, list):
        return f"todo_write({len(todos)} item{'s' if len(todos) != 1 else ''})"
    for key in ("command", "path", "pattern"):
        value = args.get(key)
        if isinstance(value, str):
            rest = [f"{k}={_clip(repr(v), 40)}" for k, v in args.items() if k != key and k not in ("content", "old_string", "new_string")]
            inner = _clip(value, _ARG_CHARS) + (", " + ", ".join(rest) if rest else "")
            return f"{name}({inner})"
    inner = ", ".join(f"{k}={_clip(repr(v), 60)}" for k, v in args.items())
    return f"{name}({_clip(inner, _ARG_CHARS)})"


def output_limit(model: Any, max_tokens: int | None) -> int | None:
    """The output token limit of a model call: ``max_tokens`` when set, the embedded
    model's default for ``local``, else None (the provider's own)."""
    if max_tokens:
        return max_tokens
    if getattr(model, "provider", None) == "local":
        from ..llm._providers.local import DEFAULT_MAX_TOKENS

        return DEFAULT_MAX_TOKENS
    return None


def cut_off_note(limit: int | None) -> str:
    """What is said when the final answer ended at the output token limit (stop reason
    ``length``): ``the answer was cut off at the output token limit (512 tokens) …``."""
    at = f" ({limit} tokens)" if limit else ""
    return (
        f"the answer was cut off at the output token limit{at} and may be incomplete; "
        "raise the limit with --max-tokens (max_tokens in the config)"
    )


def compaction_note(event: CompactionEnd) -> str:
    """The announcement of a compaction: ``⇣ context compacted (automatic): 182 → 92 tokens
    · 3 messages summarised · $0.0012``, or why it failed."""
    how = _COMPACTION_REASONS.get(event.reason, event.reason)
    if event.error:
        return f"✗ context compaction ({how}) failed: {event.error}"
    n = event.messages_summarized
    return (
        f"⇣ context compacted ({how}): {format_tokens(event.tokens_before)} → "
        f"{format_tokens(event.tokens_after)} tokens · {n} message{'s' if n != 1 else ''} summarised · "
        f"${event.cost:.4f}"
    )


class MarkdownStream:
    """Splits streamed Markdown text into complete blocks.

    :meth:`feed` returns the blocks completed by a delta (text up to the last blank line
    that is not inside a fenced code block); :meth:`finish` returns the rest.
    """

    __slots__ = ("_buffer", "_fenced", "_scan")

    def __init__(self) -> None:
        self._buffer = ""
        self._scan = 0
        self._fenced = False

    def feed(self, delta: str) -> str:
        """Add ``delta``; the completed blocks (possibly "")."""
        self._buffer += delta
        cut = -1
        buffer = self._buffer
        pos = self._scan
        while True:
            nl = buffer.find("\n", pos)
            if nl < 0:
                break
            line = buffer[pos:nl]
            if line.lstrip().startswith(("```", "~~~")):
                self._fenced = not self._fenced
            elif not self._fenced and not line.strip() and nl > 0:
                cut = nl + 1
            pos = nl + 1
        self._scan = pos
        if cut < 0:
            return ""
        done, self._buffer = buffer[:cut], buffer[cut:]
        self._scan = pos - cut
        return done

    def finish(self) -> str:
        """Everything not yet returned; resets the stream."""
        rest, self._buffer, self._scan, self._fenced = self._buffer, "", 0, False
        return rest


class Status:
    """What the agent is doing, for the spinner: a label and when it started."""

    __slots__ = ("label", "since")

    def __init__(self) -> None:
        self.label: str | None = None
        self.since = time.monotonic()

    def set(self, label: str | None) -> None:
        """Show ``label`` (None: idle); the elapsed time restarts when it changes."""
        if label != self.label:
            self.label = label
            self.since = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the label was set."""
        return time.monotonic() - self.since


class EventRenderer:
    """Prints agent events to a rich console and keeps the live counters.

    ``usage`` sums the session's model calls; ``streamed_chars`` counts output of the
    message being streamed (shown as an estimate until its usage arrives);
    ``compactions`` and ``compaction_cost`` count the context summaries and their cost.
    ``limit`` gives the output token limit named when a run's answer is cut off by it.
    """

    def __init__(self, console: Console, limit: Callable[[], int | None] | None = None) -> None:
        self.console = console
        self.limit = limit
        self.last_stop: str | None = None
        self.status = Status()
        self.usage = Usage()
        self.turns = 0
        self.streamed_chars = 0
        self.compactions = 0
        self.compaction_cost = 0.0
        self.expand_thinking = False
        self.last_thinking = ""
        self._markdown = MarkdownStream()
        self._thinking: list[str] = []
        self._thinking_line = ""
        self._prompt_seen = False

    # -- output helpers -------------------------------------------------------------------
    def _markdown_block(self, text: str) -> None:
        if not text.strip():
            return
        from rich.markdown import Markdown

        self.console.print(Markdown(text.strip("\n")))

    def note(self, text: str, style: str = "dim") -> None:
        """Print one line of session information."""
        self.console.print(text, style=style, markup=False, highlight=False)

    def print_diff(self, diff: str) -> None:
        """Print a unified diff, coloured."""
        from rich.text import Text

        out = Text()
        for line in diff.splitlines():
            if line.startswith(("+++", "---")):
                style = "bold"
            elif line.startswith("+"):
                style = "green"
            elif line.startswith("-"):
                style = "red"
            elif line.startswith("@@"):
                style = "cyan"
            else:
                style = "dim"
            out.append("    " + line + "\n", style=style)
        self.console.print(out, end="")

    def replay(self, messages: Sequence[Any], *, keep: int = 200) -> None:
        """Print a resumed conversation as it was shown: each prompt (``› …``), the
        answers' text, each tool call and the first lines of its result; only the last
        ``keep`` messages, after a line counting the ones left out."""
        from ..llm import ToolResultMessage

        if len(messages) > keep:
            skipped = len(messages) - keep
            self.note(f"… {skipped} earlier message{'s' if skipped != 1 else ''} not shown")
            messages = messages[-keep:]
        for message in messages:
            kind = type(message)
            if kind is UserMessage:
                self.note("› " + message_text(message).replace("\n", "\n  "), "bold")
            elif kind is AssistantMessage:
                self._markdown_block(message.text)
                for call in message.tool_calls:
                    self.note(f"⏺ {tool_summary(call.name, call.args)}", "bold")
                if message.stop_reason == "error":
                    self.note(f"✗ {message.error_message or 'model error'}", "red")
            elif kind is ToolResultMessage:
                lines = message.text.rstrip("\n").splitlines() or ["(no output)"]
                style = "red" if message.is_error else "dim"
                self.note("  ⎿ " + _clip(lines[0], 200), style)
                if len(lines) > 1:
                    self.note(f"    … {len(lines) - 1} more line{'s' if len(lines) != 2 else ''}", style)
            else:
                text = message_text(message) or str(getattr(message, "summary", "") or "")
                if text:
                    self.note(f"[{message.role}] {_clip(text, 200)}")
        self.note("─" * 20 + " resumed " + "─" * 20)

    def show_last_thinking(self) -> None:
        """Print the last thinking block in full (after expanding)."""
        if self.last_thinking:
            self.note(self.last_thinking, "dim italic")

    # -- events ---------------------------------------------------------------------------
    def __call__(self, event: AgentEvent) -> None:
        match event.type:
            case "message_update":
                self._update(event.event)
            case "message_start":
                message = event.message
                if type(message) is AssistantMessage:
                    self.status.set("Working")  # "Thinking" once a thinking block streams
                    self.streamed_chars = 0
                elif type(message) is UserMessage:
                    if self._prompt_seen:
                        self.note(f"↳ delivered: {message_text(message)}")
                    self._prompt_seen = True
            case "agent_start":
                self._prompt_seen = False
                self.last_stop = None
            case "message_end":
                message = event.message
                if type(message) is AssistantMessage:
                    self._assistant_end(message)
            case "tool_execution_start":
                self.note(f"⏺ {tool_summary(event.tool_name, event.args)}", "bold")
                self.status.set(f"Running {event.tool_name}")
            case "tool_execution_update":
                nested = subagent_line(event.partial, lambda name, args: tool_summary(name, args))
                if nested is not None:
                    self.note(nested)
            case "tool_execution_end":
                self._tool_end(event)
            case "retry":
                self.note(
                    f"↻ retrying ({event.attempt}/{event.max_attempts}) in {event.delay:.1f}s: {event.error_message}",
                    "yellow",
                )
            case "compaction_start":
                self.status.set("Compacting context")
            case "compaction_end":
                self._compaction_end(event)
            case "agent_end":
                self._agent_end(event)

    def _compaction_end(self, event: Any) -> None:
        self.compactions += 1
        self.compaction_cost += event.cost
        self.note(compaction_note(event), "yellow" if event.error else "cyan")

    def _update(self, ev: Any) -> None:
        match ev.type:
            case "text_delta":
                self.streamed_chars += len(ev.delta)
                self.status.set("Writing")
                self._markdown_block(self._markdown.feed(ev.delta))
            case "text_end":
                self._markdown_block(self._markdown.finish())
            case "thinking_start":
                self._thinking = []
                self._thinking_line = ""
                self.status.set("Thinking")
            case "thinking_delta":
                self.streamed_chars += len(ev.delta)
                self._thinking.append(ev.delta)
                if self.expand_thinking:
                    self._thinking_line += ev.delta
                    if "\n" in self._thinking_line:
                        done, _, self._thinking_line = self._thinking_line.rpartition("\n")
                        self.note(done, "dim italic")
            case "thinking_end":
                text = "".join(self._thinking)
                self.last_thinking = text
                if self.expand_thinking:
                    if self._thinking_line:
                        self.note(self._thinking_line, "dim italic")
                elif text.strip():
                    first = text.strip().splitlines()[0]
                    self.note(f"✻ {_clip(first, 100)}  ({len(text)} chars, Ctrl-T expands)", "dim italic")
                self._thinking = []
                self._thinking_line = ""
            case "toolcall_start":
                self.status.set("Preparing a tool call")
            case "hosted_tool":
                self._hosted(ev.block)

    def _hosted(self, block: Any) -> None:
        """A provider-hosted tool's call (its kind and first text input) or result (the
        first line of its summary)."""
        if block.type == "hosted_tool_call":
            detail = next((v for v in block.input.values() if isinstance(v, str) and v), "")
            self.note(f"⏺ {block.kind} (hosted)" + (f": {_clip(detail, 100)}" if detail else ""), "cyan")
            return
        lines = block.output.splitlines() or ["(no output)"]
        more = f"  … {len(lines) - 1} more lines" if len(lines) > 1 else ""
        self.note(f"  ⎿ {_clip(lines[0], 200)}{more}", "red" if block.is_error else "dim")

    def _assistant_end(self, message: AssistantMessage) -> None:
        self._markdown_block(self._markdown.finish())
        self.usage.add(message.usage)
        self.turns += 1
        self.streamed_chars = 0
        self.last_stop = message.stop_reason
        if message.stop_reason == "error":
            self.note(f"✗ {message.error_message or 'model error'}", "red")
        elif message.stop_reason == "aborted":
            self.note("✗ interrupted", "yellow")

    def _tool_end(self, event: Any) -> None:
        result = event.result
        details = result.details
        diff = details.get("diff") if isinstance(details, dict) else None
        text = result.text.rstrip("\n")
        todos = details.get("todos") if isinstance(details, dict) else None
        if event.tool_name == "todo_write" and not event.is_error and isinstance(todos, list):
            self._todo_list(todos)
        elif event.is_error:
            lines = text.splitlines() or ["(error)"]
            for i, line in enumerate(lines[:_RESULT_LINES]):
                self.note(("  ⎿ " if i == 0 else "    ") + _clip(line, 200), "red")
        elif isinstance(diff, str) and diff:
            summary = text.splitlines()[0] if text else ""
            self.note(f"  ⎿ {summary}")
            self.print_diff(diff)
        else:
            lines = text.splitlines() or ["(no output)"]
            shown = lines[:_RESULT_LINES]
            for i, line in enumerate(shown):
                self.note(("  ⎿ " if i == 0 else "    ") + _clip(line, 200))
            if len(lines) > len(shown):
                self.note(f"    … {len(lines) - len(shown)} more lines")
        self.status.set("Working")

    def _todo_list(self, todos: list[Any]) -> None:
        """The to-do list (``ketch.tools.Todo``) as a checklist: done items dim, the
        current one bold."""
        if not todos:
            self.note("  ⎿ (the to-do list is empty)", "dim")
        for i, item in enumerate(todos):
            status = item.get("status") if isinstance(item, dict) else None
            content = str(item.get("content", "")) if isinstance(item, dict) else str(item)
            mark = _TODO_MARKS.get(str(status), "☐")
            style = {"completed": "dim", "in_progress": "bold"}.get(str(status), "")
            self.note(("  ⎿ " if i == 0 else "    ") + f"{mark} {_clip(content, 200)}", style)

    def _agent_end(self, event: Any) -> None:
        summary = event.summary
        self.status.set(None)
        if self.last_stop == "length":
            self.note(f"⚠ {cut_off_note(self.limit() if self.limit is not None else None)}", "yellow")
        self.last_stop = None
        parts = [
            f"{summary.turns} turn{'s' if summary.turns != 1 else ''}",
            f"{format_tokens(summary.usage.total_tokens)} tokens",
            f"${summary.usage.cost.total:.4f}",
            f"{summary.duration:.1f}s",
        ]
        reason = summary.end_reason
        if reason != "stop":
            label = {"max_turns": "stopped: max turns", "max_budget": "stopped: budget", "aborted": "aborted"}.get(
                reason, f"ended: {reason}"
            )
            if summary.error and reason not in ("aborted",):
                label += f" ({summary.error})"
            parts.insert(0, label)
        self.note("· " + " · ".join(parts))
