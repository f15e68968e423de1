"""The MCP client against real servers, through a real Agent with scripted tool calls.

mcp-server-time (stdio), server-everything (stdio and streamable HTTP), and
changing_server.py (list_changed, cancellation seen by the server).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from mcphelp import child_processes
from mcphelp import server_pids

from ketch import Agent
from ketch.llm import ImageContent
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.loop import Tool
from ketch.mcp import NO_ELICITATION
from ketch.mcp import ElicitationRequest
from ketch.mcp import ElicitationResponse
from ketch.mcp import MCPManager
from ketch.mcp import ServerStatus
from ketch.mcp import load_mcp_json
from ketch.permissions import NO_APPROVER
from ketch.permissions import PermissionEngine
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def texts(message: ToolResultMessage) -> list[str]:
    return [b.text for b in message.content if isinstance(b, TextContent)]


async def run(manager: MCPManager, *calls: Any, final: str = "done") -> tuple[Agent[None], ScriptedModel, list[Any]]:
    """A real agent whose scripted model makes ``calls`` (one turn each), then answers."""
    model = ScriptedModel([*(reply(c) for c in calls), final])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    events: list[Any] = []
    agent.subscribe(events.append)
    await agent.prompt("go")
    return agent, model, events


# -- mcp-server-time (stdio) ---------------------------------------------------------------


async def test_read_only_hints_count_only_for_a_trusted_server(manager_factory: Any) -> None:
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    trusted = manager_factory(load_mcp_json({"mcpServers": {"time": {**entry, "trustAnnotations": True}}}))
    assert [(t.read_only, t.sequential) for t in await trusted.tools()] == [(True, False), (True, False)]


@pytest.mark.parametrize("trust", [False, True])
async def test_a_permission_mode_runs_a_hinted_tool_unasked_only_when_trusted(
    manager_factory: Any, tmp_path: Path, trust: bool
) -> None:
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    manager = manager_factory(load_mcp_json({"mcpServers": {"time": {**entry, "trustAnnotations": trust}}}))
    engine = PermissionEngine("default", root=tmp_path)  # no approver: what would ask is denied
    model = ScriptedModel([reply(tool_call("mcp__time__get_current_time", {"timezone": "UTC"})), "done"])
    agent: Agent[None] = Agent(model, before_tool_call=engine.before_tool_call)
    await manager.attach(agent)
    await agent.prompt("time?")
    (result,) = results(agent.messages)
    assert result.is_error is (not trust)
    if not trust:
        assert texts(result) == [NO_APPROVER.format(tool="mcp__time__get_current_time", mode="default")]


async def test_time_server_lists_and_calls(manager_factory: Any, time_config: Any) -> None:
    manager = manager_factory(time_config)
    tools = await manager.tools()
    assert [t.name for t in tools] == ["mcp__time__get_current_time", "mcp__time__convert_time"]
    # readOnlyHint: parallel, but not read-only (permission modes would ask) until trusted
    assert [(t.read_only, t.sequential) for t in tools] == [(False, False), (False, False)]
    assert tools[1].parameters["required"] == ["source_timezone", "time", "target_timezone"]
    args = {"source_timezone": "UTC", "time": "16:30", "target_timezone": "Asia/Tokyo"}
    agent, model, _ = await run(
        manager,
        tool_call("mcp__time__convert_time", args),
        tool_call("mcp__time__get_current_time", {"timezone": "Nowhere/Else"}),
    )
    converted, failed = results(agent.messages)
    assert not converted.is_error
    assert converted.details["structured_content"]["target"]["timezone"] == "Asia/Tokyo"
    assert converted.details["structured_content"]["target"]["datetime"].endswith("T01:30:00+09:00")
    assert converted.details["structured_content"]["time_difference"] == "+9.0h"
    assert failed.is_error
    assert texts(failed) == [
        "Error executing tool get_current_time: Invalid timezone: 'No time zone found with key Nowhere/Else'"
    ]
    assert model.requests[0].tool_names == ["mcp__time__get_current_time", "mcp__time__convert_time"]
    assert manager.status() == [
        ServerStatus(
            name="time",
            type="stdio",
            state="running",
            tools=("mcp__time__get_current_time", "mcp__time__convert_time"),
            protocol="2026-07-28",  # the newest version, negotiated with server/discover
        )
    ]


async def test_aclose_leaves_no_server_process(manager_factory: Any, time_config: Any) -> None:
    before = set(child_processes())
    manager = manager_factory(time_config)
    await manager.tools()
    started = [pid for pid, cmd in child_processes().items() if pid not in before and "mcp_server_time" in cmd]
    assert len(started) == 1
    await manager.aclose()
    assert started[0] not in child_processes()
    assert manager.status()[0].state == "stopped"
    # a tool kept after the close does not start the server again
    result = await manager.call("time", "get_current_time", {"timezone": "UTC"})
    assert result.is_error
    assert result.text == (
        "MCP server 'time' is closed (the MCPManager was closed); the call to 'get_current_time' did not run"
    )
    assert not [pid for pid, cmd in child_processes().items() if pid not in before and "mcp_server_time" in cmd]


# -- server-everything (stdio and streamable HTTP) -----------------------------------------


async def test_everything_lists_with_annotations_and_helpers(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    tools = {t.name: t for t in await manager.tools()}
    assert {
        "mcp__e__echo",
        "mcp__e__get-sum",
        "mcp__e__get-tiny-image",
        "mcp__e__trigger-long-running-operation",
        "mcp__e__toggle-simulated-logging",
        "mcp__e__list_resources",
        "mcp__e__read_resource",
        "mcp__e__list_prompts",
        "mcp__e__get_prompt",
    } <= set(tools)
    # no sampling model, no roots: the tools that need them are not offered
    assert "mcp__e__trigger-sampling-request" not in tools
    assert "mcp__e__get-roots-list" not in tools
    assert (tools["mcp__e__get-sum"].read_only, tools["mcp__e__get-sum"].sequential) == (False, False)
    logging = tools["mcp__e__toggle-simulated-logging"]
    assert (logging.read_only, logging.sequential) == (False, True)
    assert tools["mcp__e__get-sum"].parameters["properties"]["a"]["type"] == "number"


async def test_legacy_sse_lists_and_calls(manager_factory: Any, everything_sse_url: str) -> None:
    manager = manager_factory(load_mcp_json({"mcpServers": {"e": {"type": "sse", "url": everything_sse_url}}}))
    assert "mcp__e__get-sum" in [t.name for t in await manager.tools()]
    agent, _, _ = await run(manager, tool_call("mcp__e__get-sum", {"a": 20, "b": 22}))
    (summed,) = results(agent.messages)
    assert texts(summed) == ["The sum of 20 and 22 is 42."]
    assert manager.status()[0].type == "sse"


async def test_everything_calls_with_arguments_images_and_structured(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    agent, _, _ = await run(
        manager,
        tool_call("mcp__e__get-sum", {"a": 2, "b": 3}),
        tool_call("mcp__e__get-tiny-image"),
        tool_call("mcp__e__get-structured-content", {"location": "New York"}),
        tool_call("mcp__e__get-resource-reference", {"resourceType": "Nope", "resourceId": 1}),
    )
    summed, image, structured, invalid = results(agent.messages)
    assert texts(summed) == ["The sum of 2 and 3 is 5."]
    assert [type(b) for b in image.content] == [TextContent, ImageContent, TextContent]
    picture = image.content[1]
    assert isinstance(picture, ImageContent) and picture.mime_type == "image/png"
    assert picture.data is not None and picture.data.startswith("iVBORw0KGgo")
    assert structured.details == {"structured_content": {"temperature": 33, "conditions": "Cloudy", "humidity": 82}}
    assert invalid.is_error
    # the server's schema reached the loop, which rejected the call before it went out
    assert texts(invalid) == [
        'Validation failed for tool "mcp__e__get-resource-reference":\n  - resourceType: must be one of ["Text", "Blob"]'
        '\n\nReceived arguments:\n{\n  "resourceType": "Nope",\n  "resourceId": 1\n}'
    ]


async def test_everything_resources_and_prompts_through_helper_tools(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    agent, _, _ = await run(
        manager,
        tool_call("mcp__e__read_resource", {"uri": "demo://resource/static/document/features.md"}),
        tool_call("mcp__e__get_prompt", {"name": "args-prompt", "arguments": {"city": "Paris"}}),
        tool_call("mcp__e__list_prompts"),
        tool_call("mcp__e__list_resources"),
    )
    resource, prompt, prompts, listed = results(agent.messages)
    lines = texts(listed)[0].splitlines()
    assert (
        "demo://resource/static/document/features.md  features.md (text/markdown) - "
        "Static document file exposed from /docs: features.md"
    ) in lines
    assert lines[-1].startswith("demo://resource/dynamic/blob/{resourceId}  Dynamic Blob Resource (template) - ")
    assert texts(resource)[0].startswith("[resource demo://resource/static/document/features.md]\n# Everything Server")
    assert texts(prompt) == ["[user]", "What's weather in Paris?"]
    assert texts(prompts)[0].splitlines()[:2] == [
        "simple-prompt() - A prompt with no arguments",
        "args-prompt(city, state?) - A prompt with two arguments, one required and one optional",
    ]


async def test_progress_becomes_tool_execution_updates(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    _, _, events = await run(manager, tool_call("mcp__e__trigger-long-running-operation", {"duration": 0.3, "steps": 3}, id="p"))
    updates = [e.partial for e in events if e.type == "tool_execution_update"]
    assert updates == [
        {"progress": 1, "total": 3, "message": None},
        {"progress": 2, "total": 3, "message": None},
        {"progress": 3, "total": 3, "message": None},
    ]
    kinds = [e.type for e in events if e.type.startswith("tool_execution")]
    assert kinds == ["tool_execution_start", *["tool_execution_update"] * 3, "tool_execution_end"]


async def test_an_aborted_long_call_ends_promptly(manager_factory: Any, everything: Any) -> None:
    manager = manager_factory(everything)
    model = ScriptedModel([reply(tool_call("mcp__e__trigger-long-running-operation", {"duration": 600, "steps": 6000}))])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)

    def abort_on_progress(event: Any) -> None:
        if event.type == "tool_execution_update":
            agent.abort()

    agent.subscribe(abort_on_progress)
    result = await agent.prompt("go")
    assert result.end_reason == "aborted"
    (aborted,) = results(agent.messages)
    assert aborted.is_error and texts(aborted) == ["Tool execution was aborted."]
    # the connection is still good for the next call
    assert (await manager.call("e", "get-sum", {"a": 1, "b": 1})).text == "The sum of 1 and 1 is 2."


async def test_elicitation_goes_to_the_callback(manager_factory: Any, everything: Any) -> None:
    asked: list[ElicitationRequest] = []

    async def elicit(request: ElicitationRequest) -> ElicitationResponse:
        asked.append(request)
        return ElicitationResponse("accept", {"name": "Ada", "check": True})

    manager = manager_factory(everything, elicitation=elicit)
    agent, _, _ = await run(manager, tool_call("mcp__e__trigger-elicitation-request"))
    (answered,) = results(agent.messages)
    assert texts(answered)[:2] == [
        "✅ User provided the requested information!",
        "User inputs:\n- Name: Ada\n- Agreed to terms: true",
    ]
    assert [(r.server, r.message, r.mode, r.requested_schema["required"]) for r in asked] == [
        ("e", "Please provide inputs for the following fields:", "form", ["name"])
    ]


async def test_elicitation_without_a_callback_is_declined(manager_factory: Any, everything_stdio: Any) -> None:
    manager = manager_factory(everything_stdio)
    assert NO_ELICITATION == "ketch has no one to ask (no elicitation callback); declined"
    result = await manager.call("e", "trigger-elicitation-request")
    assert result.text.startswith("❌ User declined to provide the requested information.")


async def test_sampling_is_served_by_a_ketch_model(manager_factory: Any, everything: Any) -> None:
    sampler = ScriptedModel(["sampled answer"])
    manager = manager_factory(everything, sampling_model=sampler)
    agent, _, _ = await run(manager, tool_call("mcp__e__trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 50}))
    (sampled,) = results(agent.messages)
    assert texts(sampled) == [
        'LLM sampling result: \n{\n  "model": "scripted-model",\n  "stopReason": "endTurn",\n  "role": "assistant",\n'
        '  "content": {\n    "type": "text",\n    "text": "sampled answer"\n  }\n}'
    ]
    (request,) = sampler.requests
    assert [m.role for m in request.messages] == ["user"]
    assert request.messages[0].content[0].text.endswith("Say hi")  # type: ignore[union-attr]
    assert request.options.max_tokens == 50


async def test_roots_are_the_workspace(manager_factory: Any, everything_stdio: Any, tmp_path: Path) -> None:
    root = tmp_path.resolve()  # noqa: ASYNC240 (the test's own directory, before any I/O)
    manager = manager_factory(everything_stdio, roots=[root])
    result = await manager.call("e", "get-roots-list")
    assert f"   URI: {root.as_uri()}\n" in result.text
    assert result.text.startswith("Current MCP Roots (1 total):")


async def test_a_server_killed_mid_call_is_an_error_then_restarts(manager_factory: Any, everything_stdio: Any) -> None:
    manager = manager_factory(everything_stdio)
    await manager.tools()
    (first,) = server_pids("index.js stdio")
    model = ScriptedModel(
        [
            reply(tool_call("mcp__e__trigger-long-running-operation", {"duration": 600, "steps": 6000})),
            reply(tool_call("mcp__e__get-sum", {"a": 4, "b": 5})),
            "done",
        ]
    )
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    killed: list[int] = []

    def kill_on_progress(event: Any) -> None:
        if event.type == "tool_execution_update" and not killed:
            os.kill(first, signal.SIGKILL)
            killed.append(first)

    agent.subscribe(kill_on_progress)
    result = await agent.prompt("go")
    assert result.end_reason == "stop"
    crashed, summed = results(agent.messages)
    assert crashed.is_error
    assert texts(crashed)[0].startswith("MCP server 'e': the connection was lost during 'trigger-long-running-operation' (")
    assert texts(crashed)[0].endswith("); the server is restarted on the next call")
    assert texts(summed) == ["The sum of 4 and 5 is 9."]
    (second,) = server_pids("index.js stdio")
    assert second != first
    assert manager.status()[0].state == "running"


# -- changing_server.py: list_changed and cancellation seen by the server -----------------


# as a 2025-11-25 client sees the server: its resources cannot be subscribed to
CHANGING_TOOLS = [
    "mcp__c__add_tool",
    "mcp__c__wait",
    "mcp__c__cancellations",
    "mcp__c__touch",
    "mcp__c__list_resources",
    "mcp__c__read_resource",
]


async def test_list_changed_refreshes_tools_between_turns(manager_factory: Any, changing_config: Any) -> None:
    # the handshake era's notifications/tools/list_changed (2026-07-28: see the listen test)
    manager = manager_factory(changing_config, protocol="legacy")
    agent, model, _ = await run(
        manager,
        tool_call("mcp__c__add_tool", {"name": "extra"}),
        tool_call("mcp__c__extra"),
    )
    added, extra = results(agent.messages)
    assert texts(added) == ["added extra"]
    assert texts(extra) == ["I am extra"]
    assert model.requests[0].tool_names == CHANGING_TOOLS
    assert model.requests[1].tool_names == [*CHANGING_TOOLS[:4], "mcp__c__extra", *CHANGING_TOOLS[4:]]
    assert manager.status()[0].protocol == "2025-11-25"


async def test_changes_and_subscribed_resources_reach_the_agent_over_the_listen_stream(
    manager_factory: Any, changing_config: Any
) -> None:
    # 2026-07-28: the events come over one subscriptions/listen stream, in order, so once
    # the resource update arrived the earlier tool-list change has been seen too
    updated = asyncio.Event()
    seen: list[tuple[str, str]] = []

    def on_update(server: str, uri: str) -> None:
        seen.append((server, uri))
        updated.set()

    manager = manager_factory(changing_config, on_resource_updated=on_update)
    model = ScriptedModel(
        [
            reply(tool_call("mcp__c__subscribe_resource", {"uri": "res://counter"})),
            reply(tool_call("mcp__c__add_tool", {"name": "extra"})),
            reply(tool_call("mcp__c__touch", {"uri": "res://counter"})),
            "done",
        ]
    )
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    await agent.prompt("go")
    await asyncio.wait_for(updated.wait(), 30)
    assert seen == [("c", "res://counter")]
    assert manager.status()[0].protocol == "2026-07-28"
    assert texts(results(agent.messages)[0]) == [
        "subscribed to res://counter: a change of it is noted at the start of your next turn"
    ]
    assert "mcp__c__extra" in [t.name for t in await manager.tools()]
    # the note of the change comes with the next request
    model.add("noted")
    await agent.prompt("and now?")
    notes = [m for m in model.requests[-1].messages if "res://counter changed" in str(m.content)]
    assert [n.content[0].text for n in notes] == [  # type: ignore[union-attr]
        "[MCP server 'c': the resource res://counter changed; read it again with mcp__c__read_resource if you need it]"
    ]


async def test_cancelling_a_call_reaches_the_server(manager_factory: Any, changing_config: Any) -> None:
    manager = manager_factory(changing_config)
    model = ScriptedModel([reply(tool_call("mcp__c__wait"))])
    agent: Agent[None] = Agent(model)
    await manager.attach(agent)
    # the first progress report says the server is running the call
    agent.subscribe(lambda e: agent.abort() if e.type == "tool_execution_update" else None)
    result = await agent.prompt("go")
    assert result.end_reason == "aborted"
    assert (await manager.call("c", "cancellations")).text == "1"


async def test_a_call_timeout_cancels_the_call_on_the_server(manager_factory: Any, changing_config: Any) -> None:
    # "wait" never returns, so the timeout always trips; it is long enough that the calls
    # that must succeed do so on a busy machine too.
    manager = manager_factory(changing_config, call_timeout=3)
    result = await manager.call("c", "wait")
    assert result.is_error
    assert result.text == "MCP server 'c': 'wait' timed out after 3 s (the server was told to cancel it)"
    assert (await manager.call("c", "cancellations")).text == "1"


# -- start-up failures ---------------------------------------------------------------------


async def test_a_server_that_does_not_start_is_reported_and_left_out(manager_factory: Any, time_config: Any) -> None:
    broken = load_mcp_json(
        {
            "mcpServers": {
                "mute": {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]},
                "absent": {"command": "/nonexistent/mcp-server"},
            }
        }
    )
    before = set(child_processes())
    # the time server keeps the default start-up timeout; the mute one never answers
    good = manager_factory(time_config)
    bad = manager_factory(broken, startup="eager", startup_timeout=0.5)
    async with bad:
        status = {s.name: s for s in bad.status()}
        assert status["mute"].state == "failed"
        assert status["mute"].error == "did not start within 0.5 s"
        assert status["absent"].state == "failed"
        assert status["absent"].error == (
            "failed to start (FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server')"
        )
        assert not [pid for pid, cmd in child_processes().items() if pid not in before and "time.sleep(60)" in cmd]
        agent: Agent[None] = Agent(ScriptedModel(["done"]))
        await good.attach(agent)
        await bad.attach(agent)
        assert [t.name for t in agent.tools] == ["mcp__time__get_current_time", "mcp__time__convert_time"]
        result = await bad.call("mute", "anything")
        assert result.is_error
        assert result.text == "MCP server 'mute' did not start within 0.5 s; the call to 'anything' did not run"
    await good.aclose()
    assert set(child_processes()) <= before


async def test_eager_start_and_concurrent_first_use_start_one_process(manager_factory: Any, time_config: Any) -> None:
    before = set(child_processes())
    manager = manager_factory(time_config)
    lists = await asyncio.gather(manager.tools(), manager.tools(), manager.call("time", "get_current_time", {"timezone": "UTC"}))
    assert [t.name for t in lists[0]] == [t.name for t in lists[1]]
    started = [pid for pid, cmd in child_processes().items() if pid not in before and "mcp_server_time" in cmd]
    assert len(started) == 1


async def test_attach_keeps_the_agents_own_tools_and_hook(manager_factory: Any, changing_config: Any) -> None:
    async def native(args: dict[str, Any], ctx: Any) -> str:
        return "native"

    turns: list[int] = []

    def own_hook(turn: Any) -> None:
        turns.append(turn.turn)

    model = ScriptedModel([reply(tool_call("mcp__c__add_tool", {"name": "later"})), reply(tool_call("mcp__c__later")), "done"])
    agent: Agent[None] = Agent(model, tools=[Tool("native", "", None, native)], prepare_next_turn=own_hook)
    manager = manager_factory(changing_config, protocol="legacy")
    await manager.attach(agent)
    await agent.prompt("go")
    assert turns == [1, 2, 3]  # the agent's own hook still runs after every turn
    assert [t.name for t in agent.tools] == ["native", *CHANGING_TOOLS[:4], "mcp__c__later", *CHANGING_TOOLS[4:]]
    assert model.requests[1].tool_names == [t.name for t in agent.tools]
    assert texts(results(agent.messages)[1]) == ["I am later"]
