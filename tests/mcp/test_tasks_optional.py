"""A tool whose task support is optional (``execution.taskSupport: "optional"``) against a
server with task support (task_server.mjs, the TypeScript SDK's task store over stdio):
called as a task when the server takes task-augmented calls (create, status as progress,
result), handed to the model when it outlives the wait and fetched later, cancelled on
the server when the run is aborted; called directly when the server does not take them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import ToolResultMessage
from ketch.mcp import MCPServerConfig
from ketch.mcp import load_mcp_json
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

TASK_SERVER = Path(__file__).with_name("task_server.mjs")
SDK = Path(__file__).resolve().parents[2] / ".cache/npm/node_modules/@modelcontextprotocol/sdk/package.json"


def _tasker(*args: str) -> dict[str, MCPServerConfig]:
    if not SDK.is_file():  # it comes with server-everything (scripts/test.sh installs it)
        pytest.fail(f"{SDK.parent} is missing: run scripts/test.sh", pytrace=False)
    return load_mcp_json({"mcpServers": {"t": {"command": "node", "args": [str(TASK_SERVER), *args]}}})


@pytest.fixture
def tasker() -> dict[str, MCPServerConfig]:
    return _tasker()


def results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


async def test_an_optional_task_tool_is_called_as_a_task(manager_factory: Any, tasker: Any) -> None:
    manager = manager_factory(tasker)
    model = ScriptedModel([reply(tool_call("mcp__t__research", {"topic": "tides"})), "done"])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    progress: list[Any] = []
    agent.subscribe(lambda e: progress.append(e.partial) if e.type == "tool_execution_update" else None)
    await agent.prompt("go")
    (done,) = results(agent.messages)
    assert (done.is_error, done.content[0].text) == (False, "report on tides (task)")  # type: ignore[union-attr]
    assert done.details is not None
    task_id = done.details["task_id"]
    assert task_id and {p["task_id"] for p in progress} == {task_id}
    assert progress[0]["status"] == "working"
    assert {p["status"] for p in progress} <= {"working", "completed"}


async def test_an_optional_task_tool_is_called_directly_when_the_server_takes_no_task_calls(manager_factory: Any) -> None:
    manager = manager_factory(_tasker("--no-task-calls"))
    result = await manager.call("t", "research", {"topic": "tides"})
    assert (result.is_error, result.text, result.details) == (False, "report on tides (task)", None)


async def test_a_long_optional_task_outlives_the_turn_and_is_fetched_later(manager_factory: Any, tasker: Any) -> None:
    manager = manager_factory(tasker, task_wait=0)
    model = ScriptedModel([reply(tool_call("mcp__t__research", {"topic": "tides", "hold": True})), "later"])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    await agent.prompt("go")
    (handed,) = results(agent.messages)
    assert not handed.is_error and handed.details is not None
    task_id = handed.details["task_id"]
    assert handed.content[0].text == (  # type: ignore[union-attr]
        f"'research' is still running on the MCP server 't' as task {task_id} (working: gathering). "
        f"Call mcp__t__task_result with task_id {task_id!r} to wait for its result."
    )
    assert (await manager.call("t", "release")).text == "released 1"
    manager.task_wait = 120
    model.add(reply(tool_call("mcp__t__task_result", {"task_id": task_id})))
    model.add("done")
    await agent.prompt("and?")
    fetched = results(agent.messages)[-1]
    assert (fetched.is_error, fetched.content[0].text) == (False, "report on tides (task)")  # type: ignore[union-attr]


async def test_aborting_an_optional_task_call_cancels_the_task_on_the_server(manager_factory: Any, tasker: Any) -> None:
    from ketch.mcp import _tasks  # to ask the server for the task's state afterwards

    manager = manager_factory(tasker)
    model = ScriptedModel([reply(tool_call("mcp__t__research", {"topic": "tides", "hold": True})), "never"])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    started: list[str] = []

    def on_event(event: Any) -> None:
        if event.type == "tool_execution_update" and not started:
            started.append(event.partial["task_id"])
            agent.abort()

    agent.subscribe(on_event)
    await agent.prompt("go")
    (task_id,) = started
    (aborted,) = results(agent.messages)
    assert aborted.is_error
    state = await _tasks.get(manager._get("t").client.session, task_id)
    assert state.status == "cancelled"
    # the held work, released now, does not overwrite the cancellation
    assert (await manager.call("t", "release")).text == "released 1"
    state = await _tasks.get(manager._get("t").client.session, task_id)
    assert state.status == "cancelled"
