"""``ketch acp`` driven by the real Agent Client Protocol client (the ``agent-client-protocol``
package's client side, as an editor uses it), on scripted models."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import acp
from acp import spawn_agent_process
from acp.schema import AllowedOutcome
from acp.schema import ClientCapabilities
from acp.schema import CreateTerminalResponse
from acp.schema import FileSystemCapabilities
from acp.schema import KillTerminalResponse
from acp.schema import McpServerStdio
from acp.schema import ReadTextFileResponse
from acp.schema import ReleaseTerminalResponse
from acp.schema import RequestPermissionResponse
from acp.schema import TerminalExitStatus
from acp.schema import TerminalOutputResponse
from acp.schema import WaitForTerminalExitResponse
from acp.schema import WriteTextFileResponse
from clihelp import Env
from clihelp import call_reply
from clihelp import text_reply

GUARD = 60  # a guard against a hung child only; nothing waits on time


class Editor:
    """The client side: records what the agent sends, answers permission requests with the
    queued option ids, and serves the file system from disk (recording each write)."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.updates: list[Any] = []
        self.asked: list[tuple[str, list[str]]] = []
        self.answers = list(answers or [])
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kw: Any) -> Any:
        self.asked.append((tool_call.title, [o.option_id for o in options]))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=self.answers.pop(0), outcome="selected")
        )

    async def read_text_file(
        self, session_id: str, path: str, line: Any = None, limit: Any = None, **kw: Any
    ) -> Any:
        self.reads.append(path)
        return ReadTextFileResponse(content=await asyncio.to_thread(Path(path).read_text))

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> Any:
        self.writes.append((path, content))
        await asyncio.to_thread(Path(path).write_text, content)
        return WriteTextFileResponse()

    def on_connect(self, conn: Any) -> None:
        pass

    def kinds(self) -> list[str]:
        """The updates in order: their kind, with the title of a tool call and the status
        of its updates."""
        out = []
        for u in self.updates:
            kind = u.session_update
            if kind == "tool_call":
                out.append(f"tool_call:{u.kind}:{u.title}")
            elif kind == "tool_call_update":
                out.append(f"tool_call_update:{u.status}")
            elif kind in ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk"):
                if out and out[-1].startswith(kind + ":"):
                    out[-1] += u.content.text
                else:
                    out.append(f"{kind}:{u.content.text}")
            else:
                out.append(kind)
        return out


@asynccontextmanager
async def ketch_acp(env: Env, editor: Editor, *args: str, fs: bool = True) -> AsyncIterator[Any]:
    """``ketch acp`` spawned and initialized; yields the client connection."""
    async with asyncio.timeout(GUARD):
        async with spawn_agent_process(
            editor, sys.executable, "-m", "ketch", "acp", *args, env=env.vars, cwd=str(env.work)
        ) as (conn, _proc):
            capabilities = ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=False
            )
            await conn.initialize(protocol_version=1, client_capabilities=capabilities)
            yield conn


def _script(env: Env, replies: list[Any], name: str = "script.json") -> None:
    env.vars["KETCH_TEST_SCRIPT"] = env.script(replies, name)


async def test_initialize_answers_with_capabilities_and_auth_methods(env: Env) -> None:
    _script(env, [text_reply("unused")])
    async with asyncio.timeout(GUARD):
        async with spawn_agent_process(
            Editor(), sys.executable, "-m", "ketch", "acp", env=env.vars, cwd=str(env.work)
        ) as (conn, _proc):
            answer = await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
    assert answer.protocol_version == 1
    caps = answer.agent_capabilities
    assert caps.load_session is True
    assert (caps.prompt_capabilities.image, caps.prompt_capabilities.embedded_context) == (True, True)
    assert [m.id for m in answer.auth_methods] == ["openai_api_key", "anthropic_api_key", "gemini_api_key"]


async def test_a_prompt_reads_edits_with_a_diff_and_runs_a_command_after_permission(env: Env) -> None:
    (env.work / "a.txt").write_text("hello world\n")
    _script(
        env,
        [
            {
                "blocks": [
                    {"type": "thinking", "thinking": "Let me read."},
                    {"type": "text", "text": "Reading."},
                    *call_reply(("c1", "read", {"path": "a.txt"}))["blocks"],
                ]
            },
            call_reply(("c2", "edit", {"path": "a.txt", "old_string": "world", "new_string": "there"})),
            call_reply(("c3", "bash", {"command": "cat a.txt"})),
            text_reply("Done."),
        ],
    )
    editor = Editor(["allow_once", "allow_once"])
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        assert session.modes.current_mode_id == "default"
        assert [o.id for o in session.config_options] == ["mode", "model", "thinking"]
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("fix a.txt")])
    assert answer.stop_reason == "end_turn"
    assert answer.usage is not None and answer.usage.total_tokens > 0
    assert [k for k in editor.kinds() if k != "usage_update"] == [
        "agent_thought_chunk:Let me read.",
        "agent_message_chunk:Reading.",
        "tool_call:read:Read a.txt",
        "tool_call_update:completed",
        "tool_call:edit:Edit a.txt",
        "tool_call_update:in_progress",
        "tool_call_update:completed",
        "tool_call:execute:`cat a.txt`",
        "tool_call_update:in_progress",
        "tool_call_update:completed",
        "agent_message_chunk:Done.",
    ]
    assert editor.asked == [
        ("Edit a.txt", ["allow_once", "allow_always", "reject_once"]),
        ("`cat a.txt`", ["allow_once", "allow_always", "reject_once"]),
    ]
    calls = [u for u in editor.updates if u.session_update == "tool_call"]
    edit = calls[1]
    assert [loc.path for loc in edit.locations] == [str(env.work / "a.txt")]
    diffs = [
        c
        for u in editor.updates
        if getattr(u, "content", None) and isinstance(u.content, list)
        for c in u.content
    ]
    diff = next(c for c in diffs if c.type == "diff")
    assert (diff.path, diff.old_text, diff.new_text) == (
        str(env.work / "a.txt"),
        "hello world\n",
        "hello there\n",
    )
    # the edit went through the editor's file system, so it lands in the editor's buffer
    assert editor.writes == [(str(env.work / "a.txt"), "hello there\n")]
    assert (env.work / "a.txt").read_text() == "hello there\n"
    command_output = [
        c.content.text
        for u in editor.updates
        if u.session_update == "tool_call_update" and u.status == "completed" and u.content
        for c in u.content
        if c.type == "content"
    ]
    assert command_output[-1].strip() == "hello there"


async def test_a_rejected_call_does_not_run(env: Env) -> None:
    _script(env, [call_reply(("c1", "write", {"path": "a.txt", "content": "new\n"})), text_reply("Stopped.")])
    editor = Editor(["reject_once"])
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("overwrite")])
    assert answer.stop_reason == "end_turn"
    assert editor.asked == [("Write a.txt", ["allow_once", "allow_always", "reject_once"])]
    assert [k for k in editor.kinds() if k != "usage_update"] == [
        "tool_call:edit:Write a.txt",
        "tool_call_update:failed",
        "agent_message_chunk:Stopped.",
    ]
    assert editor.writes == []
    assert not (env.work / "a.txt").exists()


async def test_a_mode_set_by_the_editor_skips_the_question(env: Env) -> None:
    _script(env, [call_reply(("c1", "write", {"path": "b.txt", "content": "new\n"})), text_reply("Written.")])
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="accept_edits")
        try:
            await conn.set_session_mode(session_id=session.session_id, mode_id="acceptEdits")
            raise AssertionError("an unknown mode was accepted")
        except acp.RequestError as exc:
            assert (
                str(exc)
                == "session/set_mode: mode 'acceptEdits' is not one of default, accept_edits, plan, bypass"
            )
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("write b")])
    assert answer.stop_reason == "end_turn"
    assert editor.asked == []
    assert [k for k in editor.kinds() if k != "usage_update"] == [
        "current_mode_update",
        "tool_call:edit:Write b.txt",
        "tool_call_update:completed",
        "agent_message_chunk:Written.",
    ]
    assert editor.updates[0].current_mode_id == "accept_edits"
    assert (env.work / "b.txt").read_text() == "new\n"
    assert editor.writes == [(str(env.work / "b.txt"), "new\n")]


async def test_the_model_config_option_switches_the_model(env: Env) -> None:
    _script(env, [text_reply("From A.")])
    other = env.script([text_reply("From B.")], "b.json")
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.set_config_option(
            config_id="model", session_id=session.session_id, value=f"scripted:{other}"
        )
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("who?")])
    assert answer.stop_reason == "end_turn"
    assert [k for k in editor.kinds() if k.startswith("agent_message_chunk")] == [
        "agent_message_chunk:From B."
    ]


async def test_cancel_stops_a_running_tool_and_the_prompt_answers_cancelled(env: Env) -> None:
    gate = env.work / "gate"
    os.mkfifo(gate)
    _script(env, [call_reply(("c1", "bash", {"command": "read x < gate"})), text_reply("After.")])
    editor = Editor()
    async with ketch_acp(env, editor, "--permission-mode", "bypass") as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        running = asyncio.create_task(
            conn.prompt(session_id=session.session_id, prompt=[acp.text_block("wait")])
        )
        # opening the fifo for writing returns once bash has it open for reading
        writer = await asyncio.to_thread(open, gate, "w")
        try:
            await conn.cancel(session_id=session.session_id)
            answer = await running
        finally:
            writer.close()
        assert answer.stop_reason == "cancelled"
        statuses = [u.status for u in editor.updates if u.session_update == "tool_call_update"]
        assert statuses[-1] == "failed"
        editor.updates.clear()
        after = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("and now?")])
    assert after.stop_reason == "end_turn"
    assert [k for k in editor.kinds() if k != "usage_update"] == ["agent_message_chunk:After."]


async def test_a_saved_session_loads_with_its_conversation_replayed(env: Env) -> None:
    _script(env, [text_reply("First.")], "1.json")
    async with ketch_acp(env, Editor()) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("first prompt")])
    session_id = session.session_id
    _script(env, [text_reply("Second.")], "2.json")
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        listed = await conn.list_sessions(cwd=str(env.work))
        assert [s.session_id for s in listed.sessions] == [session_id]
        await conn.load_session(cwd=str(env.work), session_id=session_id, mcp_servers=[])
        replayed = editor.kinds()
        editor.updates.clear()
        answer = await conn.prompt(session_id=session_id, prompt=[acp.text_block("second prompt")])
    assert replayed == ["user_message_chunk:first prompt", "agent_message_chunk:First."]
    assert answer.stop_reason == "end_turn"
    assert [k for k in editor.kinds() if k != "usage_update"] == ["agent_message_chunk:Second."]
    show = env.run("sessions", "show", session_id)
    assert show.stdout.splitlines() == [
        "user: first prompt",
        "assistant: First.",
        "user: second prompt",
        "assistant: Second.",
    ]


async def test_loading_an_unknown_session_is_an_error_naming_it(env: Env) -> None:
    _script(env, [text_reply("unused")])
    async with ketch_acp(env, Editor()) as conn:
        try:
            await conn.load_session(cwd=str(env.work), session_id="nope", mcp_servers=[])
            raise AssertionError("an unknown session loaded")
        except acp.RequestError as exc:
            assert "nope" in str(exc.data) + str(exc)


class TerminalEditor(Editor):
    """An editor that offers terminals: it runs each command itself and records the calls."""

    def __init__(self, answers: list[str] | None = None) -> None:
        super().__init__(answers)
        self.calls: list[str] = []
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.created: list[tuple[str, list[str], str | None, list[str]]] = []

    async def create_terminal(
        self, session_id: str, command: str, args: Any = None, env: Any = None, cwd: Any = None, **kw: Any
    ) -> Any:
        self.calls.append("create")
        names = [e.name for e in env or []]
        self.created.append((command, list(args or []), cwd, names))
        proc = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            env={e.name: e.value for e in env or []},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal_id = f"t{len(self.procs) + 1}"
        self.procs[terminal_id] = proc
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append("wait_for_exit")
        code = await self.procs[terminal_id].wait()
        return WaitForTerminalExitResponse(exit_code=code)

    async def terminal_output(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append("output")
        proc = self.procs[terminal_id]
        assert proc.stdout is not None
        output = (await proc.stdout.read()).decode()
        return TerminalOutputResponse(
            output=output, truncated=False, exit_status=TerminalExitStatus(exit_code=proc.returncode)
        )

    async def release_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append("release")
        return ReleaseTerminalResponse()

    async def kill_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append("kill")
        self.procs[terminal_id].kill()
        return KillTerminalResponse()


async def test_without_the_sandbox_commands_run_in_the_editors_terminal(env: Env) -> None:
    env.user_config("[sandbox]\nenabled = false\n")
    env.vars["SECRET_TOKEN"] = "s3cret"
    _script(env, [call_reply(("c1", "bash", {"command": "echo from-$((6*7))"})), text_reply("Ran.")])
    editor = TerminalEditor(["allow_once"])
    async with asyncio.timeout(GUARD):
        async with spawn_agent_process(
            editor, sys.executable, "-m", "ketch", "acp", env=env.vars, cwd=str(env.work)
        ) as (conn, _proc):
            await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(terminal=True))
            session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
            answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("run it")])
    assert answer.stop_reason == "end_turn"
    assert editor.calls == ["create", "wait_for_exit", "output", "release"]
    [(command, args, cwd, names)] = editor.created
    assert (os.path.basename(command).endswith("sh"), args, cwd) == (
        True,
        ["-c", "echo from-$((6*7))"],
        str(env.work),
    )
    assert "SECRET_TOKEN" not in names  # the tool's allow-listed environment, not ketch's
    terminal_refs = [
        c.terminal_id
        for u in editor.updates
        if u.session_update == "tool_call_update" and u.content
        for c in u.content
        if c.type == "terminal"
    ]
    assert set(terminal_refs) == {"t1"}  # the call shows the editor terminal it runs in
    # the terminal's output is the tool result the model got
    shown = env.run("sessions", "show", "-o", "json", session.session_id)
    messages = json.loads(shown.stdout)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool_result", "assistant"]
    assert messages[2]["content"] == [{"type": "text", "text": "from-42\n"}]


async def test_resume_continues_a_session_and_fork_copies_it(env: Env) -> None:
    _script(env, [text_reply("First.")], "1.json")
    async with ketch_acp(env, Editor()) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("first prompt")])
    original = session.session_id
    _script(env, [text_reply("Second.")], "2.json")
    third = env.script([text_reply("Third.")], "3.json")  # each session's agent has its own model
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        await conn.resume_session(cwd=str(env.work), session_id=original)
        assert editor.updates == []  # resume does not replay
        await conn.prompt(session_id=original, prompt=[acp.text_block("second prompt")])
        forked = await conn.fork_session(cwd=str(env.work), session_id=original)
        assert forked.session_id != original
        await conn.set_config_option(
            config_id="model", session_id=forked.session_id, value=f"scripted:{third}"
        )
        await conn.prompt(session_id=forked.session_id, prompt=[acp.text_block("third prompt")])
        listed = await conn.list_sessions(cwd=str(env.work))
    assert sorted(s.session_id for s in listed.sessions) == sorted([original, forked.session_id])
    assert env.run("sessions", "show", forked.session_id).stdout.splitlines() == [
        "user: first prompt",
        "assistant: First.",
        "user: second prompt",
        "assistant: Second.",
        "user: third prompt",
        "assistant: Third.",
    ]
    assert env.run("sessions", "show", original).stdout.splitlines()[-1] == "assistant: Second."


async def test_an_mcp_server_from_the_editor_gives_its_tools(env: Env) -> None:
    args = {"source_timezone": "UTC", "time": "16:30", "target_timezone": "Asia/Tokyo"}
    _script(env, [call_reply(("c1", "mcp__time__convert_time", args)), text_reply("Converted.")])
    editor = Editor(["allow_once"])
    server = McpServerStdio(
        name="time", command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"], env=[]
    )
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[server])
        answer = await conn.prompt(
            session_id=session.session_id, prompt=[acp.text_block("16:30 UTC in Tokyo?")]
        )
    assert answer.stop_reason == "end_turn"
    assert editor.asked == [("mcp__time__convert_time", ["allow_once", "allow_always", "reject_once"])]
    [done] = [u for u in editor.updates if u.session_update == "tool_call_update" and u.status == "completed"]
    assert '"datetime": "2' in done.content[0].content.text and "+09:00" in done.content[0].content.text


async def test_initialize_does_not_wait_for_the_options_a_bad_one_fails_session_new(env: Env) -> None:
    _script(env, [text_reply("unused")])
    # initialize is answered first; then ketch checks its options and ends on a bad one
    async with ketch_acp(env, Editor(), "--permission-mode", "careful") as conn:
        try:
            await conn.new_session(cwd=str(env.work), mcp_servers=[])
            raise AssertionError("a bad option was accepted")
        except acp.RequestError as exc:
            assert str(exc) == "session/new: ketch acp was started with invalid options (see its stderr)"


async def test_a_relative_cwd_is_an_error_naming_it(env: Env) -> None:
    _script(env, [text_reply("unused")])
    async with ketch_acp(env, Editor()) as conn:
        try:
            await conn.new_session(cwd="relative/dir", mcp_servers=[])
            raise AssertionError("a relative cwd was accepted")
        except acp.RequestError as exc:
            assert str(exc) == "session/new: \"cwd\" must be an absolute path, got 'relative/dir'"


async def test_a_closed_session_takes_no_prompt_and_can_be_loaded_again(env: Env) -> None:
    _script(env, [text_reply("First.")])
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("first prompt")])
        await conn.close_session(session_id=session.session_id)
        try:
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("again")])
            raise AssertionError("a closed session took a prompt")
        except acp.RequestError as exc:
            assert str(exc) == (
                f"session/prompt: no open session {session.session_id!r} "
                "(session/new, session/load or session/resume opens one)"
            )
        editor.updates.clear()
        await conn.load_session(cwd=str(env.work), session_id=session.session_id, mcp_servers=[])
    assert editor.kinds() == ["user_message_chunk:first prompt", "agent_message_chunk:First."]


async def test_custom_commands_are_announced_and_a_prompt_naming_one_runs_it_expanded(env: Env) -> None:
    commands = env.xdg / "ketch" / "commands"
    commands.mkdir(parents=True)
    (commands / "greet.md").write_text(
        "---\ndescription: Greet someone\nargument-hint: NAME\n---\nSay hello to $ARGUMENTS in French.\n"
    )
    requests = env.home / "requests.jsonl"
    env.vars["KETCH_TEST_REQUESTS"] = str(requests)
    _script(env, [text_reply("Bonjour, Ada.")])
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("/greet Ada")])
    assert answer.stop_reason == "end_turn"
    announced = [u for u in editor.updates if u.session_update == "available_commands_update"]
    assert [(c.name, c.description, c.input.root.hint) for c in announced[0].available_commands] == [
        ("greet", "Greet someone", "NAME")
    ]
    assert editor.kinds()[0] == "available_commands_update"
    asked = [json.loads(line) for line in requests.read_text().splitlines()]
    assert json.dumps(asked[0]["messages"][-1]).count("Say hello to Ada in French.") == 1


async def test_the_to_do_list_is_sent_as_the_plan_and_replayed_on_load(env: Env) -> None:
    first = [
        {"content": "Read the parser", "status": "in_progress", "priority": "high"},
        {"content": "Fix the bug", "status": "pending"},
    ]
    second = [
        {"content": "Read the parser", "status": "completed", "priority": "high"},
        {"content": "Fix the bug", "status": "in_progress"},
    ]
    _script(
        env,
        [
            call_reply(("t1", "todo_write", {"todos": first})),
            call_reply(("t2", "todo_write", {"todos": second})),
            text_reply("On it."),
        ],
    )
    editor = Editor()  # no answers queued: a permission request would fail the test
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("fix it")])
    assert answer.stop_reason == "end_turn"
    assert editor.asked == []
    assert [k for k in editor.kinds() if k != "usage_update"] == [
        "tool_call:think:Update the plan",
        "tool_call_update:completed",
        "plan",
        "tool_call:think:Update the plan",
        "tool_call_update:completed",
        "plan",
        "agent_message_chunk:On it.",
    ]
    plans = [
        [(e.content, e.status, e.priority) for e in u.entries] for u in editor.updates if u.session_update == "plan"
    ]
    assert plans == [
        [("Read the parser", "in_progress", "high"), ("Fix the bug", "pending", "medium")],
        [("Read the parser", "completed", "high"), ("Fix the bug", "in_progress", "medium")],
    ]

    _script(env, [text_reply("unused")], "2.json")
    loaded = Editor()
    async with ketch_acp(env, loaded) as conn:
        await conn.load_session(cwd=str(env.work), session_id=session.session_id, mcp_servers=[])
    replayed = [u for u in loaded.updates if u.session_update == "plan"]
    assert [[(e.content, e.status) for e in u.entries] for u in replayed][-1] == [
        ("Read the parser", "completed"),
        ("Fix the bug", "in_progress"),
    ]


async def test_session_delete_removes_a_saved_session(env: Env) -> None:
    _script(env, [text_reply("Kept."), text_reply("Gone.")])
    async with ketch_acp(env, Editor()) as conn:
        kept = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.prompt(session_id=kept.session_id, prompt=[acp.text_block("keep me")])
        gone = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.prompt(session_id=gone.session_id, prompt=[acp.text_block("delete me")])
        raw = conn._conn  # the package's client has no delete_session: the raw request
        try:
            await raw.send_request("session/delete", {"sessionId": gone.session_id})
            raise AssertionError("an open session was deleted")
        except acp.RequestError as exc:
            assert str(exc) == f"session/delete: session {gone.session_id} is open; close it first (session/close)"
        await conn.close_session(session_id=gone.session_id)
        assert await raw.send_request("session/delete", {"sessionId": gone.session_id}) == {}
        try:
            await raw.send_request("session/delete", {"sessionId": gone.session_id})
            raise AssertionError("a deleted session was deleted again")
        except acp.RequestError as exc:
            assert (exc.code, str(exc)) == (-32002, f"session/delete: no saved session {gone.session_id!r}")
        listed = await conn.list_sessions(cwd=str(env.work))
    assert [s.session_id for s in listed.sessions] == [kept.session_id]
    assert env.run("sessions", "show", gone.session_id).returncode != 0


async def test_usage_updates_follow_each_response_and_set_model_and_thinking_apply(env: Env) -> None:
    usage = {"input": 10, "output": 2, "total_tokens": 12, "cost": {"total": 0.25}}
    _script(env, [text_reply("unused")])
    other = env.script(
        [call_reply(("t1", "ls", {"path": "."}), usage=usage), text_reply("Done.", usage=usage)], "b.json"
    )
    editor = Editor()
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        sid = session.session_id
        # the unstable session/set_model, which the package's client sends only in its unstable mode
        assert await conn._conn.send_request("session/set_model", {"sessionId": sid, "modelId": f"scripted:{other}"}) == {}
        answer = await conn.set_config_option(config_id="thinking", session_id=sid, value="high")
        assert [o.current_value for o in answer.config_options] == ["default", "scripted:scripted-model", "high"]
        try:
            await conn.set_config_option(config_id="thinking", session_id=sid, value="max")
            raise AssertionError("an unknown thinking level was accepted")
        except acp.RequestError as exc:
            assert str(exc) == (
                "session/set_config_option: thinking level 'max' is not one of off, minimal, low, medium, high, xhigh"
            )
        await conn.prompt(session_id=sid, prompt=[acp.text_block("look")])
    assert editor.kinds() == [
        "usage_update",
        "tool_call:search:Ls .",
        "tool_call_update:completed",
        "agent_message_chunk:Done.",
        "usage_update",
    ]
    usages = [u for u in editor.updates if u.session_update == "usage_update"]
    assert [(u.cost.amount, u.cost.currency) for u in usages] == [(0.25, "USD"), (0.5, "USD")]
    assert all(u.size > 0 and u.used > 0 for u in usages)


class DirtyEditor(Editor):
    """An editor whose buffer of a file holds unsaved changes."""

    def __init__(self, buffers: dict[str, str], answers: list[str]) -> None:
        super().__init__(answers)
        self.buffers = buffers

    async def read_text_file(
        self, session_id: str, path: str, line: Any = None, limit: Any = None, **kw: Any
    ) -> Any:
        self.reads.append(path)
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        return await super().read_text_file(session_id, path, line, limit, **kw)


async def test_an_edit_is_refused_while_the_editors_buffer_has_unsaved_changes(env: Env) -> None:
    target = env.work / "a.txt"
    target.write_text("hello world\n")
    _script(
        env,
        [
            call_reply(("c1", "read", {"path": "a.txt"})),
            call_reply(("c2", "edit", {"path": "a.txt", "old_string": "world", "new_string": "there"})),
            text_reply("Waiting."),
        ],
    )
    editor = DirtyEditor({str(target): "hello world, unsaved\n"}, ["allow_once"])
    async with ketch_acp(env, editor) as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("edit it")])
    assert editor.reads == [str(target)]
    assert editor.writes == []
    assert target.read_text() == "hello world\n"
    failed = [u for u in editor.updates if u.session_update == "tool_call_update" and u.status == "failed"]
    assert [c.content.text for u in failed for c in u.content] == [
        "a.txt has unsaved changes in the editor. Ask the user to save or discard them, "
        "then read the file again before you change it."
    ]


async def test_prompt_content_blocks_reach_the_model_and_each_stop_reason_is_answered(env: Env) -> None:
    requests = env.home / "requests.jsonl"
    env.vars["KETCH_TEST_REQUESTS"] = str(requests)
    _script(
        env,
        [
            text_reply("Seen."),
            # cut at the output limit, and still cut after the loop's three recoveries
            *[{"blocks": [{"type": "text", "text": "Cut"}], "stop_reason": "length"}] * 4,
            *[call_reply((f"c{i}", "ls", {"path": "."})) for i in range(5)],
            {"error": "upstream broke", "error_kind": "server"},
        ],
    )
    async with ketch_acp(env, Editor(), "--max-turns", "5") as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        sid = session.session_id
        blocks = [
            acp.text_block("look at these"),
            acp.resource_link_block(name="notes", uri="file:///tmp/notes.md"),
            acp.resource_block(acp.embedded_text_resource("file:///tmp/a.py", "x = 1")),
        ]
        seen = await conn.prompt(session_id=sid, prompt=blocks)
        cut = await conn.prompt(session_id=sid, prompt=[acp.text_block("long answer")])
        turns = await conn.prompt(session_id=sid, prompt=[acp.text_block("list")])
        try:
            await conn.prompt(session_id=sid, prompt=[acp.text_block("again")])
            raise AssertionError("a model error was answered as a stop reason")
        except acp.RequestError as exc:
            assert str(exc).startswith("session/prompt: the run failed: ") and "upstream broke" in str(exc)
        try:
            await conn._conn.send_request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "audio", "data": "", "mimeType": "audio/wav"}]}
            )
            raise AssertionError("an audio block was accepted")
        except acp.RequestError as exc:
            assert str(exc) == (
                "session/prompt: prompt[0]: content of type 'audio' is not supported "
                "(text, image, resource_link, resource)"
            )
    assert [seen.stop_reason, cut.stop_reason, turns.stop_reason] == ["end_turn", "max_tokens", "max_turn_requests"]
    first = json.loads(requests.read_text().splitlines()[0])
    assert first["messages"][0]["content"] == [
        {
            "type": "text",
            "text": 'look at these\n[notes](file:///tmp/notes.md)\n<context uri="file:///tmp/a.py">\nx = 1\n</context>',
        }
    ]


async def test_authenticate_checks_the_key_variable(env: Env) -> None:
    _script(env, [text_reply("unused")])
    env.vars.pop("ANTHROPIC_API_KEY", None)
    env.vars["OPENAI_API_KEY"] = "sk-test-not-a-real-key"
    async with ketch_acp(env, Editor()) as conn:
        await conn.authenticate(method_id="openai_api_key")
        for method, message in [
            ("anthropic_api_key", "authenticate: ANTHROPIC_API_KEY is not set in ketch's environment; set it in the editor's agent settings"),
            ("github", "authenticate: unknown auth method 'github'; ketch offers openai_api_key, anthropic_api_key, gemini_api_key"),
        ]:
            try:
                await conn.authenticate(method_id=method)
                raise AssertionError(f"{method} was accepted")
            except acp.RequestError as exc:
                assert str(exc) == message
