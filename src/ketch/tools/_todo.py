"""The to-do list: a ``todo_write`` tool the model keeps its plan in, as a capability.

``Agent(model, capabilities=[Todo()])`` gives the model one tool, ``todo_write``, whose
argument is the whole list: ``{"todos": [{"content": ..., "status": "pending" |
"in_progress" | "completed", "priority": "high" | "medium" | "low"}, ...]}``
(``priority`` defaults to ``medium``). Each call replaces the list; the call changes
nothing outside the agent, so it is read-only for the permission modes (it runs in
``plan`` mode too).

The current list is :attr:`Todo.items`; ``on_update`` is called with it after every
call. The tool result's ``details`` is ``{"todos": [...]}`` (the items as objects), so
anything that watches the run's events sees each new list: ``ketch acp`` sends it to
the editor as a ``plan`` update, the terminal shows it as a checklist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import Literal

import msgspec

from ..loop import Capability
from ..loop import Contribution
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult

__all__ = ["STATUSES", "Todo", "TodoItem"]

STATUSES = ("pending", "in_progress", "completed")
"""A to-do item's statuses, in the order work goes through them."""

PRIORITIES = ("high", "medium", "low")

MARKS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}
"""How the tool's result shows each status."""

_DESCRIPTION = """Keep a to-do list for a task with several steps, and show it to the \
user. Give the WHOLE list every time: it replaces the previous one. Each item has \
`content` (what to do, imperative: "Run the tests"), `status` (pending, in_progress, \
completed) and optionally `priority` (high, medium, low; default medium). Write the list \
when a task needs three or more steps, mark an item in_progress before you start it \
(one at a time) and completed as soon as it is done; drop items that no longer apply. \
Skip it for a simple one-step request."""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The complete to-do list, in order.",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1, "description": "What to do."},
                    "status": {"type": "string", "enum": list(STATUSES)},
                    "priority": {"type": "string", "enum": list(PRIORITIES)},
                },
                "required": ["content", "status"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["todos"],
    "additionalProperties": False,
}


class TodoItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of the list: what to do, its status and priority."""

    content: str
    status: Literal["pending", "in_progress", "completed"]
    priority: Literal["high", "medium", "low"] = "medium"


def parse_todos(value: Any) -> list[TodoItem]:
    """The items of a ``todo_write`` call's ``todos``; ``ValueError`` naming the first bad
    value and what is allowed."""
    if not isinstance(value, list):
        raise ValueError(f"todos must be an array of items, got {type(value).__name__}")
    items: list[TodoItem] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise ValueError(f"todos[{i}] must be an object with content and status, got {type(entry).__name__}")
        unknown = sorted(set(entry) - {"content", "status", "priority"})
        if unknown:
            raise ValueError(f"todos[{i}]: unknown key {unknown[0]!r}; an item has content, status and priority")
        content = entry.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"todos[{i}].content must be a non-empty string, got {content!r}")
        status = entry.get("status")
        if status not in STATUSES:
            raise ValueError(f"todos[{i}].status {status!r} is not one of {', '.join(STATUSES)}")
        priority = entry.get("priority", "medium")
        if priority not in PRIORITIES:
            raise ValueError(f"todos[{i}].priority {priority!r} is not one of {', '.join(PRIORITIES)}")
        items.append(TodoItem(content=content.strip(), status=status, priority=priority))
    return items


def todo_text(items: list[TodoItem]) -> str:
    """The list as the tool's result shows it: a count, then one line per item."""
    if not items:
        return "The to-do list is empty."
    done = sum(1 for item in items if item.status == "completed")
    lines = [f"To-do list updated ({done} of {len(items)} completed):"]
    lines += [f"{MARKS[item.status]} {item.content}" for item in items]
    return "\n".join(lines)


class Todo(Capability):
    """The ``todo_write`` tool and the list it keeps (see the module docstring).

    ``on_update(items)`` (optional) is called after each call that changed the list,
    with the new list; an exception from it is not the run's (the call still succeeds).
    """

    name = "todo"

    def __init__(self, *, on_update: Callable[[list[TodoItem]], Any] | None = None) -> None:
        self.items: list[TodoItem] = []
        self.on_update = on_update
        self._tool = Tool(
            "todo_write",
            _DESCRIPTION,
            _PARAMETERS,
            self._execute,
            label="Update the to-do list",
            read_only=True,
            sequential=True,
        )

    def contribute(self) -> Contribution:
        """The ``todo_write`` tool."""
        return Contribution(tools=(self._tool,))

    async def _execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        try:
            items = parse_todos(args.get("todos"))
        except ValueError as exc:
            return ToolResult.error(f"{exc}. Give the whole list again.")
        self.items = items
        if self.on_update is not None:
            try:
                self.on_update(list(items))
            except Exception:  # the application's callback; the call itself succeeded
                pass
        return ToolResult(content=todo_text(items), details={"todos": [msgspec.to_builtins(item) for item in items]})

    def __repr__(self) -> str:
        return f"Todo(items={len(self.items)})"
