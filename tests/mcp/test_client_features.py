"""Client features of issue 43 against server-everything: tasks, URL elicitation
required (-32042), server logs, completion, paginated listings."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import ToolResultMessage
from ketch.mcp import LOG_LEVELS
from ketch.mcp import ElicitationRequest
from ketch.mcp import ElicitationResponse
from ketch.mcp import ServerLog
from ketch.mcp import load_mcp_json
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

PAGED = Path(__file__).with_name("paged_server.py")


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


async def test_url_elicitation_required_is_presented_then_the_call_retried(manager_factory: Any, everything: Any) -> None:
    asked: list[ElicitationRequest] = []

    async def elicit(request: ElicitationRequest) -> ElicitationResponse:
        asked.append(request)
        return ElicitationResponse("accept")

    manager = manager_factory(everything, elicitation=elicit)
    result = await manager.call(
        "e", "trigger-url-elicitation", {"url": "https://example.com/connect", "errorPath": True, "elicitationId": "x1"}
    )
    # the -32042 error's URL went to the user; the call was made again and went through
    assert [(r.mode, r.url, r.message) for r in asked] == [
        ("url", "https://modelcontextprotocol.io", "Open this link to satisfy the prerequisite, then retry the request."),
        ("url", "https://example.com/connect", "Please open the link to complete this action."),
    ]
    assert not result.is_error
    assert result.text.startswith("✅ User completed the URL elicitation flow.\nElicitation ID: x1\n")


async def test_a_declined_url_elicitation_names_the_url_to_the_model(manager_factory: Any, everything_stdio: Any) -> None:
    async def elicit(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse("decline")

    manager = manager_factory(everything_stdio, elicitation=elicit)
    result = await manager.call("e", "trigger-url-elicitation", {"url": "https://example.com/connect", "errorPath": True})
    assert result.is_error
    assert result.text == (
        "MCP server 'e': 'trigger-url-elicitation' needs you to open https://modelcontextprotocol.io "
        "(Open this link to satisfy the prerequisite, then retry the request.); the user chose decline"
    )


async def test_listings_follow_every_page(manager_factory: Any) -> None:
    paged = load_mcp_json({"mcpServers": {"p": {"command": sys.executable, "args": [str(PAGED)]}}})
    manager = manager_factory(paged)
    model = ScriptedModel([reply(tool_call("mcp__p__list_resources"), tool_call("mcp__p__list_prompts")), "done"])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    await agent.prompt("go")
    assert [t.name for t in agent.tools] == [
        *[f"mcp__p__tool_{n}" for n in "abcdef"],
        "mcp__p__list_resources",
        "mcp__p__read_resource",
        "mcp__p__list_prompts",
        "mcp__p__get_prompt",
    ]
    resources, prompts = results(agent.messages)
    assert resources.content[0].text.splitlines() == [f"res://{n}  resource {n}" for n in "abcdef"]  # type: ignore[union-attr]
    assert prompts.content[0].text.splitlines() == [f"prompt_{n}()" for n in "abcdef"]  # type: ignore[union-attr]


async def test_completion_of_a_prompt_argument(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    assert await manager.complete("e", "department", "S", prompt="completable-prompt") == ["Sales", "Support"]
    assert await manager.complete(
        "e", "name", "", prompt="completable-prompt", context={"department": "Engineering"}
    ) == ["Alice", "Bob", "Charlie"]
    assert await manager.complete("e", "resourceId", "1", resource="demo://resource/dynamic/text/{resourceId}") == ["1"]


async def test_aborting_a_task_call_cancels_the_task_on_the_server(manager_factory: Any, everything_stdio: Any) -> None:
    from ketch.mcp import _tasks  # to ask the server for the task's state afterwards

    manager = manager_factory(everything_stdio)
    model = ScriptedModel([reply(tool_call("mcp__e__simulate-research-query", {"topic": "tides"})), "never"])
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
    state = await _tasks.get(manager._get("e").client.session, task_id)
    assert state.status == "cancelled"


async def test_server_log_messages_reach_on_log_from_the_chosen_level(manager_factory: Any, everything: Any) -> None:
    got: list[ServerLog] = []
    arrived = asyncio.Event()

    def on_log(record: ServerLog) -> None:
        got.append(record)
        arrived.set()

    manager = manager_factory(everything, log_level="debug", on_log=on_log)
    await manager.call("e", "toggle-simulated-logging")  # one message at once, at a random level
    await asyncio.wait_for(arrived.wait(), 30)
    first = got[0]
    assert (first.server, first.level in LOG_LEVELS) == ("e", True)
    # the server's own text names the level ("Info-level message", "Alert level-message")
    assert str(first.data).lower().replace("-", " ").startswith(f"{first.level} level message")


async def test_without_on_log_server_logs_go_to_the_ketch_mcp_logger(
    manager_factory: Any, everything_stdio: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ketch.mcp")
    arrived = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "level message" in record.getMessage() or "level-message" in record.getMessage():
                arrived.set()

    handler = Seen()
    logging.getLogger("ketch.mcp").addHandler(handler)
    try:
        manager = manager_factory(everything_stdio, log_level="debug")
        await manager.call("e", "toggle-simulated-logging")
        await asyncio.wait_for(arrived.wait(), 30)
    finally:
        logging.getLogger("ketch.mcp").removeHandler(handler)
    (record,) = [r for r in caplog.records if "level message" in r.getMessage() or "level-message" in r.getMessage()][:1]
    assert record.getMessage().startswith("MCP server 'e'")
