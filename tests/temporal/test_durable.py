"""Durable runs through real workers on a real Temporal dev server."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import temporal_app as test_app
from temporalio.client import Client

from ketch.llm import AssistantMessage
from ketch.llm import Message
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.llm import message_to_dict
from ketch.loop import approve
from ketch.temporal import EventHub
from ketch.temporal import RunHandle
from ketch.temporal import start_run


def _normal(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as dicts without their timestamps (wall clock at creation)."""
    out = []
    for m in messages:
        d = message_to_dict(m)
        d.pop("timestamp", None)
        out.append(d)
    return out


def _text(m: Message) -> str:
    content = m.content  # type: ignore[union-attr]
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _keyed(run_id: str, lines: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(the call's number in the run, n) per line; every key is <run id>/<the run's token>/<number>."""
    tokens = {line["key"].rsplit("/", 2)[1] for line in lines}
    assert len(tokens) == 1 and all(line["key"].startswith(f"{run_id}/") for line in lines), lines
    return [(int(line["key"].rsplit("/", 1)[1]), line["n"]) for line in lines]


async def _start(client: Client, queue: str, prompt: str, hub: EventHub | None = None, **agent: Any) -> RunHandle:
    # a workflow task handed to a worker killed a moment ago times out after 2 s, not 10
    return await start_run(
        client, test_app.agent(**agent), prompt, task_queue=queue, events=hub, task_timeout=timedelta(seconds=2)
    )


async def _until(run: RunHandle, predicate: Any) -> list[dict[str, Any]]:
    """The run's events up to the first one ``predicate`` accepts."""
    seen = []
    async for _, event in run.events():
        seen.append(event)
        if predicate(event):
            return seen
    raise AssertionError(f"the run ended without the event; saw {[e['type'] for e in seen]}")


def _kind(e: dict[str, Any]) -> str:
    return "update:" + e["event"]["type"] if e["type"] == "message_update" else e["type"]


ROUND = [
    "turn_start", "message_start", "update:text_start", "update:text_delta", "update:text_end", "update:toolcall_start", "update:toolcall_delta", "update:toolcall_end", "message_end",
    "tool_execution_start", "tool_execution_end", "message_start", "message_end", "turn_end",
]


async def test_multi_round_run_through_a_worker_process_streams_events_in_order(
    client: Client, hub: EventHub, queue: str, work_dir: Path, spawn_worker: Any
) -> None:
    await spawn_worker()
    run = await _start(client, queue, "rounds 2", hub)
    events = [e async for _, e in run.events()]
    result = await run.result()

    assert [_kind(e) for e in events] == [
        "agent_start", "turn_start", "message_start", "message_end",  # the prompt
        *ROUND[1:],  # round 0 (its turn_start is the first one)
        *ROUND,  # round 1
        "turn_start", "message_start", "update:text_start", "update:text_delta", "update:text_delta",
        "update:text_delta", "update:text_end", "message_end", "turn_end", "agent_end",  # "done after 2 rounds"
    ]
    assert [_text(m) for m in result.transcript if not isinstance(m, ToolResultMessage)] == [
        "rounds 2", "round 0", "round 1", "done after 2 rounds",
    ]
    assert [_text(m) for m in result.transcript if isinstance(m, ToolResultMessage)] == ["effect 0", "effect 1"]
    assert result.summary.end_reason == "stop"
    assert (result.summary.turns, result.summary.tool_calls) == (3, 2)
    assert events[-1]["summary"]["end_reason"] == "stop"
    # a live update carries its stream event without the partial message (linear in the answer)
    updates = [e["event"] for e in events if e["type"] == "message_update"]
    assert [sorted(u) for u in updates if u["type"].endswith("_delta")] == [["delta", "index", "type"]] * 7
    # resuming from an event id gives the rest
    rest = [n async for n, _ in run.events(after=len(events) - 2)]
    assert rest == [len(events) - 1, len(events)]
    assert _keyed(run.id, _lines(work_dir / "effects.jsonl")) == [(1, 0), (2, 1)]


async def _uninterrupted(client: Client, queue: str, in_process_worker: Any, prompt: str) -> list[dict[str, Any]]:
    async with in_process_worker():
        run = await _start(client, queue, prompt)
        return _normal((await run.result()).transcript)


async def test_worker_killed_mid_tool_call_the_run_completes_on_another_and_the_effect_happened_once(
    client: Client, hub: EventHub, queue: str, work_dir: Path, spawn_worker: Any, in_process_worker: Any
) -> None:
    first = await spawn_worker()
    (work_dir / "hang-tool").touch()
    run = await _start(client, queue, "rounds 3", hub)
    await _until(run, lambda e: e["type"] == "tool_execution_update")  # the effect is done; the call hangs
    first.kill()
    await spawn_worker()
    result = await run.result()

    assert _keyed(run.id, _lines(work_dir / "effects.jsonl")) == [(1, 0), (2, 1), (3, 2)]
    assert _keyed(run.id, _lines(work_dir / "calls.jsonl")) == [(1, 0), (1, 0), (2, 1), (3, 2)]
    assert result.summary.end_reason == "stop"
    assert _normal(result.transcript) == await _uninterrupted(client, queue, in_process_worker, "rounds 3")


async def test_a_worker_killed_between_a_write_and_its_record_leaves_the_model_a_correct_answer(
    client: Client, queue: str, work_dir: Path, spawn_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KETCH_IDEMPOTENCY_DIR", str(work_dir / "journal"))  # the journal the workers share
    (work_dir / "work").mkdir()
    (work_dir / "die-after-write").touch()  # the fault hook: the first write's worker dies before its record
    workers = [await spawn_worker(), await spawn_worker()]
    run = await start_run(client, test_app.writer(), "write", task_queue=queue, task_timeout=timedelta(seconds=2))
    result = await run.result()

    assert sorted(w.process.poll() for w in workers if w.process.poll() is not None) == [137]  # one died
    assert not (work_dir / "die-after-write").exists()
    assert (work_dir / "work" / "out.txt").read_text() == "written once\n"
    assert [_text(m) for m in result.transcript] == [
        "write", "writing", "Created out.txt (13 bytes, 1 line).", "told: Created out.txt (13 bytes, 1 line).",
    ]
    assert result.summary.end_reason == "stop"


async def test_worker_killed_mid_model_stream_the_retry_discards_the_partial_output(
    client: Client, hub: EventHub, queue: str, work_dir: Path, spawn_worker: Any, in_process_worker: Any
) -> None:
    first = await spawn_worker()
    (work_dir / "hang-model").touch()
    run = await _start(client, queue, "rounds 2", hub)
    seen = await _until(run, lambda e: e["type"] == "message_update" and e["event"]["type"] == "text_delta"
                        and e["event"]["delta"] == "half")
    first.kill()
    await spawn_worker()
    result = await run.result()
    events = hub.history(run.id)

    assert result.summary.end_reason == "stop"
    assert _keyed(run.id, _lines(work_dir / "effects.jsonl")) == [(1, 0), (2, 1)]
    assert _normal(result.transcript) == await _uninterrupted(client, queue, in_process_worker, "rounds 2")
    # the discarded attempt's partial output is followed by a retry marker, then a fresh message
    i = next(k for k, e in enumerate(events) if e["type"] == "retry")
    assert i >= len(seen)
    assert {e["type"] for e in events[len(seen) : i]} <= {"message_update"}  # the rest of the partial, if any
    assert events[i]["discard_partial"] is True
    assert events[i + 1]["type"] == "message_start"
    deltas = "".join(
        e["event"]["delta"] for e in events[i:] if e["type"] == "message_update" and e["event"]["type"] == "text_delta"
    )
    assert deltas.startswith("round 1")


ONE_AT_A_TIME = [
    ("UserMessage", "s1"),
    ("AssistantMessage", "seen: gate, s1"),
    ("UserMessage", "s2"),
    ("AssistantMessage", "seen: gate, s1, s2"),
    ("UserMessage", "f1"),
    ("AssistantMessage", "seen: gate, s1, s2, f1"),
    ("UserMessage", "f2"),
    ("AssistantMessage", "seen: gate, s1, s2, f1, f2"),
]
ALL = [
    ("UserMessage", "s1"),
    ("UserMessage", "s2"),
    ("AssistantMessage", "seen: gate, s1, s2"),
    ("UserMessage", "f1"),
    ("UserMessage", "f2"),
    ("AssistantMessage", "seen: gate, s1, s2, f1, f2"),
]


@pytest.mark.parametrize(("mode", "expected"), [("one_at_a_time", ONE_AT_A_TIME), ("all", ALL)])
async def test_steering_and_follow_ups_sent_in_flight_are_applied_in_order_as_the_agents_queue_modes_say(
    client: Client, hub: EventHub, queue: str, work_dir: Path, in_process_worker: Any, mode: str,
    expected: list[tuple[str, str]],
) -> None:
    async with in_process_worker():
        run = await _start(client, queue, "gate", hub, steering_mode=mode, follow_up_mode=mode)
        await _until(run, lambda e: e["type"] == "tool_execution_update")
        await run.steer("s1")
        await run.follow_up("f1")
        await run.steer("s2")
        await run.follow_up("f2")
        (work_dir / "gate").touch()
        result = await run.result()

    assert [(type(m).__name__, _text(m)) for m in result.transcript] == [
        ("UserMessage", "gate"),
        ("AssistantMessage", "waiting at the gate"),
        ("ToolResultMessage", "gate open"),
        *expected,
    ]
    assert result.summary.end_reason == "stop"


async def test_abort_cancels_the_running_tool_and_ends_aborted(
    client: Client, hub: EventHub, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    async with in_process_worker():
        run = await _start(client, queue, "gate", hub)
        await _until(run, lambda e: e["type"] == "tool_execution_update")
        await run.abort()
        result = await run.result()

    assert result.summary.end_reason == "aborted"
    last = result.transcript[-1]
    assert isinstance(last, ToolResultMessage) and last.is_error
    assert [type(m).__name__ for m in result.transcript] == ["UserMessage", "AssistantMessage", "ToolResultMessage"]


async def test_approval_pause_waits_durably_and_resumes_from_a_decision(
    client: Client, hub: EventHub, queue: str, work_dir: Path, spawn_worker: Any
) -> None:
    first = await spawn_worker()
    run = await _start(client, queue, "approve", hub)
    paused = await _until(run, lambda e: e["type"] == "agent_end")
    assert paused[-1]["summary"]["end_reason"] == "approval_required"
    state = await run.state()
    assert state["status"] == "awaiting_approval"
    assert [(p["tool_call_id"], p["tool_name"], p["args"]) for p in state["pending"]] == [
        ("call_danger", "danger", {"what": "it"})
    ]
    first.kill()  # nobody is running it while it waits
    await spawn_worker()
    await run.decide({"call_danger": approve()})
    result = await run.result()

    assert [_text(m) for m in result.transcript] == ["approve", "asking", "did it", "after approval: did it"]
    assert result.summary.end_reason == "stop"
    assert (result.summary.turns, result.summary.tool_calls) == (2, 1)
    assert (await run.state())["status"] == "done"


async def test_pure_tools_run_inside_the_workflow_without_an_activity(
    client: Client, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    async with in_process_worker():
        run = await _start(client, queue, "pure")
        result = await run.result()
    assert [_text(m) for m in result.transcript] == ["pure", "doubling", "42", "got 42"]
    history = await run.workflow.fetch_history()
    names = [e.activity_task_scheduled_event_attributes.activity_type.name
             for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
    assert names == ["tester.model", "tester.model"]


async def test_a_long_run_continues_as_new_carrying_the_transcript(
    client: Client, hub: EventHub, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    async with in_process_worker(max_history_events=20):
        run = await _start(client, queue, "rounds 4", hub, max_history_events=20)
        events = [e async for _, e in run.events()]
        result = await run.result()
    assert result.generations > 1
    kinds = [e["type"] for e in events]
    assert (kinds[0], kinds.count("agent_start"), kinds.count("agent_end"), kinds[-1]) == (
        "agent_start", 1, 1, "agent_end"
    )
    assert kinds.count("turn_start") == kinds.count("turn_end") == 5
    assert [_text(m) for m in result.transcript if isinstance(m, AssistantMessage)] == [
        "round 0", "round 1", "round 2", "round 3", "done after 4 rounds",
    ]
    assert _normal(result.messages) == _normal(result.transcript)
    assert (result.summary.turns, result.summary.tool_calls, result.summary.end_reason) == (5, 4, "stop")


async def test_transcript_query_and_session_export(
    client: Client, queue: str, work_dir: Path, in_process_worker: Any, tmp_path: Path
) -> None:
    from ketch.sessions import JsonlStore
    from ketch.sessions import Session
    from ketch.temporal import export_session

    async with in_process_worker():
        run = await _start(client, queue, "hello")
        result = await run.result()
        assert _normal(await run.transcript()) == _normal(result.transcript)
    store = JsonlStore(tmp_path / "sessions")
    session_id = await export_session(result, store, cwd=str(tmp_path))
    session = await Session.open(store, session_id)
    try:
        assert _normal(session.messages) == _normal(result.transcript)
    finally:
        await session.close()
    assert isinstance(result.transcript[0], UserMessage)


async def test_an_unsandboxed_worker_runs_the_same_transcript(
    client: Client, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    from ketch.temporal import build_worker

    async with build_worker(client, task_queue=queue, agents=[test_app.agent()], sandboxed=False):
        run = await _start(client, queue, "rounds 2")
        unsandboxed = _normal((await run.result()).transcript)
    assert unsandboxed == await _uninterrupted(client, queue, in_process_worker, "rounds 2")


async def test_a_transcript_too_large_for_the_history_goes_to_the_session_store(
    client: Client, queue: str, work_dir: Path, tmp_path: Path
) -> None:
    from ketch.sessions import JsonlStore
    from ketch.temporal import build_worker

    store = JsonlStore(tmp_path / "blobs")
    agent = test_app.agent(max_history_events=20, inline_limit=200)
    async with build_worker(client, task_queue=queue, agents=[agent], store=store, sticky_timeout=1.0):
        run = await start_run(client, agent, "rounds 4", task_queue=queue)
        result = await run.result()
    assert result.generations > 1
    assert [_text(m) for m in result.transcript if isinstance(m, AssistantMessage)][-1] == "done after 4 rounds"
    history = await run.workflow.fetch_history()  # the last workflow run, started by continue-as-new
    started = history.events[0].workflow_execution_started_event_attributes
    data = json.loads(started.input.payloads[0].data)
    assert data["transcript"] == []
    session_id, digest = data["transcript_ref"].split(":")
    stored = json.loads(await store.get_blob(session_id, digest))
    assert [m["role"] for m in stored][:3] == ["user", "assistant", "tool_result"]


DENIED = "Permission denied by the user. Reason: No decision within 0.5s; the call was not run"


async def test_an_approval_pause_with_a_timeout_denies_the_call_when_no_decision_comes(
    client: Client, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    async with in_process_worker(approval_timeout=0.5):
        run = await _start(client, queue, "approve", approval_timeout=0.5)
        result = await run.result()
    assert [_text(m) for m in result.transcript] == [
        "approve", "asking", DENIED,
        f"after approval: {DENIED}",
    ]
    history = await run.workflow.fetch_history()
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in history.events if e.HasField("timer_started_event_attributes")]
    assert timers == [timedelta(seconds=0.5)]  # workflow time: a timer in the history


async def test_events_over_http_server_sent_events_resume_from_the_last_id(
    client: Client, hub: EventHub, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    from ketch.temporal import run_handle
    from ketch.temporal import subscribe

    async with in_process_worker():
        run = await _start(client, queue, "rounds 1", hub)
        remote = run_handle(client, run.id, events=hub.url)  # another process would hold only the URL
        seen = [(n, e) async for n, e in remote.events()]
        await run.result()
    assert [n for n, _ in seen] == list(range(1, len(seen) + 1))
    assert [e for _, e in seen] == hub.history(run.id)
    assert (seen[0][1]["type"], seen[-1][1]["type"]) == ("agent_start", "agent_end")
    rest = [(n, e) async for n, e in subscribe(hub.url, run.id, after=len(seen) - 3)]
    assert rest == seen[-3:]


async def test_a_follow_up_sent_while_the_run_is_ending_is_still_run(
    client: Client, queue: str, work_dir: Path, in_process_worker: Any
) -> None:
    import asyncio

    from aiohttp import web

    ending, release = asyncio.Event(), asyncio.Event()
    published: list[dict[str, Any]] = []

    async def post(request: web.Request) -> web.Response:
        items = await request.json()
        published.extend(i["event"] for i in items)
        if any(i["event"]["type"] == "turn_end" for i in items) and not ending.is_set():
            ending.set()  # the loop has ended; the run publishes its last events
            await release.wait()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/runs/{run}/events", post)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with in_process_worker():
            run = await start_run(
                client, test_app.agent(), "hello", task_queue=queue, events=f"http://127.0.0.1:{port}"
            )
            await ending.wait()
            await run.follow_up("more")
            release.set()
            result = await run.result()
    finally:
        await runner.cleanup()
    assert [_text(m) for m in result.transcript] == ["hello", "echo: hello", "more", "echo: hello"]
    assert (result.summary.turns, result.summary.end_reason) == (2, "stop")
    kinds = [e["type"] for e in published]
    # the first agent_end had gone out when the follow-up came; the run's real end follows it
    assert (kinds.count("agent_start"), kinds.count("agent_end"), kinds[-1]) == (1, 2, "agent_end")
    assert [e["summary"]["turns"] for e in published if e["type"] == "agent_end"] == [1, 2]


async def test_a_worker_process_stops_on_sigterm_with_exit_code_0_after_serving_a_run(
    client: Client, queue: str, work_dir: Path, spawn_worker: Any
) -> None:
    worker = await spawn_worker()
    run = await _start(client, queue, "rounds 1")
    assert (await run.result()).summary.end_reason == "stop"
    worker.process.terminate()
    _, err = worker.process.communicate(timeout=30)
    assert (worker.process.returncode, err) == (0, "")
