"""Sessions bound to an Agent: persist as messages commit, restore exactly, fork, rewind,
pause for approval and resume from the session, secrets kept out, for both stores."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest

from ketch import Agent
from ketch import CustomMessage
from ketch import Tool
from ketch import approve
from ketch import message_to_dict
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.sessions import SessionLockedError
from ketch.sessions import SessionStore
from ketch.sessions import SqliteStore
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import BashTool
from ketch.tools import EditTool
from ketch.tools import ReadTool
from ketch.tools import Workspace
from ketch.tools import WriteTool

SCHEMA = {"type": "object", "properties": {"k": {"type": "string"}}}
SECRET = "sk-test-SECRET-0123456789abcdef"


class Bookmark(CustomMessage, tag="bookmark"):
    """A custom message kind, to check custom messages round-trip."""

    note: str
    kind: ClassVar[str] = "bookmark"


@pytest.fixture(params=["jsonl", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SessionStore:
    if request.param == "jsonl":
        return JsonlStore(tmp_path / "store")
    return SqliteStore(tmp_path / "store.db")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root.resolve()


def text(m: Any) -> str:
    if isinstance(m, UserMessage):
        return m.content if isinstance(m.content, str) else "".join(getattr(b, "text", "") for b in m.content)
    return str(m.text)


def texts(messages: list[Any]) -> list[str]:
    return [text(m) for m in messages]


def stored_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "work" not in p.parts]


def dicts(messages: list[Any]) -> list[dict[str, Any]]:
    return [message_to_dict(m) for m in messages]


async def test_each_message_is_persisted_when_it_commits(store: SessionStore, work: Path) -> None:
    session = await Session.create(store, cwd=work)
    seen: list[list[str]] = []

    async def peek(args: dict[str, Any], ctx: Any) -> str:
        # While the tool runs, the user prompt and the assistant's call are already stored.
        entries = await store.load(session.id)
        seen.append([e.payload["message"]["role"] for e in entries if e.type == "message"])
        return "peeked"

    model = ScriptedModel([reply(tool_call("peek", {}, id="p1")), "done"])
    agent = Agent(model, tools=[Tool("peek", "", SCHEMA, peek)], session=session)
    await agent.prompt("hello")
    assert seen == [["user", "assistant"]]
    entries = await store.load(session.id)
    assert [e.type for e in entries] == [
        "session", "model_change", "thinking_change",
        "message", "message", "message", "message", "run_summary",
    ]
    assert [e.parent_id for e in entries[1:]] == [e.id for e in entries[:-1]]
    assert session.message_ids == [e.id for e in entries if e.type == "message"]
    await session.close()


async def test_reopening_restores_exactly_the_saved_state(store: SessionStore, work: Path) -> None:
    session = await Session.create(store, cwd=work)
    agent = Agent(ScriptedModel(["first answer"]), session=session, thinking="low")
    await agent.prompt("one")
    agent.messages.append(Bookmark(note="here"))
    await session.record_permission_mode("plan")
    await session.close()
    saved = dicts(agent.messages)

    again = await Session.open(store, session.id)
    assert again.model == "scripted:scripted-model"
    assert again.thinking == "low"
    assert again.permission_mode == "plan"
    model = ScriptedModel(["second answer"])
    resumed = Agent(model, session=again)
    assert dicts(resumed.messages) == saved
    assert isinstance(resumed.messages[-1], Bookmark)
    await resumed.prompt("two")
    # The model saw the earlier conversation.
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "user"]
    await again.close()
    info = await store.info(session.id)
    assert (info.title, info.message_count) == ("one", 5)


async def test_a_second_writer_gets_the_lock_error(store: SessionStore, work: Path) -> None:
    session = await Session.create(store, cwd=work)
    with pytest.raises(SessionLockedError) as locked:
        await Session.open(store, session.id)
    assert str(locked.value).startswith(f"Session {session.id} is open in this process")
    await session.close()
    reopened = await Session.open(store, session.id)
    await reopened.close()


async def test_latest_continues_the_directorys_newest_session(store: SessionStore, work: Path) -> None:
    assert await Session.latest(store, cwd=work) is None
    first = await Session.create(store, cwd=work)
    await Agent(ScriptedModel(["a"]), session=first).prompt("older")
    await first.close()
    second = await Session.create(store, cwd=work)
    await Agent(ScriptedModel(["b"]), session=second).prompt("newer")
    await second.close()
    latest = await Session.latest(store, cwd=work)
    assert latest is not None and latest.id == second.id
    assert text(latest.messages[0]) == "newer"
    await latest.close()


async def test_fork_at_a_message_is_a_new_session_with_its_parent_recorded(store: SessionStore, work: Path) -> None:
    session = await Session.create(store, cwd=work)
    agent = Agent(ScriptedModel(["A1", "A2"]), session=session)
    await agent.prompt("q1")
    await agent.prompt("q2")
    first_answer = session.message_ids[1]
    fork = await session.fork(at=first_answer)
    assert fork.id != session.id
    assert texts(fork.messages) == ["q1", "A1"]  # type: ignore[attr-defined]
    branch = Agent(ScriptedModel(["B2"]), session=fork)
    await branch.prompt("other q2")
    await fork.close()
    await session.close()
    info = await store.info(fork.id)
    assert info.forked_from == (session.id, first_answer)
    parent = await Session.open(store, session.id)
    assert texts(parent.messages) == ["q1", "A1", "q2", "A2"]  # type: ignore[attr-defined]
    await parent.close()
    with pytest.raises(ValueError) as bad:
        await parent.fork(at="nope")
    assert str(bad.value) == f"Message 'nope' is not in session {session.id}"


async def test_a_rewritten_transcript_is_recorded_and_reloads(store: SessionStore, work: Path) -> None:
    session = await Session.create(store, cwd=work)
    agent = Agent(ScriptedModel(["A1", "A2"]), session=session)
    await agent.prompt("q1")
    summary = UserMessage(content="summary of q1")
    agent.messages = [summary, *agent.messages[1:]]
    await agent.prompt("q2")
    await session.close()
    again = await Session.open(store, session.id)
    assert dicts(again.messages) == dicts(agent.messages)
    assert [m.role for m in again.messages] == ["user", "assistant", "user", "assistant"]
    await again.close()


async def test_rewind_restores_files_and_truncates_the_conversation(store: SessionStore, work: Path) -> None:
    (work / "a.txt").write_bytes(b"one\ntwo\n")
    (work / "b.txt").write_bytes(b"keep me\n")
    ws = Workspace(work)
    model = ScriptedModel([
        "nothing yet",
        reply(tool_call("write", {"path": "new.txt", "content": "created\n"}, id="w")),
        reply(tool_call("read", {"path": "a.txt"}, id="r")),
        reply(tool_call("edit", {"path": "a.txt", "old_string": "one", "new_string": "ONE"}, id="e")),
        reply(tool_call("bash", {"command": "sed -i 's/keep/changed/' b.txt"}, id="s")),
        "all done",
    ])
    session = await Session.create(store, cwd=work)
    agent = Agent(model, tools=[ReadTool(ws), WriteTool(ws), EditTool(ws), BashTool(ws)], session=session)
    await agent.prompt("look")
    mark = session.message_ids[-1]
    await agent.prompt("change things")
    assert (work / "a.txt").read_bytes() == b"ONE\ntwo\n"
    assert (work / "b.txt").read_bytes() == b"changed me\n"
    assert (work / "new.txt").exists()
    report = await session.rewind(mark)
    assert (work / "a.txt").read_bytes() == b"one\ntwo\n"
    assert (work / "b.txt").read_bytes() == b"keep me\n"
    assert not (work / "new.txt").exists()
    assert report.conflicts == []
    assert texts(agent.messages) == ["look", "nothing yet"]  # type: ignore[attr-defined]
    await session.close()
    again = await Session.open(store, session.id)
    assert dicts(again.messages) == dicts(agent.messages)
    await again.close()


async def test_rewind_reports_files_changed_outside_the_agent(store: SessionStore, work: Path) -> None:
    ws = Workspace(work)
    model = ScriptedModel(["ok", reply(tool_call("write", {"path": "f.txt", "content": "agent\n"}, id="w")), "done"])
    session = await Session.create(store, cwd=work)
    agent = Agent(model, tools=[WriteTool(ws)], session=session)
    await agent.prompt("start")
    mark = session.message_ids[-1]
    await agent.prompt("write")
    (work / "f.txt").write_bytes(b"the user's edit\n")
    report = await session.rewind(mark, conversation=False)
    assert report.conflicts == ["f.txt"]
    assert (work / "f.txt").read_bytes() == b"the user's edit\n"
    assert len(agent.messages) == 6
    await session.close()


async def test_a_paused_run_is_stored_and_resumes_from_the_session(store: SessionStore, work: Path) -> None:
    ran: list[str] = []

    async def danger(args: dict[str, Any], ctx: Any) -> str:
        ran.append(args.get("k", ""))
        return "done it"

    def tools() -> list[Tool]:
        return [Tool("danger", "", SCHEMA, danger, requires_approval=True)]

    session = await Session.create(store, cwd=work)
    agent = Agent(ScriptedModel([reply(tool_call("danger", {"k": "x"}, id="d1"))]), tools=tools(), session=session)
    paused = await agent.prompt("go")
    assert paused.end_reason == "approval_required"
    await session.close()

    again = await Session.open(store, session.id)
    state = again.pending_state
    assert state is not None and [p.tool_call_id for p in state.pending] == ["d1"]
    resumed = Agent(ScriptedModel(["finished"]), tools=tools(), session=again)
    result = await resumed.resume(state, decisions={"d1": approve()})
    assert result.end_reason == "stop"
    assert ran == ["x"]
    assert again.pending_state is None
    await again.close()
    third = await Session.open(store, session.id)
    assert third.pending_state is None
    assert [m.role for m in third.messages] == ["user", "assistant", "tool_result", "assistant"]
    results = [m for m in third.messages if isinstance(m, ToolResultMessage)]
    assert results[0].text == "done it"
    await third.close()


async def test_no_api_key_reaches_the_session_files(tmp_path: Path, work: Path) -> None:
    for store in (JsonlStore(tmp_path / "s"), SqliteStore(tmp_path / "s.db")):
        session = await Session.create(store, cwd=work)
        agent = Agent(
            ScriptedModel(["fine"]),
            session=session,
            options=StreamOptions(api_key=SECRET),
            get_api_key=lambda provider: SECRET,
        )
        await agent.prompt("use the key")
        await session.close()
    stored = stored_files(tmp_path)
    assert stored
    for path in stored:
        assert SECRET.encode() not in path.read_bytes(), path


async def test_a_compaction_is_recorded_with_its_reason_and_reloads(store: SessionStore, work: Path) -> None:
    from ketch.context import Compactor

    long = "x" * 4000
    model = ScriptedModel([f"answer {i} {long}" for i in range(6)] + ["## Goal\nsummarised"])
    session = await Session.create(store, cwd=work)
    agent = Agent(model, session=session, context_manager=Compactor(window=100_000, keep_recent_tokens=300))
    for i in range(6):
        await agent.prompt(f"question {i}")
    assert await agent.compact() is True
    await session.close()
    entries = await store.load(session.id)
    [compaction] = [e for e in entries if e.type == "compaction"]
    assert compaction.payload["reason"] == "manual"
    again = await Session.open(store, session.id)
    assert dicts(again.messages) == dicts(agent.messages)
    assert type(again.messages[0]).__name__ == "ContextSummary"
    await again.close()


async def test_a_compaction_summary_loads_in_a_process_that_never_imported_ketch_context(
    tmp_path: Path, work: Path
) -> None:
    import subprocess
    import sys

    from ketch.context import ContextSummary

    store = JsonlStore(tmp_path / "store")
    session = await Session.create(store, cwd=work)
    agent = Agent(ScriptedModel(["a"]), session=session)
    await agent.prompt("q")
    agent.messages = [ContextSummary(summary="## Goal\nq"), *agent.messages[1:]]
    await session.close()
    code = (
        "import asyncio, sys\n"
        "from ketch.sessions import JsonlStore, Session\n"
        "async def main():\n"
        "    s = await Session.open(JsonlStore(sys.argv[1]), sys.argv[2])\n"
        "    print(type(s.messages[0]).__name__, len(s.messages))\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code, str(tmp_path / "store"), session.id],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ContextSummary 2\n", "")


async def test_checkpoints_leave_out_what_the_bash_sandbox_hides(store: SessionStore, work: Path, tmp_path: Path) -> None:
    """A session's checkpoints never copy a file the agent's bash may not read (its keys)."""
    from ketch.tools import coding_tools

    (work / ".env").write_text("TOKEN=sk-test-LEAKCHECK-0123\n")
    session = await Session.create(store, cwd=work)
    tools = coding_tools(work, sandbox=None, hidden=[work / ".env"])
    model = ScriptedModel([reply(tool_call("bash", {"command": "echo x > a.txt"}, id="b1")), "done"])
    agent = Agent(model, tools=tools, session=session)
    await agent.prompt("go")
    await session.close()
    assert (work / "a.txt").read_text() == "x\n"
    saved = stored_files(tmp_path)  # the store's files (and blobs), not the workspace
    assert saved and not any(b"LEAKCHECK" in p.read_bytes() for p in saved)


async def test_provider_hosted_tool_blocks_are_saved_and_restored_exactly(store: SessionStore, work: Path) -> None:
    from ketch.llm import Citation
    from ketch.llm import HostedToolCall
    from ketch.llm import HostedToolResult

    native = {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": [{"encrypted_content": "Eq==", "url": "https://a.example"}]}
    call = HostedToolCall(id="srv_1", kind="web_search", name="web_search", input={"query": "q"}, native={"type": "server_tool_use", "id": "srv_1"})
    found = HostedToolResult(call_id="srv_1", kind="web_search", output="<https://a.example>", citations=[Citation(url="https://a.example")], native=native)
    session = await Session.create(store, cwd=work)
    agent = Agent(ScriptedModel([reply(call, found, "Found it.")]), session=session)
    await agent.prompt("search")
    await session.close()
    again = await Session.open(store, session.id)
    resumed = Agent(ScriptedModel(["ok"]), session=again)
    assert resumed.messages[-1].content == [call, found, TextContent(text="Found it.")]  # type: ignore[attr-defined]
    await again.close()
