"""Sessions in the ``ketch`` command: every run saved, resume, continue, list, show,
export, delete, ``--no-session``, and a run paused for approval continued in another
process. Black-box: the command as a subprocess on scripted models or a loopback
OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from clihelp import Env
from clihelp import FakeServer
from clihelp import call_reply
from clihelp import lines
from clihelp import text_reply

HEX_ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def store_dir(env: Env, tmp_path: Path) -> Path:
    """The sessions live under ``KETCH_HOME`` in the test's own directory; times in UTC."""
    home = tmp_path / "ketch-home"
    env.vars["KETCH_HOME"] = str(home)
    env.vars["TZ"] = "UTC"
    return home / "sessions"


def _json(proc: Any) -> Any:
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


def _run_json(env: Env, script: list[Any], *args: str, code: int = 0) -> dict[str, Any]:
    path = env.script(script, name=f"script-{time.monotonic_ns()}.json")
    proc = env.run("run", "-o", "json", "--model", f"scripted:{path}", *args)
    assert proc.returncode == code, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def _messages(env: Env, session_id: str) -> list[dict[str, Any]]:
    proc = env.run("sessions", "show", session_id, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    messages: list[dict[str, Any]] = json.loads(proc.stdout)["messages"]
    return messages


def _texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for m in messages:
        text = "".join(b.get("text", "") for b in m.get("content", []) if b.get("type") == "text")
        out.append((m["role"], text))
    return out


# --- every run has a session -------------------------------------------------------------


def test_json_result_and_stream_json_init_carry_the_session_id(env: Env, store_dir: Path) -> None:
    result = _run_json(env, [text_reply("Hello.")], "say hi")
    session_id = result["session_id"]
    assert HEX_ID.fullmatch(session_id)
    assert (result["end_reason"], result["pending_approvals"]) == ("stop", [])

    script = env.script([text_reply("Again.")])
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "say it again")
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert events[0]["type"] == "init" and events[-1]["type"] == "result"
    assert HEX_ID.fullmatch(events[0]["session_id"])
    assert events[-1]["session_id"] == events[0]["session_id"] != session_id

    listing = _json(env.run("sessions", "list", "-o", "json"))
    for info in listing:
        assert info.pop("created") <= info.pop("updated")
    assert listing == [
        {
            "id": events[0]["session_id"],
            "cwd": str(env.work),
            "title": "say it again",
            "message_count": 2,
            "cost": 0.0,
            "forked_from": None,
        },
        {
            "id": session_id,
            "cwd": str(env.work),
            "title": "say hi",
            "message_count": 2,
            "cost": 0.0,
            "forked_from": None,
        },
    ]
    assert _texts(_messages(env, session_id)) == [("user", "say hi"), ("assistant", "Hello.")]


def test_no_session_writes_nothing(env: Env, store_dir: Path) -> None:
    result = _run_json(env, [text_reply("Hello.")], "--no-session", "say hi")
    assert (result["session_id"], result["text"]) == (None, "Hello.")
    script = env.script([text_reply("Hello.")])
    proc = env.run("run", "-o", "stream-json", "--no-session", "--model", f"scripted:{script}", "say hi")
    assert lines(proc.stdout)[0]["session_id"] is None
    assert _files(store_dir.parent) == []


# --- resume and continue ------------------------------------------------------------------


def test_resume_continues_with_the_earlier_transcript_sent_to_the_model(
    env: Env, store_dir: Path, fake_server: FakeServer
) -> None:
    env.user_config(f'[providers.fake]\nbase_url = "{fake_server.base_url}"\napi_key_env = "FAKE_KEY"\n')
    keys = {"FAKE_KEY": fake_server.good_key}
    first = env.run("run", "-o", "json", "--model", "fake:m1", "remember the word kestrel", extra=keys)
    assert first.returncode == 0, first.stderr
    session_id = json.loads(first.stdout)["session_id"]
    second = env.run("run", "-o", "json", "--model", "fake:m1", "--resume", session_id, "which word?", extra=keys)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["session_id"] == session_id
    posts = [json.loads(body) for method, _, _, body in fake_server.requests if method == "POST"]
    assert len(posts) == 2
    sent = [(m["role"], m["content"]) for m in posts[1]["messages"] if m["role"] != "system"]
    assert sent == [
        ("user", "remember the word kestrel"),
        ("assistant", "Hi from the fake."),
        ("user", "which word?"),
    ]
    assert _texts(_messages(env, session_id)) == [
        ("user", "remember the word kestrel"),
        ("assistant", "Hi from the fake."),
        ("user", "which word?"),
        ("assistant", "Hi from the fake."),
    ]
    # a unique prefix of the id is enough
    third = env.run("run", "-o", "json", "--model", "fake:m1", "--resume", session_id[:10], "and now?", extra=keys)
    assert json.loads(third.stdout)["session_id"] == session_id


def test_api_key_from_the_environment_is_in_no_session_file(env: Env, store_dir: Path, fake_server: FakeServer) -> None:
    env.user_config(f'[providers.fake]\nbase_url = "{fake_server.base_url}"\napi_key_env = "FAKE_KEY"\n')
    keys = {"FAKE_KEY": fake_server.good_key, "OPENAI_API_KEY": "sk-openai-secret-5555555555555555"}
    proc = env.run("run", "-o", "json", "--model", "fake:m1", "hello", extra=keys)
    assert proc.returncode == 0, proc.stderr
    # a paused run records its state (transcript, pending calls, configuration) too
    script = env.script([call_reply(("c1", "write", {"path": "a.txt", "content": "x"}))])
    paused = env.run("run", "-o", "json", "--model", f"scripted:{script}", "write a", extra=keys)
    assert paused.returncode == 5, paused.stderr
    files = _files(store_dir)
    assert files
    for path in files:
        data = path.read_bytes()
        for secret in keys.values():
            assert secret.encode() not in data, path


def test_continue_picks_the_latest_session_of_the_directory(env: Env, store_dir: Path) -> None:
    older = _run_json(env, [text_reply("one")], "first task")["session_id"]
    newer = _run_json(env, [text_reply("two")], "second task")["session_id"]
    elsewhere = env.work / "elsewhere"
    elsewhere.mkdir()
    other = _run_json(env, [text_reply("three")], "-C", str(elsewhere), "other directory")["session_id"]
    assert len({older, newer, other}) == 3
    result = _run_json(env, [text_reply("four")], "--continue", "third task")
    assert result["session_id"] == newer
    assert _texts(_messages(env, newer)) == [
        ("user", "second task"),
        ("assistant", "two"),
        ("user", "third task"),
        ("assistant", "four"),
    ]
    in_work = [i["id"] for i in _json(env.run("sessions", "list", "-o", "json"))]
    assert in_work == [newer, older]
    everywhere = [i["id"] for i in _json(env.run("sessions", "list", "--all", "-o", "json"))]
    assert sorted(everywhere) == sorted([newer, older, other])


def test_continue_with_no_session_in_the_directory_is_a_usage_error(env: Env, store_dir: Path) -> None:
    script = env.script([text_reply("x")])
    proc = env.run("run", "--model", f"scripted:{script}", "--continue", "go")
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        f"ketch: --continue: no saved session in {env.work}; start one without --continue\n",
    )


# --- ketch sessions ---------------------------------------------------------------------


def test_list_show_export_and_delete(env: Env, store_dir: Path) -> None:
    script = [
        call_reply(("c1", "ls", {"path": "."})),
        text_reply("The folder is empty."),
    ]
    session_id = _run_json(env, script, "what is here?")["session_id"]
    (info,) = _json(env.run("sessions", "list", "-o", "json"))
    updated = time.strftime("%Y-%m-%d %H:%M", time.gmtime(info["updated"]))

    listing = env.run("sessions", "list")
    assert (listing.returncode, listing.stderr) == (0, "")
    assert listing.stdout == (
        f"  {'ID':<32}  {'UPDATED':<16}  MSGS      COST  TITLE\n"
        f"  {session_id}  {updated}     4  $ 0.0000  what is here?\n"
    )

    show = env.run("sessions", "show", session_id)
    assert (show.returncode, show.stderr) == (0, "")
    assert show.stdout == (
        "user: what is here?\n→ ls .  [c1]\n  ⎿ (empty folder)\nassistant: The folder is empty.\n"
    )

    shown = _json(env.run("sessions", "show", session_id, "-o", "json"))
    exported = _json(env.run("sessions", "export", session_id, "--format", "json"))
    assert shown == exported
    assert (shown["session_id"], shown["title"], shown["cwd"]) == (session_id, "what is here?", str(env.work))
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool_result", "assistant"]
    assert shown["messages"][1]["content"] == [{"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}}]

    markdown = env.run("sessions", "export", session_id, "--format", "markdown")
    assert (markdown.returncode, markdown.stderr) == (0, "")
    assert markdown.stdout == (
        "# what is here?\n\n"
        f"- Session: `{session_id}`\n"
        f"- Directory: `{env.work}`\n"
        "- Messages: 4\n\n"
        "## User\n\nwhat is here?\n\n"
        '## Assistant\n\n**Tool call** `ls` (`c1`):\n\n```json\n{\n  "path": "."\n}\n```\n\n'
        "## Tool result `ls` (`c1`)\n\n```\n(empty folder)\n```\n\n"
        "## Assistant\n\nThe folder is empty.\n"
    )
    assert env.run("sessions", "export", session_id).stdout == markdown.stdout  # markdown is the default

    deleted = env.run("sessions", "delete", session_id)
    assert (deleted.returncode, deleted.stdout, deleted.stderr) == (0, "", f"ketch: deleted session {session_id}\n")
    assert _json(env.run("sessions", "list", "-o", "json")) == []
    empty = env.run("sessions", "list")
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", f"ketch: no saved sessions in {env.work}\n")


def test_unknown_session_ids_are_usage_errors(env: Env, store_dir: Path) -> None:
    _run_json(env, [text_reply("x")], "a task")
    expected = "ketch: unknown session 'nope': 'ketch sessions list --all' shows the session ids\n"
    script = env.script([text_reply("x")])
    for command in (
        ["run", "--model", f"scripted:{script}", "--resume", "nope", "go"],
        ["sessions", "show", "nope"],
        ["sessions", "export", "nope", "--format", "json"],
        ["sessions", "delete", "nope"],
    ):
        proc = env.run(*command)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", expected), command


def test_bad_session_options_are_usage_errors(env: Env, store_dir: Path) -> None:
    script = env.script([text_reply("x")])
    model = ["--model", f"scripted:{script}"]
    cases = [
        (["run", *model, "--resume", "abc", "--continue", "go"], "ketch: --resume and --continue: choose one\n"),
        (["run", *model, "--no-session", "--continue", "go"], "ketch: --no-session and --continue: choose one\n"),
        (
            ["run", *model, "--approve", "c1"],
            "ketch: --approve c1: needs --resume ID (or --continue) of a run paused for approval\n",
        ),
        (
            ["sessions", "export", "abc", "--format", "pdf"],
            "ketch: argument --format: invalid choice: 'pdf' (choose from 'markdown', 'json') "
            "(see ketch sessions export --help)\n",
        ),
    ]
    for command, expected in cases:
        proc = env.run(*command)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", expected), command
    # without a terminal there is no picker: the task comes from stdin and needs an id
    proc = env.run(*model, "--resume", input="go")
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "ketch: --resume: a session id is needed with a task (ketch sessions list shows them)\n",
    )
    assert _files(store_dir) == []


# --- pause for approval, resume in another process ----------------------------------------

WRITE_CALL = call_reply(("c1", "write", {"path": "a.txt", "content": "hello\n"}))


def _paused(env: Env) -> str:
    result = _run_json(env, [WRITE_CALL], "--permission-mode", "default", "create a.txt", code=5)
    session_id: str = result["session_id"]
    assert (result["end_reason"], result["exit_code"], result["is_error"]) == ("approval_required", 5, True)
    assert [(p["tool_call_id"], p["tool_name"], p["args"]) for p in result["pending_approvals"]] == [
        ("c1", "write", {"path": "a.txt", "content": "hello\n"})
    ]
    assert not (env.work / "a.txt").exists()
    return session_id


def test_approval_required_exits_5_and_approve_runs_the_call(env: Env, store_dir: Path) -> None:
    session_id = _paused(env)
    result = _run_json(env, [text_reply("Created it.")], "--resume", session_id, "--approve", "c1")
    assert (result["end_reason"], result["text"], result["session_id"]) == ("stop", "Created it.", session_id)
    assert (env.work / "a.txt").read_text() == "hello\n"
    messages = _messages(env, session_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool_result", "assistant"]
    assert "is_error" not in messages[2]  # omitted when false
    assert messages[2]["content"] == [{"type": "text", "text": "Created a.txt (6 bytes, 1 line)."}]
    # nothing is waiting any more: approving again is a usage error
    script = env.script([text_reply("x")])
    again = env.run("run", "--model", f"scripted:{script}", "--resume", session_id, "--approve", "c1")
    assert (again.returncode, again.stderr) == (
        2,
        f"ketch: --approve c1: session {session_id} is not paused for approval\n",
    )


def test_deny_gives_the_model_the_reason(env: Env, store_dir: Path) -> None:
    session_id = _paused(env)
    result = _run_json(
        env, [text_reply("Understood.")], "--resume", session_id, "--deny", "c1:write notes.md instead"
    )
    assert (result["end_reason"], result["text"]) == ("stop", "Understood.")
    assert not (env.work / "a.txt").exists()
    messages = _messages(env, session_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool_result", "assistant"]
    assert messages[2]["is_error"] is True
    assert messages[2]["content"] == [{"type": "text", "text": "Permission denied by the user. Reason: write notes.md instead"}]


def test_paused_run_in_text_mode_says_how_to_continue(env: Env, store_dir: Path) -> None:
    script = env.script([WRITE_CALL])
    proc = env.run("run", "--model", f"scripted:{script}", "create a.txt")
    assert proc.returncode == 5
    (info,) = _json(env.run("sessions", "list", "-o", "json"))
    assert (proc.stdout, proc.stderr) == (
        "",
        "ketch: run paused: write (c1) needs approval; continue with: "
        f"ketch run --resume {info['id']} --approve c1 (to refuse it: --deny c1:reason instead)\n",
    )


def test_decisions_must_name_the_waiting_calls(env: Env, store_dir: Path) -> None:
    session_id = _paused(env)
    script = env.script([text_reply("x")])
    model = ["--model", f"scripted:{script}"]
    cases = [
        (
            ["--approve", "c9"],
            f"ketch: --approve c9: session {session_id} waits on no such call; it waits on c1 (write)\n",
        ),
        (
            ["--deny", "c9:no"],
            f"ketch: --deny c9:no: neither a rule nor CALL_ID[:reason] of a waiting call (session {session_id} "
            "waits on c1 (write))\n",
        ),
        (
            ["a new task"],
            f"ketch: session {session_id} is paused for approval of c1 (write): continue it with ketch run "
            f"--resume {session_id} --approve c1 (to refuse it: --deny c1:reason instead)\n",
        ),
    ]
    for extra, expected in cases:
        proc = env.run("run", *model, "--resume", session_id, *extra)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", expected), extra
    assert not (env.work / "a.txt").exists()
    # still paused: approving now works
    result = _run_json(env, [text_reply("Done.")], "--resume", session_id, "--approve", "c1")
    assert result["end_reason"] == "stop"
    assert (env.work / "a.txt").read_text() == "hello\n"


def test_no_session_keeps_denying_without_a_terminal(env: Env, store_dir: Path) -> None:
    result = _run_json(env, [WRITE_CALL, text_reply("Could not.")], "--no-session", "create a.txt")
    assert (result["end_reason"], result["session_id"], result["text"]) == ("stop", None, "Could not.")
    assert [d["tool_call_id"] for d in result["permission_denials"]] == ["c1"]


def test_a_task_given_with_the_decisions_follows_the_resumed_run(env: Env, store_dir: Path) -> None:
    session_id = _paused(env)
    replies = [text_reply("Created it."), text_reply("It says hello.")]
    result = _run_json(env, replies, "--resume", session_id, "--approve", "c1", "what does it say?")
    assert (result["end_reason"], result["text"]) == ("stop", "It says hello.")
    assert _texts(_messages(env, session_id)) == [
        ("user", "create a.txt"),
        ("assistant", ""),
        ("tool_result", "Created a.txt (6 bytes, 1 line)."),
        ("assistant", "Created it."),
        ("user", "what does it say?"),
        ("assistant", "It says hello."),
    ]


def test_resuming_with_another_configuration_is_refused(env: Env, store_dir: Path) -> None:
    session_id = _paused(env)
    script = env.script([text_reply("x")])
    proc = env.run(
        "run",
        "-o",
        "stream-json",
        "--model",
        f"scripted:{script}",
        "--system-prompt",
        "Be terse.",
        "--resume",
        session_id,
        "--approve",
        "c1",
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert re.fullmatch(
        f"ketch: cannot continue session {session_id}: This RunState was paused with another model, system prompt "
        r"or tools \(fingerprint [0-9a-f]{16}, now [0-9a-f]{16}\); resume it with the configuration it paused with\n",
        proc.stderr,
    ), proc.stderr
    assert not (env.work / "a.txt").exists()
    result = _run_json(env, [text_reply("Done.")], "--resume", session_id, "--approve", "c1")
    assert (result["end_reason"], (env.work / "a.txt").read_text()) == ("stop", "hello\n")


def test_a_session_open_elsewhere_is_a_usage_error(env: Env, store_dir: Path) -> None:
    import asyncio
    import os

    from ketch.sessions import JsonlStore

    session_id = _run_json(env, [text_reply("one")], "first")["session_id"]

    async def hold() -> Any:
        return await JsonlStore(store_dir).open(session_id)

    writer = asyncio.run(hold())
    try:
        script = env.script([text_reply("two")])
        proc = env.run("run", "--model", f"scripted:{script}", "--resume", session_id, "second")
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            2,
            "",
            f"ketch: Session {session_id} is open in another process (pid {os.getpid()}); close it there or fork it\n",
        )
    finally:
        asyncio.run(writer.close())
    assert _texts(_messages(env, session_id)) == [("user", "first"), ("assistant", "one")]


def test_deny_without_a_reason_next_to_deny_rules(env: Env, store_dir: Path) -> None:
    session_id = _paused(env)
    result = _run_json(
        env, [text_reply("Fine.")], "--resume", session_id, "--deny", "Bash(rm:*)", "--deny", "c1"
    )
    assert (result["end_reason"], result["text"]) == ("stop", "Fine.")
    messages = _messages(env, session_id)
    assert messages[2]["content"] == [{"type": "text", "text": "Permission denied by the user."}]
    assert not (env.work / "a.txt").exists()


def test_resuming_a_session_of_another_directory_warns(env: Env, store_dir: Path) -> None:
    session_id = _run_json(env, [text_reply("one")], "first")["session_id"]
    elsewhere = env.work / "elsewhere"
    elsewhere.mkdir()
    script = env.script([text_reply("two")])
    proc = env.run("run", "--model", f"scripted:{script}", "-C", str(elsewhere), "--resume", session_id, "second")
    assert (proc.returncode, proc.stdout) == (0, "two\n")
    assert proc.stderr == (
        f"ketch: warning: session {session_id} was started in {env.work}; "
        f"the tools work in {elsewhere} (-C {env.work} works there)\n"
    )
