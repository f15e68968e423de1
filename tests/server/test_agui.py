"""AG-UI: a run of the served agent as an AG-UI event stream; every event validated
against the AG-UI Python SDK's types (``ag-ui-protocol``), none with a field the
protocol does not define; a tool approval as an interrupt answered by a resume."""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter

from ketch import tool
from ketch.testing import reply
from ketch.testing import thinking
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


async def _run(server: Any, body: dict[str, Any]) -> list[Any]:
    """POST /agui; every event parsed by the SDK's Event union (extra fields refused)."""
    from ag_ui.core import Event

    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    async with server.client.post(f"{server.url}/agui", json=body, headers={**server.headers(), "Accept": "text/event-stream"}) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"] == "text/event-stream"
        raw = (await response.read()).decode()
    events = []
    for block in raw.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: ")
        data = json.loads(block[6:])
        event = adapter.validate_python(data)
        assert not event.model_extra, (data["type"], event.model_extra)
        assert event.model_dump(mode="json", by_alias=True) == data  # nothing dropped, nothing renamed
        events.append(event)
    return events


def _kinds(events: list[Any]) -> list[str]:
    """The event types; a run of TOOL_CALL_ARGS (the fragments as the model streams
    them) counts once."""
    out: list[str] = []
    for e in events:
        kind = e.type.value
        if not (kind == "TOOL_CALL_ARGS" and out and out[-1] == kind):
            out.append(kind)
    return out


async def test_a_run_streams_text_reasoning_a_tool_call_and_its_result(servers: Any) -> None:
    script = lambda: [  # noqa: E731
        reply(thinking("Need the key."), "Looking.", tool_call("lookup", {"key": "answer"}, id="c1")),
        "The answer is 42.",
    ]
    server = await servers(script, tools=lambda: [lookup])
    events = await _run(server, {"threadId": "t1", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "What is it?"}]})
    assert _kinds(events) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    started, finished = events[0], events[-1]
    assert (started.thread_id, started.run_id, started.protocol_version) == ("t1", "r1", "1.0")
    assert (finished.thread_id, finished.run_id, finished.outcome.type) == ("t1", "r1", "success")
    start = next(e for e in events if e.type.value == "TOOL_CALL_START")
    assert (start.tool_call_id, start.tool_call_name) == ("c1", "lookup")
    assert json.loads("".join(e.delta for e in events if e.type.value == "TOOL_CALL_ARGS")) == {"key": "answer"}
    result = next(e for e in events if e.type.value == "TOOL_CALL_RESULT")
    assert (result.tool_call_id, result.content, result.role) == ("c1", "answer = 42", "tool")
    texts: dict[str, str] = {}
    for e in events:
        if e.type.value == "TEXT_MESSAGE_CONTENT":
            texts[e.message_id] = texts.get(e.message_id, "") + e.delta
    assert list(texts.values()) == ["Looking.", "The answer is 42."]
    assert start.parent_message_id == next(iter(texts))
    snapshot = events[-2].snapshot["session"]
    assert snapshot["pending_approvals"] == [] and snapshot["model"].startswith("scripted")


async def test_a_thread_is_a_session_and_an_approval_is_an_interrupt_answered_by_resume(servers: Any) -> None:
    script = lambda: [  # noqa: E731
        "Hello.",
        reply(tool_call("remove", {"path": "a.txt"}, id="d1"), tool_call("remove", {"path": "b.txt"}, id="d2")),
        "Removed a, kept b.",
    ]
    server = await servers(script, tools=lambda: [remove])
    history = [{"id": "m1", "role": "user", "content": "hi"}]
    await _run(server, {"threadId": "t", "runId": "r1", "messages": history})
    history += [{"id": "m2", "role": "assistant", "content": "Hello."}, {"id": "m3", "role": "user", "content": "clean up"}]
    paused = await _run(server, {"threadId": "t", "runId": "r2", "messages": history})
    outcome = paused[-1].outcome
    assert outcome.type == "interrupt"
    assert [(i.id, i.reason, i.tool_call_id, i.message) for i in outcome.interrupts] == [
        ("d1", "tool_approval", "d1", 'Allow remove({"path": "a.txt"})?'),
        ("d2", "tool_approval", "d2", 'Allow remove({"path": "b.txt"})?'),
    ]
    resumed = await _run(
        server,
        {
            "threadId": "t",
            "runId": "r3",
            "messages": history,
            "resume": [
                {"interruptId": "d1", "status": "resolved", "payload": {"approved": True}},
                {"interruptId": "d2", "status": "resolved", "payload": {"approved": False, "reason": "keep b"}},
            ],
        },
    )
    assert resumed[-1].outcome.type == "success"
    results = {e.tool_call_id: e.content for e in resumed if e.type.value == "TOOL_CALL_RESULT"}
    assert results["d1"] == "removed a.txt" and "keep b" in results["d2"]
    _, listing = await server.call("GET", "/api/sessions")
    assert [s["message_count"] for s in listing["sessions"]] == [7]  # one thread, one session


async def test_bad_inputs_are_refused_before_the_stream(servers: Any) -> None:
    server = await servers(lambda: ["x"])
    cases = {
        "no ids": ({"messages": []}, 400, "'threadId' and 'runId': expected non-empty strings"),
        "frontend tools": (
            {"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user", "content": "x"}], "tools": [{"name": "f", "description": "d"}]},
            400,
            "'tools': a served ketch agent runs its own tools on the server; send no frontend tools",
        ),
        "resume nothing": ({"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "x", "status": "resolved"}]}, 409, "thread 't' waits on no interrupt"),
        "no user message": ({"threadId": "t", "runId": "r", "messages": []}, 400, "messages: expected at least one message"),
    }
    for name, (body, status, message) in cases.items():
        answer = await server.call("POST", "/agui", body)
        assert answer == (status, {"error": message}), name
