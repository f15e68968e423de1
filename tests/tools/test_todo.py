"""The ``todo_write`` tool (``ketch.tools.Todo``): each call replaces the list, the result
shows it, bad items are refused with the value named, and it runs in every permission mode."""

from __future__ import annotations

from typing import Any

import pytest

from ketch import Agent
from ketch.llm import ToolResultMessage
from ketch.permissions import PermissionEngine
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import Todo
from ketch.tools import TodoItem


def results(model: ScriptedModel, request: int) -> list[tuple[str, bool]]:
    return [
        ("".join(b.text for b in m.content if hasattr(b, "text")), m.is_error)
        for m in model.requests[request].messages
        if isinstance(m, ToolResultMessage)
    ]


def call(todos: Any, id: str) -> Any:
    return reply(tool_call("todo_write", {"todos": todos}, id=id))


async def test_each_call_replaces_the_list_and_the_result_shows_it() -> None:
    seen: list[list[TodoItem]] = []
    model = ScriptedModel(
        [
            call(
                [
                    {"content": "Read the parser", "status": "in_progress", "priority": "high"},
                    {"content": "Fix the bug", "status": "pending"},
                ],
                "t1",
            ),
            call(
                [
                    {"content": "Read the parser", "status": "completed", "priority": "high"},
                    {"content": "Fix the bug", "status": "in_progress"},
                    {"content": "Run the tests", "status": "pending", "priority": "low"},
                ],
                "t2",
            ),
            "Working on it.",
        ]
    )
    todo = Todo(on_update=seen.append)
    agent = Agent(model, capabilities=[todo])
    events: list[Any] = []
    agent.subscribe(lambda e: events.append(e) if e.type == "tool_execution_end" else None)
    result = await agent.prompt("Fix the parser bug.")
    assert result.end_reason == "stop"
    assert model.requests[0].tool_names == ["todo_write"]
    assert results(model, 2) == [
        ("To-do list updated (0 of 2 completed):\n[>] Read the parser\n[ ] Fix the bug", False),
        ("To-do list updated (1 of 3 completed):\n[x] Read the parser\n[>] Fix the bug\n[ ] Run the tests", False),
    ]
    assert todo.items == [
        TodoItem(content="Read the parser", status="completed", priority="high"),
        TodoItem(content="Fix the bug", status="in_progress", priority="medium"),
        TodoItem(content="Run the tests", status="pending", priority="low"),
    ]
    assert [len(items) for items in seen] == [2, 3]
    assert events[1].result.details == {
        "todos": [
            {"content": "Read the parser", "status": "completed", "priority": "high"},
            {"content": "Fix the bug", "status": "in_progress", "priority": "medium"},
            {"content": "Run the tests", "status": "pending", "priority": "low"},
        ]
    }


async def test_a_bad_item_is_refused_naming_the_value_and_the_list_is_kept() -> None:
    good = [{"content": "Step one", "status": "pending"}]
    model = ScriptedModel(
        [
            call(good, "t1"),
            call([{"content": "Step one", "status": "done"}], "t2"),
            call([{"content": "Step one", "status": "pending", "owner": "me"}], "t3"),
            call([{"content": "  ", "status": "pending"}], "t4"),
            call([], "t5"),
            "Done.",
        ]
    )
    todo = Todo()
    await Agent(model, capabilities=[todo]).prompt("Plan.")
    got = results(model, 5)
    assert got[0] == ("To-do list updated (0 of 1 completed):\n[ ] Step one", False)
    assert [error for _, error in got[1:4]] == [True, True, True]
    # the tool's schema names the bad value (the loop checks it before the call)
    assert got[1][0].startswith(
        'Validation failed for tool "todo_write":\n  - todos[0].status: must be one of ["pending", "in_progress", "completed"]\n'
    )
    assert got[2][0].splitlines()[1].startswith("  - todos[0]") and "owner" in got[2][0].splitlines()[1]
    assert got[3][0] == "todos[0].content must be a non-empty string, got '  '. Give the whole list again."
    assert got[4] == ("The to-do list is empty.", False)
    assert todo.items == []


@pytest.mark.parametrize("mode", ["default", "plan"])
async def test_it_runs_without_asking_in_every_mode(tmp_path: Any, mode: str) -> None:
    asked: list[str] = []

    async def approver(request: Any) -> Any:
        asked.append(request.tool_name)
        raise AssertionError("todo_write must not ask")

    engine = PermissionEngine(mode, root=tmp_path, approver=approver)
    model = ScriptedModel([call([{"content": "Look around", "status": "in_progress"}], "t1"), "Planned."])
    await Agent(model, capabilities=[Todo()], before_tool_call=engine.before_tool_call).prompt("Plan it.")
    assert results(model, 1) == [("To-do list updated (0 of 1 completed):\n[>] Look around", False)]
    assert asked == []
