"""A2A: the served agent's card and tasks, driven by the a2a-sdk's client (protocol 1.0,
JSON-RPC), and a remote A2A agent used as a subagent by another ketch agent."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from serverhelp import TOKEN
from serverhelp import Gate

from ketch import Agent
from ketch import tool
from ketch.subagents import A2AError
from ketch.subagents import a2a_agent
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"{key} = 42"


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file.

    Args:
        path: The file.
    """
    return f"removed {path}"


def _tool_round() -> list[Any]:
    return [reply("Looking it up.", tool_call("lookup", {"key": "answer"}, id="c1")), "The answer is 42."]


class _Http:
    """An httpx client with the token, closed at the end of the block."""

    def __init__(self) -> None:
        self.client = httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)

    async def __aenter__(self) -> httpx.AsyncClient:
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()


async def _client(server: Any, *, streaming: bool = True) -> tuple[Any, _Http]:
    from a2a.client import A2ACardResolver
    from a2a.client import ClientConfig
    from a2a.client import ClientFactory

    http = _Http()
    card = await A2ACardResolver(http.client, base_url=server.url).get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http.client, streaming=streaming)).create(card), http


def _message(text: str, **fields: Any) -> Any:
    from a2a.types.a2a_pb2 import Message
    from a2a.types.a2a_pb2 import Part
    from a2a.types.a2a_pb2 import Role
    from a2a.types.a2a_pb2 import SendMessageRequest

    return SendMessageRequest(message=Message(message_id=f"m-{text[:8]}", role=Role.ROLE_USER, parts=[Part(text=text)], **fields))


def _state(value: int) -> str:
    from a2a.types.a2a_pb2 import TaskState

    return str(TaskState.Name(value))


async def test_the_card_is_public_and_valid(servers: Any) -> None:
    from a2a.types.a2a_pb2 import AgentCard
    from google.protobuf.json_format import ParseDict

    server = await servers(_tool_round, name="helper", description="Answers questions about keys")
    status, card = await server.call("GET", "/.well-known/agent-card.json", token=None)
    assert status == 200
    parsed = ParseDict(card, AgentCard())  # strict: an unknown field is an error
    assert (parsed.name, parsed.description, parsed.capabilities.streaming) == ("helper", "Answers questions about keys", True)
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in parsed.supported_interfaces] == [(f"{server.url}/a2a", "JSONRPC", "1.0")]
    assert parsed.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert (await server.call("POST", "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}, token=None))[0] == 401


async def test_a_streamed_task_with_a_tool_round_completes(servers: Any) -> None:
    server = await servers(_tool_round, tools=lambda: [lookup])
    client, http = await _client(server)
    async with http:
        events = [event async for event in client.send_message(_message("What is the answer?"))]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    states = [_state(e.status_update.status.state) for e in events if e.HasField("status_update")]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    text = "".join(p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts)
    assert text == "Looking it up.\n\nThe answer is 42."
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [u.append for u in updates] == [False] + [True] * (len(updates) - 1) and updates[-1].last_chunk
    final = events[-1].status_update
    assert [p.text for p in final.status.message.parts] == ["Looking it up.\n\nThe answer is 42."]
    assert {e.status_update.task_id for e in events if e.HasField("status_update")} == {events[0].task.id}


async def test_send_get_and_a_context_that_goes_on(servers: Any) -> None:
    from a2a.types.a2a_pb2 import GetTaskRequest

    server = await servers(lambda: ["Rome.", "Paris."])
    client, http = await _client(server, streaming=False)
    async with http:
        [first] = [e async for e in client.send_message(_message("Capital of Italy?"))]
        task = first.task
        assert _state(task.status.state) == "TASK_STATE_COMPLETED"
        assert [a.parts[0].text for a in task.artifacts] == ["Rome."]
        assert [m.parts[0].text for m in task.history] == ["Capital of Italy?", "Rome."]
        [second] = [e async for e in client.send_message(_message("And of France?", context_id=task.context_id))]
        got = await client.get_task(GetTaskRequest(id=second.task.id))
    assert got.artifacts[0].parts[0].text == "Paris." and got.context_id == task.context_id
    seen = server.models[0].requests[1].messages
    assert [m.content[0].text for m in seen] == ["Capital of Italy?", "Rome.", "And of France?"]


async def test_cancel_a_working_task(servers: Any) -> None:
    from a2a.types.a2a_pb2 import CancelTaskRequest

    gate = Gate()
    server = await servers(lambda: [reply(tool_call("wait_gate", {}, id="g1")), "never"], tools=lambda: [gate.tool()])
    client, http = await _client(server)
    async with http:
        stream = client.send_message(_message("wait"))
        first = await anext(stream)
        await gate.entered.wait()
        canceled = await client.cancel_task(CancelTaskRequest(id=first.task.id))
        rest = [e async for e in stream]
    assert _state(canceled.status.state) == "TASK_STATE_CANCELED"
    assert _state(rest[-1].status_update.status.state) == "TASK_STATE_CANCELED"


async def test_an_approval_is_input_required_and_an_answer_resumes_the_task(servers: Any) -> None:
    server = await servers(lambda: [reply(tool_call("remove", {"path": "a"}, id="r1")), "Removed a."], tools=lambda: [remove])
    client, http = await _client(server, streaming=False)
    async with http:
        [paused] = [e async for e in client.send_message(_message("remove a"))]
        task = paused.task
        assert _state(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
        assert "remove (r1) needs approval" in task.status.message.parts[0].text
        [done] = [e async for e in client.send_message(_message("approve", task_id=task.id, context_id=task.context_id))]
    assert _state(done.task.status.state) == "TASK_STATE_COMPLETED"
    assert done.task.artifacts[0].parts[0].text == "Removed a."


async def test_errors_are_json_rpc_errors(servers: Any) -> None:
    from a2a.client import A2AClientError
    from a2a.types.a2a_pb2 import GetTaskRequest
    from a2a.utils.errors import TaskNotFoundError

    server = await servers(_tool_round)
    client, http = await _client(server)
    async with http:
        with pytest.raises((TaskNotFoundError, A2AClientError)) as missing:
            await client.get_task(GetTaskRequest(id="nope"))
        assert "task 'nope' not found" in str(missing.value)
    call = {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}}
    assert await server.call("POST", "/a2a", call) == (
        200,
        {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": -32601,
                "message": "method 'ListTasks' is not supported: SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask",
            },
        },
    )


async def test_another_ketch_agent_uses_the_served_agent_as_a_subagent(servers: Any) -> None:
    server = await servers(_tool_round, tools=lambda: [lookup], name="Key Keeper", description="Knows keys")
    helper = await a2a_agent(server.url, token=TOKEN)
    assert helper.name == "ask_key_keeper" and "Knows keys" in helper.description
    parent = Agent(ScriptedModel([reply(tool_call("ask_key_keeper", {"task": "What is the answer?"}, id="a1")), "It is 42."]), tools=[helper])
    result = await parent.prompt("Ask the key keeper.")
    assert result.text == "It is 42."
    tool_result = next(m for m in parent.messages if m.role == "tool_result")
    assert tool_result.content[0].text == "Looking it up.\n\nThe answer is 42."
    with pytest.raises(A2AError) as refused:
        await a2a_agent(server.url + "/nothing-here", token=TOKEN)
    assert str(refused.value) == f"the agent card at {server.url}/nothing-here/.well-known/agent-card.json answered HTTP 404"


async def test_aborting_the_parent_cancels_the_remote_task(servers: Any) -> None:
    gate = Gate()
    server = await servers(lambda: [reply(tool_call("wait_gate", {}, id="g1")), "never"], tools=lambda: [gate.tool()])
    helper = await a2a_agent(server.url, token=TOKEN)
    parent = Agent(ScriptedModel([reply(tool_call(helper.name, {"task": "wait"}, id="a1"))]), tools=[helper])
    known = asyncio.Event()  # the tool has the remote task's id: it reports it
    parent.subscribe(lambda e: known.set() if e.type == "tool_execution_update" and e.partial["type"] == "a2a_task" else None)
    run = asyncio.create_task(parent.prompt("go"))
    await gate.entered.wait()
    await known.wait()
    parent.abort()
    result = await run
    assert result.end_reason == "aborted"
    from ketch.server._hub import HUB
    from ketch.subagents._a2a import _cancels

    await asyncio.gather(*_cancels)  # the CancelTask the aborted tool sent, answered once the remote run is over
    [remote] = server.app[HUB].tasks.values()
    assert remote.state == "TASK_STATE_CANCELED"
    _, state = await server.call("GET", f"/api/sessions/{remote.live.session.id}")
    assert state["running"] is False and state["last_end"]["end_reason"] == "aborted"
