"""The compaction summary: its message type, the cut point, and the summarisation prompt."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from typing import ClassVar

import msgspec

from ..llm import AssistantMessage
from ..llm import CustomMessage
from ..llm import HostedToolResult
from ..llm import ImageContent
from ..llm import Message
from ..llm import TextContent
from ..llm import ThinkingContent
from ..llm import ToolCall
from ..llm import ToolResultMessage
from ..llm import UserMessage
from ..llm import hosted_result_text
from ..llm._tokens import estimate_message_tokens


class ContextSummary(CustomMessage, tag="context_summary"):
    """A checkpoint that replaces the older part of a transcript.

    The model sees it as a user message wrapped in ``<context-summary>`` tags, followed
    by the lists of files read and modified in the summarised part.
    """

    resets_usage_anchor: ClassVar[bool] = True

    summary: str
    tokens_before: int = 0
    messages_summarized: int = 0
    read_files: list[str] = msgspec.field(default_factory=list)
    modified_files: list[str] = msgspec.field(default_factory=list)

    def to_llm(self) -> UserMessage:
        """The user-side message the model sees."""
        text = f"<context-summary>\n{self.summary}\n</context-summary>"
        if self.read_files:
            text += "\n\n<read-files>\n" + "\n".join(self.read_files) + "\n</read-files>"
        if self.modified_files:
            text += "\n\n<modified-files>\n" + "\n".join(self.modified_files) + "\n</modified-files>"
        return UserMessage(content=[TextContent(text=text)], timestamp=self.timestamp)


SUMMARY_SYSTEM_PROMPT = (
    "You write checkpoints of agent conversations so that work can continue after the older "
    "messages are removed. Do NOT continue the conversation and do NOT call tools. Think inside "
    "<analysis> tags if you need to, then write the checkpoint inside <summary> tags."
)

_TEMPLATE = """Write a checkpoint of the conversation above with exactly these sections:

## Goal
What the user wants, in their words where possible.

## Constraints & Preferences
Requirements, preferences and rules the user stated.

## Progress
### Done
- [x] completed items
### In Progress
- [ ] items being worked on
### Blocked
- items blocked, and why

## Key Decisions
- **[Decision]**: rationale

## Next Steps
1. numbered next actions

## Critical Context
Facts, values, names, errors and paths needed to continue."""

_UPDATE = """The <previous-summary> above is the checkpoint of everything before this conversation part.
Update it with the new conversation: PRESERVE every still-relevant item of the previous summary,
UPDATE progress and next steps, ADD new decisions and context. Use the same sections."""

_SPLIT = """The last part of the conversation is the beginning of a turn that is still in progress.
Add a final section "## Turn Context (split turn)" summarising what that turn asked for and did so far."""


class Cut(msgspec.Struct, kw_only=True, frozen=True):
    """Where a transcript is cut: ``messages[:index]`` is summarised, the rest kept.

    ``turn_start`` is the index of the user message that began the turn containing
    ``index`` when the cut splits a turn, else None.
    """

    index: int
    turn_start: int | None


def _starts_turn(m: Message) -> bool:
    return type(m) is UserMessage or isinstance(m, ContextSummary)


def find_cut(messages: Sequence[Message], keep_tokens: int) -> Cut | None:
    """Find the cut that keeps about ``keep_tokens`` of the newest messages.

    The cut never separates a tool call from its results: it moves forward past tool
    results (and the assistant message whose calls they answer). Returns None when
    nothing would be summarised.
    """
    total = 0
    index = len(messages)
    while index > 0 and total < keep_tokens:
        index -= 1
        total += estimate_message_tokens(messages[index])
    if total < keep_tokens:
        return None
    n = len(messages)
    while index < n and type(messages[index]) is ToolResultMessage:
        index += 1
    if index >= n or index == 0:
        return None
    if _starts_turn(messages[index]):
        return Cut(index=index, turn_start=None)
    start = index
    while start > 0 and not _starts_turn(messages[start]):
        start -= 1
    if start == 0 and not _starts_turn(messages[0]):
        return Cut(index=index, turn_start=None)
    return Cut(index=index, turn_start=start)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _arg_text(args: dict[str, Any]) -> str:
    parts = []
    for key, value in args.items():
        shown = value if isinstance(value, str) else msgspec.json.encode(value).decode()
        parts.append(f"{key}={_clip(shown, 100)}")
    return ", ".join(parts)


def serialize(messages: Sequence[Message]) -> str:
    """The conversation as plain text for the summariser (images become a note)."""
    lines: list[str] = []
    for m in messages:
        if isinstance(m, ContextSummary):
            lines.append(f"[Previous summary]: {m.summary}")
        elif type(m) is UserMessage:
            assert isinstance(m, UserMessage)
            lines.append("[User]: " + _blocks_text(m.content))
        elif type(m) is AssistantMessage:
            assert isinstance(m, AssistantMessage)
            for b in m.content:
                if type(b) is ThinkingContent and b.thinking:
                    lines.append(f"[Assistant thinking]: {_clip(b.thinking, 2000)}")
                elif type(b) is HostedToolResult:
                    lines.append(f"[Hosted {b.kind}]: {_clip(hosted_result_text(b), 2000)}")
            text = m.text
            if text:
                lines.append(f"[Assistant]: {text}")
            calls = m.tool_calls
            if calls:
                lines.append("[Assistant tool calls]: " + "; ".join(f"{c.name}({_arg_text(c.args)})" for c in calls))
        elif type(m) is ToolResultMessage:
            assert isinstance(m, ToolResultMessage)
            prefix = "[Tool error]" if m.is_error else "[Tool result]"
            lines.append(f"{prefix} {m.tool_name}: " + _clip(_blocks_text(m.content), 500))
    return "\n\n".join(lines)


def _blocks_text(content: Any) -> str:
    parts = []
    for b in content:
        if type(b) is TextContent:
            parts.append(b.text)
        elif type(b) is ImageContent:
            parts.append("[image omitted for summarization]")
    return "\n".join(parts)


def summary_prompt(
    history: Sequence[Message],
    previous: ContextSummary | None,
    turn_prefix: Sequence[Message],
    instructions: str | None,
) -> str:
    """The user prompt for the summary call."""
    parts = ["<conversation>\n" + serialize([*history, *turn_prefix]) + "\n</conversation>"]
    if previous is not None:
        parts.append(f"<previous-summary>\n{previous.summary}\n</previous-summary>")
        parts.append(_UPDATE)
    parts.append(_TEMPLATE)
    if turn_prefix:
        parts.append(_SPLIT)
    if instructions:
        parts.append(f"Additional instructions: {instructions}")
    return "\n\n".join(parts)


def extract_summary(text: str) -> str:
    """The ``<summary>`` part of the model's answer (the whole text without analysis otherwise)."""
    start = text.find("<summary>")
    end = text.rfind("</summary>")
    if start != -1 and end > start:
        return text[start + len("<summary>") : end].strip()
    a_start, a_end = text.find("<analysis>"), text.find("</analysis>")
    if a_start != -1 and a_end > a_start:
        text = text[:a_start] + text[a_end + len("</analysis>") :]
    return text.strip()


_READ_TOOLS = frozenset({"read"})
_WRITE_TOOLS = frozenset({"write", "edit"})


def file_lists(messages: Sequence[Message], previous: ContextSummary | None) -> tuple[list[str], list[str]]:
    """Files read (and never modified) and files modified in ``messages``, merged with ``previous``."""
    read: set[str] = set(previous.read_files) if previous else set()
    modified: set[str] = set(previous.modified_files) if previous else set()
    for m in messages:
        if type(m) is not AssistantMessage:
            continue
        assert isinstance(m, AssistantMessage)
        for call in m.content:
            if type(call) is not ToolCall:
                continue
            path = call.args.get("path") or call.args.get("file_path")
            if not isinstance(path, str):
                continue
            if call.name in _WRITE_TOOLS:
                modified.add(path)
            elif call.name in _READ_TOOLS:
                read.add(path)
    return sorted(read - modified), sorted(modified)


def now() -> float:
    """The current time (for summary timestamps)."""
    return time.time()
