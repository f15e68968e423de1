"""The session routes the page's sidebar uses (rename, delete, search, paging, the
waiting mark), a reload mid-answer (the state shows what streamed), abort dropping
queued messages, and the bounds a client cannot push past (streams, queues, ids)."""

from __future__ import annotations

import asyncio
from typing import Any

from serverhelp import Gate
from serverhelp import subscribe
from serverhelp import types

from ketch import TextContent
from ketch import tool
from ketch.testing import Reply
from ketch.testing import reply
from ketch.testing import tool_call


def _hello() -> list[Any]:
    return [reply("Hello there, friend.")]


async def _run(server: Any, sid: str, text: str) -> None:
    stream = await subscribe(server, sid)
    assert (await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": text}))[0] == 202
    await stream.until_idle()
    stream.close()


async def test_rename_search_page_and_delete_sessions(servers: Any) -> None:
    server = await servers(lambda: ["ok"] * 3)
    ids = []
    for text in ("fix the parser", "write the docs", "Parser tests"):
        sid = await server.create()
        await _run(server, sid, text)
        ids.append(sid)
    status, data = await server.call("POST", f"/api/sessions/{ids[1]}/title", {"title": "  Docs   for the\\nparser "})
    assert (status, data) == (200, {"id": ids[1], "title": "Docs for the\\nparser"})
    assert (await server.call("POST", f"/api/sessions/{ids[1]}/title", {"title": "   "}))[0] == 400

    status, listing = await server.call("GET", "/api/sessions")
    assert [(s["id"], s["title"]) for s in listing["sessions"]] == [
        (ids[1], "Docs for the\\nparser"),  # renamed: the newest entry
        (ids[2], "Parser tests"),
        (ids[0], "fix the parser"),
    ]
    _, found = await server.call("GET", "/api/sessions?q=PARSER")
    assert [s["id"] for s in found["sessions"]] == [ids[1], ids[2], ids[0]] and found["next_cursor"] is None
    _, first = await server.call("GET", "/api/sessions?q=parser&limit=2")
    assert [s["id"] for s in first["sessions"]] == [ids[1], ids[2]]
    _, rest = await server.call("GET", f"/api/sessions?q=parser&limit=2&cursor={first['next_cursor']}")
    assert [s["id"] for s in rest["sessions"]] == [ids[0]] and rest["next_cursor"] is None
    _, page = await server.call("GET", "/api/sessions?limit=2")
    _, more = await server.call("GET", f"/api/sessions?limit=2&cursor={page['next_cursor']}")
    assert [s["id"] for s in page["sessions"] + more["sessions"]] == [ids[1], ids[2], ids[0]]

    assert await server.call("DELETE", f"/api/sessions/{ids[2]}") == (200, {"deleted": ids[2]})
    assert await server.call("DELETE", f"/api/sessions/{ids[2]}") == (404, {"error": f"no session {ids[2]!r}"})
    _, listing = await server.call("GET", "/api/sessions")
    assert [s["id"] for s in listing["sessions"]] == [ids[1], ids[0]]
    assert (await server.call("GET", f"/api/sessions/{ids[2]}"))[0] == 404


async def test_a_running_session_is_not_deleted_and_a_waiting_one_is_marked(servers: Any) -> None:
    gate = Gate()

    @tool(requires_approval=True)
    def remove(path: str) -> str:
        """Remove a file.

        Args:
            path: The file.
        """
        return "removed"

    script = lambda: [reply(tool_call("wait_gate", {}, id="g1")), "done", reply(tool_call("remove", {"path": "a"}, id="r1"))]  # noqa: E731
    server = await servers(script, tools=lambda: [gate.tool(), remove])
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "go"})
    await gate.entered.wait()
    status, data = await server.call("DELETE", f"/api/sessions/{sid}")
    assert (status, data) == (409, {"error": f"session {sid} is running: abort it (POST .../abort) before deleting it"})
    _, listing = await server.call("GET", "/api/sessions")
    assert [(s["running"], s["waiting"]) for s in listing["sessions"]] == [(True, False)]
    gate.opened.set()
    await stream.until_idle()
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "remove a"})
    await stream.until_idle()
    stream.close()
    _, listing = await server.call("GET", "/api/sessions")
    assert [(s["running"], s["waiting"]) for s in listing["sessions"]] == [(False, True)]


async def test_the_state_mid_answer_has_exactly_what_streamed(servers: Any) -> None:
    text = "Lorem ipsum dolor sit amet, " * 40
    server = await servers(lambda: [Reply(blocks=[TextContent(text=text)], hang=True, chunk_size=7)])
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "say it"})
    shown = ""
    frames = []
    while len(shown) < 100:  # part of the answer has streamed
        frame = await stream.event()
        frames.append(frame)
        data = frame["data"]
        if data["type"] == "message_update" and data["event"]["type"] == "text_delta":
            shown += data["event"]["delta"]
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    # what streamed up to the state's last_event_id, and nothing the events after it repeat
    seen = shown
    while True:
        if frames[-1]["id"] == state["last_event_id"]:
            break
        if int(frames[-1]["id"].split(".")[1]) > int(state["last_event_id"].split(".")[1]):
            raise AssertionError("the state is older than an event the stream delivered before it")
        frame = await stream.event()
        frames.append(frame)
        if frame["data"]["type"] == "message_update":
            seen += frame["data"]["event"].get("delta", "")
    assert [m["role"] for m in state["messages"]] == ["user"]
    assert state["streaming"] == {"role": "assistant", "content": [{"type": "text", "text": seen}]}
    assert text.startswith(seen) and len(seen) >= 100
    await server.call("POST", f"/api/sessions/{sid}/abort", {})
    await stream.until_idle()
    stream.close()
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    assert state["streaming"] is None and [m["role"] for m in state["messages"]] == ["user", "assistant"]


async def test_abort_drops_a_steer_sent_just_before_it(servers: Any) -> None:
    gate = Gate()
    script = lambda: [reply(tool_call("wait_gate", {}, id="g1")), "next run answer"]  # noqa: E731
    server = await servers(script, tools=lambda: [gate.tool()])
    sid = await server.create()
    stream = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "go"})
    await gate.entered.wait()
    assert (await server.call("POST", f"/api/sessions/{sid}/steer", {"text": "a late steer"}))[0] == 202
    assert (await server.call("POST", f"/api/sessions/{sid}/follow_up", {"text": "a late follow-up"}))[0] == 202
    assert (await server.call("POST", f"/api/sessions/{sid}/abort", {}))[0] == 202
    gate.opened.set()
    await stream.until_idle()
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "again"})
    await stream.until_idle()
    stream.close()
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    users = [m["content"][0]["text"] for m in state["messages"] if m["role"] == "user"]
    assert users == ["go", "again"]


async def test_event_streams_are_bounded(servers: Any) -> None:
    server = await servers(_hello, max_streams=3)
    sid = await server.create()
    streams = [await subscribe(server, sid) for _ in range(3)]
    async with server.client.get(f"{server.url}/api/sessions/{sid}/events", headers=server.headers()) as response:
        assert response.status == 503 and response.headers["Retry-After"] == "5"
        assert await response.json() == {"error": "too many open event streams (3): close other pages or clients"}
    streams.pop().close()
    for _ in range(100):  # the server notices the closed stream when it next writes to it
        await server.call("POST", f"/api/sessions/{sid}/title", {"title": "ping"})  # a session_state frame
        async with server.client.get(f"{server.url}/api/sessions/{sid}/events", headers=server.headers()) as response:
            if response.status == 200:
                break
    else:
        raise AssertionError("a closed stream's place was never given back")
    for s in streams:
        s.close()


async def test_ids_asked_about_are_not_remembered(servers: Any) -> None:
    from ketch.server._hub import HUB

    server = await servers(_hello)
    hub = server.app[HUB]
    for start in range(0, 600, 100):
        answers = await asyncio.gather(*(server.call("GET", f"/api/sessions/nope{n}") for n in range(start, start + 100)))
        assert {status for status, _ in answers} == {404}
    assert hub._opening == {} and hub.live == {}


async def test_past_max_open_the_least_recently_used_idle_sessions_close(servers: Any) -> None:
    from ketch.server._hub import HUB

    server = await servers(lambda: ["ok"], max_open=2)
    hub = server.app[HUB]
    ids = [await server.create() for _ in range(4)]
    assert list(hub.live) == ids[2:]
    assert (await server.call("GET", f"/api/sessions/{ids[0]}"))[0] == 200  # opens again
    assert list(hub.live) == [ids[3], ids[0]]


async def test_a_client_that_stops_reading_gets_a_reset_not_a_silent_cut(servers: Any) -> None:
    text = "x" * (16 * 1024 * 1024)
    server = await servers(lambda: [reply(text, chunk_size=16 * 1024)], stream_queue=20)
    sid = await server.create()
    stalled = await subscribe(server, sid)
    await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "a lot"})
    from ketch.server._hub import HUB

    run = server.app[HUB].live[sid].task  # None once the run is over
    if run is not None:
        await run  # the stalled client read nothing meanwhile
    last = None
    while True:
        try:
            frame = await stalled.event()
        except EOFError:
            break
        last = frame
    assert last is not None and last["event"] == "reset"
    assert last["data"]["reason"] == "slow_client"
    _, state = await server.call("GET", f"/api/sessions/{sid}")
    assert state["last_end"] == {"end_reason": "stop", "error": None}
    assert types([last]) == ["reset"]
