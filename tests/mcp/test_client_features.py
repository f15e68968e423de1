"""Client features of issue 43 against server-everything: tasks, URL elicitation
required (-32042), server logs, completion, paginated listings."""

from __future__ import annotations

from typing import Any

from ketch import Agent
from ketch.llm import ToolResultMessage
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


async def test_a_tool_that_requires_tasks_is_called_as_a_task(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    progress: list[Any] = []
    model = ScriptedModel([reply(tool_call("mcp__e__simulate-research-query", {"topic": "tides"})), "done"])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    agent.subscribe(lambda e: progress.append(e) if e.type == "tool_execution_update" else None)
    await agent.prompt("go")
    (done,) = results(agent.messages)
    assert not done.is_error, done.content
    assert done.content[0].text.startswith("# Research Report: tides\n")  # type: ignore[union-attr]
    assert done.details is not None and done.details["task_id"]
    states = [e.partial for e in progress]  # each status the task reached, as progress
    assert {s["task_id"] for s in states} == {done.details["task_id"]}
    assert states[0]["status"] == "working"
    assert {s["status"] for s in states} <= {"working", "completed"}


async def test_a_task_that_outlives_the_wait_is_handed_to_the_model_then_fetched(
    manager_factory: Any, everything_stdio: Any
) -> None:
    manager = manager_factory(everything_stdio, task_wait=0)
    model = ScriptedModel([reply(tool_call("mcp__e__simulate-research-query", {"topic": "tides"}))])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    model.add("waiting")
    await agent.prompt("go")
    (handed,) = results(agent.messages)
    assert handed.details is not None
    task_id = handed.details["task_id"]
    assert handed.content[0].text == (  # type: ignore[union-attr]
        f"'simulate-research-query' is still running on the MCP server 'e' as task {task_id} "
        f"({handed.details['status']}{': ' + handed.details['status_message'] if handed.details['status_message'] else ''}). "
        f"Call mcp__e__task_result with task_id {task_id!r} to wait for its result."
    )
    assert "mcp__e__task_result" in [t.name for t in agent.tools]
    manager.task_wait = 120  # now wait for it
    model.add(reply(tool_call("mcp__e__task_result", {"task_id": task_id})))
    model.add("done")
    await agent.prompt("and?")
    fetched = results(agent.messages)[-1]
    assert fetched.content[0].text.startswith("# Research Report: tides\n")  # type: ignore[union-attr]
    unknown = await manager.call("e", "task_result", {"task_id": "nope"})
    assert unknown.is_error
