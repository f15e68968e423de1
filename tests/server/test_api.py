"""The JSON + SSE API of ketch.server, in process, on a loopback port."""

from __future__ import annotations

import asyncio
from typing import Any

from serverhelp import Gate
from serverhelp import subscribe
from serverhelp import types

from ketch import Agent
from ketch import Tool
from ketch import ToolContext
from ketch import tool
from ketch.subagents import SubagentEvent
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def _hello() -> list[Any]:
    return [reply("Hello there, friend.")]


async def test_a_prompt_streams_its_events_in_order_and_the_transcript_is_saved(servers: Any) -> None:
    server = await servers(_hello)
    sid = await server.create()
    stream = await subscribe(server, sid)
    status, data = await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "hi"})
    assert (status, data["accepted"]) == (202, True)
    frames = await stream.until_idle()
    stream.close()
    assert types(frames) == [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "update:text_start",
        "update:text_delta",
        "update:text_delta",
        "update:text_delta",
        "update:text_end",
        "message_end:assistant",
        "turn_end",
        "agent_end",
        "session_state",
    ]
    # the stream-json shape of `ketch run`: deltas without the partial message
    assert frames[6]["data"] == {"type": "message_update", "event": {"type": "text_delta", "delta": "Hello th", "index": 0}}
    ids = [int(f["id"].split(".")[1]) for f in frames]
    assert ids == list(range(ids[0], ids[0] + len(frames)))
    status, state = await server.call("GET", f"/api/sessions/{sid}")
    assert status == 200
    assert [(m["role"], m["content"][0]["text"]) for m in state["messages"]] == [
        ("user", "hi"),
        ("assistant", "Hello there, friend."),
    ]
    assert state["running"] is False and state["pending_approvals"] == []
    assert state["last_end"] == {"end_reason": "stop", "error": None}
    status, listing = await server.call("GET", "/api/sessions")
    assert [(s["id"], s["title"], s["message_count"]) for s in listing["sessions"]] == [(sid, "hi", 2)]


async def test_one_run_per_session_prompt_while_running_is_409_steer_and_follow_up_are_taken(servers: Any) -> None:
    gate = Gate()
    script = lambda: [reply(tool_call("wait_gate", {}, id="g1")), "steered answer", "follow-up answer"]  # noqa: E731
    server = await servers(script, tools=lambda: [gate.tool()])
    sid = await server.create()
    stream = await subscribe(server, sid)
    assert (await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "go"}))[0] == 202
    await gate.entered.wait()
    status, data = await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "again"})
    assert status == 409
    assert data == {
        "error": f"session {sid} is running; steer it (POST .../steer), queue a follow-up (POST .../follow_up) "
        "or abort it (POST .../abort) first"
    }
    assert (await server.call("POST", f"/api/sessions/{sid}/steer", {"text": "also look at b"}))[0] == 202
    assert (await server.call("POST", f"/api/sessions/{sid}/follow_up", {"text": "then c"}))[0] == 202
    gate.opened.set()
    await stream.until_idle()
    stream.close()
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    texts = [(m["role"], m["content"][0].get("text") or m["content"][0].get("name")) for m in state["messages"]]
    assert texts == [
        ("user", "go"),
        ("assistant", "wait_gate"),
        ("tool_result", "gate opened"),
        ("user", "also look at b"),
        ("assistant", "steered answer"),
        ("user", "then c"),
        ("assistant", "follow-up answer"),
    ]
    status, data = await server.call("POST", f"/api/sessions/{sid}/steer", {"text": "late"})
    assert (status, data) == (409, {"error": f"session {sid} is not running: send a prompt (POST .../prompt) instead"})
    status, data = await server.call("POST", f"/api/sessions/{sid}/abort", {})
    assert (status, data) == (409, {"error": f"session {sid} is not running: nothing to abort"})


async def test_abort_ends_the_run_with_aborted(servers: Any) -> None:
    server = await servers(lambda: [_hanging()])
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "wait"})
    await stream.until("message_start")  # the user message
    await stream.until("message_start")  # the model's answer has started
    assert (await server.call("POST", f"/api/sessions/{sid}/abort", {}))[0] == 202
    frames = await stream.until_idle()
    stream.close()
    end = next(f["data"] for f in frames if f["data"]["type"] == "agent_end")
    assert end["summary"]["end_reason"] == "aborted"
    assert frames[-1]["data"]["last_end"]["end_reason"] == "aborted"


def _hanging() -> Any:
    from ketch.testing import Reply

    return Reply(hang=True)


def _approval_tool() -> Tool:
    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file.
        """
        return f"deleted {path}"

    return delete_file


async def test_a_call_needing_approval_pauses_and_the_decisions_resume_the_run(servers: Any) -> None:
    script = lambda: [  # noqa: E731
        reply(tool_call("delete_file", {"path": "a.txt"}, id="d1"), tool_call("delete_file", {"path": "b.txt"}, id="d2")),
        "Deleted a, kept b.",
    ]
    server = await servers(script, tools=lambda: [_approval_tool()])
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "clean up"})
    frames = await stream.until_idle()
    assert frames[-1]["data"]["pending_approvals"] == [
        {"tool_call_id": "d1", "tool_name": "delete_file", "args": {"path": "a.txt"}, "reason": "", "decided": False},
        {"tool_call_id": "d2", "tool_name": "delete_file", "args": {"path": "b.txt"}, "reason": "", "decided": False},
    ]
    status, data = await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "more"})
    assert (status, data) == (
        409,
        {"error": f"session {sid} is paused for approval of d1 (delete_file), d2 (delete_file): approve or deny them (POST .../approvals) first"},
    )
    status, data = await server.call("POST", f"/api/sessions/{sid}/approvals", {"decisions": {"zz": {"decision": "approve"}}})
    assert (status, data) == (400, {"error": "no waiting call 'zz'; the run waits on d1, d2"})
    status, data = await server.call("POST", f"/api/sessions/{sid}/approvals", {"decisions": {"d1": {"decision": "maybe"}}})
    assert (status, data) == (400, {"error": "decision for 'd1': expected 'approve' or 'deny', got 'maybe'"})
    status, data = await server.call("POST", f"/api/sessions/{sid}/approvals", {"decisions": {"d1": {"decision": "approve"}}})
    assert (status, data) == (202, {"accepted": True, "undecided": ["d2"], "resumed": False})
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    assert [p["decided"] for p in state["pending_approvals"]] == [True, False]
    status, data = await server.call(
        "POST", f"/api/sessions/{sid}/approvals", {"decisions": {"d2": {"decision": "deny", "reason": "keep b"}}}
    )
    assert (status, data) == (202, {"accepted": True, "undecided": [], "resumed": True})
    await stream.until_idle()
    stream.close()
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    results = [(m["tool_call_id"], m["content"][0]["text"], m.get("is_error", False)) for m in state["messages"] if m["role"] == "tool_result"]
    assert results[0] == ("d1", "deleted a.txt", False)
    assert results[1][0] == "d2" and "keep b" in results[1][1] and results[1][2] is True
    assert state["messages"][-1]["content"][0]["text"] == "Deleted a, kept b."
    assert state["pending_approvals"] == []
    status, data = await server.call("POST", f"/api/sessions/{sid}/approvals", {"decisions": {"d1": "approve"}})
    assert (status, data) == (409, {"error": f"session {sid} is not paused for approval"})


async def test_change_model(servers: Any) -> None:
    server = await servers(_hello)
    sid = await server.create()
    status, data = await server.call("POST", f"/api/sessions/{sid}/model", {"model": "nonsense-provider:x"})
    assert status == 400 and data["error"].startswith("model 'nonsense-provider:x': ")
    status, data = await server.call("POST", f"/api/sessions/{sid}/model", {"model": ""})
    assert (status, data) == (400, {"error": "'model': expected a non-empty string"})


async def test_last_event_id_resumes_from_the_buffer_and_an_unknown_id_gets_a_reset(servers: Any) -> None:
    server = await servers(_hello)
    sid = await server.create()
    first = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "hi"})
    frames = await first.until_idle()
    first.close()
    again = await subscribe(server, sid, last_event_id=frames[3]["id"])
    replay = [await again.event() for _ in range(len(frames) - 4)]
    again.close()
    assert replay == frames[4:]
    stale = await subscribe(server, sid, last_event_id="0000.3")
    reset = await stale.event()
    stale.close()
    assert reset["event"] == "reset"
    assert reset["data"] == {"type": "reset", "reason": "restarted", "last_event_id": frames[-1]["id"]}


async def test_a_small_buffer_resets_a_client_that_fell_behind(servers: Any) -> None:
    server = await servers(_hello, buffer=3)
    sid = await server.create()
    first = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "hi"})
    frames = await first.until_idle()
    first.close()
    behind = await subscribe(server, sid, last_event_id=frames[0]["id"])
    assert (await behind.event())["event"] == "reset"
    behind.close()
    close_enough = await subscribe(server, sid, last_event_id=frames[-4]["id"])
    assert [await close_enough.event() for _ in range(3)] == frames[-3:]
    close_enough.close()


async def test_an_idle_stream_gets_heartbeat_comments(servers: Any) -> None:
    server = await servers(_hello, heartbeat=0.01)
    sid = await server.create()
    stream = await subscribe(server, sid)
    assert await stream.frame() == {"comment": "ping"}
    stream.close()


async def test_a_client_disconnecting_mid_stream_does_not_stop_the_run(servers: Any) -> None:
    gate = Gate()
    script = lambda: [reply("Looking.", tool_call("wait_gate", {}, id="g1")), "All done."]  # noqa: E731
    server = await servers(script, tools=lambda: [gate.tool()])
    sid = await server.create()
    leaving = await subscribe(server, sid)
    watcher = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "go"})
    await leaving.until("message_update")
    leaving.close()  # mid-stream, mid-message
    await gate.entered.wait()
    gate.opened.set()
    frames = await watcher.until_idle()
    watcher.close()
    end = next(f["data"] for f in frames if f["data"]["type"] == "agent_end")
    assert end["summary"]["end_reason"] == "stop"
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    assert state["messages"][-1]["content"][0]["text"] == "All done."


async def test_a_hundred_subscribers_each_get_every_event_once_in_order(servers: Any) -> None:
    script = lambda: [reply("one two three four five six seven eight nine ten", tool_call("wait_gate", {}, id="g1")), "done"]  # noqa: E731
    gate = Gate()
    gate.opened.set()
    server = await servers(script, tools=lambda: [gate.tool()])
    sid = await server.create()
    streams = await asyncio.gather(*(subscribe(server, sid) for _ in range(100)))
    assert (await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "go"}))[0] == 202
    received = await asyncio.gather(*(s.until_idle() for s in streams))
    for s in streams:
        s.close()
    reference = received[0]
    ids = [f["id"] for f in reference]
    assert len(set(ids)) == len(ids)
    numbers = [int(i.split(".")[1]) for i in ids]
    assert numbers == sorted(numbers) and numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    assert types(reference)[0] == "agent_start" and types(reference)[-2:] == ["agent_end", "session_state"]
    assert all(r == reference for r in received)


async def test_a_session_open_in_another_process_is_read_only(servers: Any) -> None:
    from ketch.sessions import Session

    server = await servers(_hello)
    session = await Session.create(server.store, cwd=".")
    try:
        status, state = await server.call("GET", f"/api/sessions/{session.id}")
        assert status == 200 and state["writable"] is False and state["messages"] == []
        status, data = await server.call("POST", f"/api/sessions/{session.id}/prompt", {"text": "hi"})
        assert status == 409 and data["error"].startswith(f"Session {session.id} is open in this process")
    finally:
        await session.close()


async def test_unknown_session_and_bad_bodies(servers: Any) -> None:
    server = await servers(_hello)
    assert await server.call("GET", "/api/sessions/nope") == (404, {"error": "no session 'nope'"})
    assert await server.call("POST", "/api/sessions/nope/prompt", {"text": "x"}) == (404, {"error": "no session 'nope'"})
    sid = await server.create()
    assert await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "  "}) == (
        400,
        {"error": "'text': expected a non-empty string"},
    )
    assert await server.call("POST", f"/api/sessions/{sid}/prompt", ["text"]) == (400, {"error": "the body must be a JSON object"})
    async with server.client.post(
        f"{server.url}/api/sessions/{sid}/prompt", data=b"{not json", headers={**server.headers(), "Content-Type": "application/json"}
    ) as response:
        assert (response.status, await response.json()) == (400, {"error": "the body is not valid JSON"})
    async with server.client.post(
        f"{server.url}/api/sessions/{sid}/prompt",
        data=b'{"text": "' + b"x" * (1024 * 1024) + b'"}',
        headers={**server.headers(), "Content-Type": "application/json"},
    ) as response:
        assert response.status == 413
        assert (await response.json())["error"].startswith("Maximum request body size 1048576 exceeded")
    assert (await server.call("GET", f"/api/sessions/{sid}"))[1]["messages"] == []


async def test_bad_limit_is_400(servers: Any) -> None:
    server = await servers(_hello)
    assert await server.call("GET", "/api/sessions?limit=lots") == (400, {"error": "limit 'lots': expected an integer 1-200"})


async def test_static_files_and_no_traversal(servers: Any) -> None:
    server = await servers(_hello)
    status, page = await server.call("GET", "/")
    assert status == 200 and '<script src="/static/app.js"' in page
    assert (await server.call("GET", "/static/app.js"))[0] == 200
    assert await server.call("GET", "/static/..%2F_app.py") == (404, {"error": "no static file '../_app.py'"})
    assert (await server.call("GET", "/static/index.html"))[0] == 404
    for name in ("marked.umd.js", "purify.min.js", "highlight.min.js", "highlight-github.min.css"):
        assert (await server.call("GET", f"/static/vendor/{name}"))[0] == 200
        assert f'src="/static/vendor/{name}"' in page or f'href="/static/vendor/{name}"' in page
    assert await server.call("GET", "/static/vendor/LICENSE.marked.txt") == (404, {"error": "no static file 'vendor/LICENSE.marked.txt'"})


async def test_sessions_created_are_listed_and_survive_a_restart(servers: Any, tmp_path: Any) -> None:
    server = await servers(_hello)
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "remember me"})
    await stream.until_idle()
    stream.close()
    await server.close()
    from serverhelp import start_server

    again = await start_server(tmp_path / "server1", _hello)
    try:
        _, state = await again.call("GET", f"/api/sessions/{sid}")
        assert [m["content"][0]["text"] for m in state["messages"]] == ["remember me", "Hello there, friend."]
    finally:
        await again.close()


def _subagent_tool() -> Tool:
    @tool
    async def subagent(task: str, ctx: ToolContext) -> str:  # type: ignore[type-arg]
        """Run a helper agent on a task.

        Args:
            task: What to do.
        """
        inner = Agent(ScriptedModel(["inner answer"]))
        reports: list[Any] = []
        inner.subscribe(lambda event: reports.append(ctx.report(SubagentEvent(path="main/helper#1", event=event))))
        result = await inner.prompt(task)
        for pending in reports:
            await pending
        return result.text

    return subagent


async def test_subagent_events_arrive_nested_and_slimmed_like_top_level_ones(servers: Any) -> None:
    script = lambda: [reply(tool_call("subagent", {"task": "look around"}, id="s1")), "outer done"]  # noqa: E731
    server = await servers(script, tools=lambda: [_subagent_tool()])
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "delegate"})
    frames = await stream.until_idle()
    stream.close()
    nested = [f["data"] for f in frames if f["data"]["type"] == "tool_execution_update"]
    assert {n["partial"]["path"] for n in nested} == {"main/helper#1"}
    assert all(set(n) == {"type", "tool_call_id", "tool_name", "partial"} for n in nested)  # args not repeated
    inner = [n["partial"]["event"] for n in nested]
    assert [e["type"] for e in inner][:2] == ["agent_start", "turn_start"]
    assert inner[-1]["type"] == "agent_end" and set(inner[-1]) == {"type", "summary"}
    deltas = [e["event"] for e in inner if e["type"] == "message_update" and e["event"]["type"] == "text_delta"]
    assert "".join(d["delta"] for d in deltas) == "inner answer"
    assert all(set(d) == {"type", "index", "delta"} for d in deltas)  # no partial message


async def test_an_agent_that_cannot_be_made_is_a_one_line_500(servers: Any, monkeypatch: Any, caplog: Any) -> None:
    """A bad configuration found while a session's agent is made: the client gets the one
    line (keys masked), and the server logs no traceback."""
    monkeypatch.setenv("DOCS_TOKEN", "sk-test-LEAKCHECK-0123456789")

    def broken() -> list[Any]:
        raise ValueError("headers must be an object, not 'Bearer sk-test-LEAKCHECK-0123456789'")

    server = await servers(_hello, tools=broken)
    status, data = await server.call("POST", "/api/sessions", {})
    assert (status, data) == (
        500,
        {"error": "Cannot start an agent for the session: ValueError: headers must be an object, not 'Bearer ***'"},
    )
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
