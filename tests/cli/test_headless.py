"""``ketch run`` as a subprocess on scripted models: outputs, exit codes, stdin, permissions."""

from __future__ import annotations

import signal
from typing import Any

from clihelp import Env
from clihelp import call_reply
from clihelp import lines
from clihelp import shape
from clihelp import text_reply

from ketch.permissions import RULE_FORMS
from ketch.permissions import args_digest

DENIED_WRITE = (
    "Permission denied: write needs the user's approval, but this run is non-interactive "
    "(permission mode {mode}). Do not retry it; continue with read-only tools, or tell the user "
    "to rerun with an allow rule (--allow), --permission-mode accept_edits (file edits) or "
    "bypass (everything)."
)
DENIED_BASH = DENIED_WRITE.replace("write needs", "bash needs")
PLAN_DENIED = (
    "Permission denied: plan mode allows read-only tools only, and this {tool} call may change "
    "things. Describe the change instead of making it."
)
ZERO_USAGE = {"cache_read": 0.0, "cache_write": 0.0, "input": 0.0, "output": 0.0, "total": 0.0}


def _result(stdout: str) -> dict[str, Any]:
    out = lines(stdout)
    assert len(out) == 1
    result = out[0]
    assert result.pop("duration") >= 0
    return result


def test_text_output_streams_the_answer(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Hello, world."}]}])
    proc = env.run("run", "--model", f"scripted:{script}", "say hello")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Hello, world.\n", "")


def test_bare_task_is_a_run_and_text_keeps_its_newline(env: Env) -> None:
    script = env.script(["line one\nline two\n"])
    proc = env.run("--model", f"scripted:{script}", "task")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "line one\nline two\n", "")


def test_stream_json_events_in_order(env: Env) -> None:
    script = env.script(
        [
            {
                "blocks": [
                    {"type": "thinking", "thinking": "Let me look"},
                    {"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}},
                ],
                "chunk_size": 100,
            },
            text_reply("Nothing here.", chunk_size=8),
        ]
    )
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "what is here?")
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert shape(events) == [
        "init",
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "update:thinking_start",
        "update:thinking_delta",
        "update:thinking_end",
        "update:toolcall_start",
        "update:toolcall_delta",
        "update:toolcall_end",
        "message_end:assistant",
        "tool_execution_start:c1",
        "tool_call_note",
        "tool_execution_end:c1",
        "message_start:tool_result",
        "message_end:tool_result",
        "turn_end",
        "turn_start",
        "message_start:assistant",
        "update:text_start",
        "update:text_delta",
        "update:text_delta",
        "update:text_end",
        "message_end:assistant",
        "turn_end",
        "agent_end",
        "result",
    ]
    assert events[0] == {
        "type": "init",
        "model": "scripted:scripted-model",
        "provider": "scripted",
        "cwd": str(env.work),
        "tools": ["read", "write", "edit", "bash", "grep", "find", "ls"],
        "permission_mode": "default",
        "thinking": "off",
        "version": events[0]["version"],
        "session_id": events[-1]["session_id"],
    }
    assert events[3]["message"]["content"] == [{"type": "text", "text": "what is here?"}]
    assert events[7]["event"] == {"type": "thinking_delta", "index": 0, "delta": "Let me look"}
    assert events[9]["event"] == {"type": "toolcall_start", "index": 1, "id": "c1", "name": "ls"}
    assert events[10]["event"] == {"type": "toolcall_delta", "index": 1, "delta": '{"path":"."}'}
    assert events[11]["event"] == {"type": "toolcall_end", "index": 1, "id": "c1", "name": "ls"}
    assert events[12]["message"]["content"][1] == {"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}}
    assert events[13] == {"type": "tool_execution_start", "tool_call_id": "c1", "tool_name": "ls"}
    assert "partial" not in proc.stdout
    note = {
        "tool_name": "ls",
        "tool_call_id": "c1",
        "args_digest": args_digest({"path": "."}),
        "decided_by": "mode default",
        "outcome": "allow",
        "asked": False,
        "reason": None,
    }
    assert events[14] == {"type": "tool_call_note", "tool_call_id": "c1", "tool_name": "ls", "note": note}
    assert events[15]["result"]["content"] == [{"type": "text", "text": "(empty folder)"}]
    assert events[15]["is_error"] is False
    assert events[17]["message"]["content"] == [{"type": "text", "text": "(empty folder)"}]
    assert events[18] == {"type": "turn_end", "turn": 1, "stop_reason": "tool_use", "tool_result_ids": ["c1"]}
    assert [e["event"]["delta"] for e in events[22:24]] == ["Nothing ", "here."]
    assert events[25]["message"]["content"] == [{"type": "text", "text": "Nothing here."}]
    summary = events[27]["summary"]
    assert (summary["turns"], summary["tool_calls"], summary["tool_errors"], summary["end_reason"]) == (2, 1, 0, "stop")
    assert events[28]["permission_decisions"] == [note]
    result = events[28]
    assert (result["end_reason"], result["exit_code"], result["text"], result["turns"]) == ("stop", 0, "Nothing here.", 2)


def test_json_result_object(env: Env) -> None:
    usage = {"input": 100, "output": 20, "total_tokens": 120, "cost": {"total": 0.25}}
    script = env.script([call_reply(("c1", "ls", {}), usage=usage), text_reply("Done.", usage=usage)])
    proc = env.run("run", "-o", "json", "--model", f"scripted:{script}", "go")
    assert proc.returncode == 0
    result = _result(proc.stdout)
    assert len(result.pop("session_id")) == 32
    assert result == {
        "type": "result",
        "end_reason": "stop",
        "is_error": False,
        "exit_code": 0,
        "text": "Done.",
        "error": None,
        "turns": 2,
        "tool_calls": 1,
        "tool_errors": 0,
        "usage": {
            "input": 200,
            "output": 40,
            "total_tokens": 240,
            "cost": {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0, "total": 0.5},
        },
        "cost": 0.5,
        "model": "scripted:scripted-model",
        "permission_denials": [],
        "permission_decisions": [
            {
                "tool_name": "ls",
                "tool_call_id": "c1",
                "args_digest": args_digest({}),
                "decided_by": "mode default",
                "outcome": "allow",
                "asked": False,
                "reason": None,
            }
        ],
        "pending_approvals": [],
        "truncated": False,
    }


def test_error_exit_code(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "text", "text": "par"}], "error": "upstream broke", "error_kind": "server"}])
    proc = env.run("run", "--model", f"scripted:{script}", "go")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "par\n", "ketch: run ended with error: upstream broke\n")
    proc = env.run("run", "-o", "json", "--model", f"scripted:{script}", "go")
    result = _result(proc.stdout)
    assert (proc.returncode, result["end_reason"], result["is_error"], result["error"], result["text"]) == (
        1,
        "error",
        True,
        "upstream broke",
        "par",
    )


def test_max_turns_exit_code(env: Env) -> None:
    script = env.script([call_reply(("c1", "ls", {})), text_reply("never")])
    proc = env.run("run", "-o", "json", "--max-turns", "1", "--model", f"scripted:{script}", "go")
    result = _result(proc.stdout)
    assert (proc.returncode, result["end_reason"], result["exit_code"], result["turns"]) == (3, "max_turns", 3, 1)
    proc = env.run("run", "--max-turns", "1", "--model", f"scripted:{script}", "go")
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", "ketch: run ended with max_turns\n")


def test_max_budget_exit_code(env: Env) -> None:
    usage = {"input": 10, "output": 10, "total_tokens": 20, "cost": {"total": 0.5}}
    script = env.script([call_reply(("c1", "ls", {}), usage=usage), text_reply("never")])
    proc = env.run("run", "-o", "json", "--max-budget-usd", "0.1", "--model", f"scripted:{script}", "go")
    result = _result(proc.stdout)
    assert (proc.returncode, result["end_reason"], result["cost"], result["turns"]) == (4, "max_budget", 0.5, 1)


def test_sigint_aborts_and_exits_130(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "text", "text": "working"}], "hang": True}])
    proc = env.popen("run", "-o", "stream-json", "--model", f"scripted:{script}", "go")
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if '"text_end"' in line:
            break
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=30)
    events = lines("".join(seen) + rest)
    assert proc.returncode == 130, err
    assert shape(events)[-4:] == ["message_end:assistant", "turn_end", "agent_end", "result"]
    assert events[-4]["message"]["stop_reason"] == "aborted"
    assert events[-4]["message"]["content"] == [{"type": "text", "text": "working"}]
    result = events[-1]
    assert (result["end_reason"], result["exit_code"], result["is_error"], result["text"]) == ("aborted", 130, True, "working")


def test_sigterm_aborts_too(env: Env) -> None:
    script = env.script([{"hang": True}])
    proc = env.popen("run", "-o", "stream-json", "--model", f"scripted:{script}", "go")
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"message_start"' in line and '"assistant"' in line:
            break
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert lines(rest)[-1]["end_reason"] == "aborted"


def test_task_from_stdin(env: Env) -> None:
    script = env.script(["ok"])
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "-", input="fix the bug\nin main.py\n")
    assert proc.returncode == 0
    user = lines(proc.stdout)[3]
    assert user["message"]["content"] == [{"type": "text", "text": "fix the bug\nin main.py\n"}]
    empty = env.run("run", "--model", f"scripted:{script}", "-", input="  \n")
    assert (empty.returncode, empty.stderr) == (2, "ketch: no task on stdin\n")


def test_piped_stdin_without_task_runs_headless(env: Env) -> None:
    script = env.script(["from stdin"])
    proc = env.run("--model", f"scripted:{script}", input="a task")
    assert (proc.returncode, proc.stdout) == (0, "from stdin\n")


def test_usage_errors_exit_2(env: Env) -> None:
    proc = env.run("run", "--model", "scripted:/nonexistent/script.json", "go")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "ketch: cannot read model script /nonexistent/script.json: No such file or directory\n"
    script = env.script(["x"])
    proc = env.run("run", "--model", f"scripted:{script}", "--tools", "read,teleport", "go")
    assert proc.returncode == 2
    assert proc.stderr == "ketch: unknown tool(s) teleport; the built-in tools are read, write, edit, bash, grep, find, ls\n"
    proc = env.run("run", "--model", f"scripted:{script}", "--tool-choice", "teleport", "go")
    assert (proc.returncode, proc.stderr) == (
        2,
        "ketch: --tool-choice 'teleport': expected one of auto, required, none, read, write, edit, bash, grep, find, ls\n",
    )
    proc = env.run("run", "--model", "nosuchprovider:model", "go")
    assert proc.returncode == 2
    assert proc.stderr.startswith("ketch: cannot use model 'nosuchprovider:model': Unknown provider 'nosuchprovider'")
    proc = env.run("run", "--max-turns", "0", "go")
    assert (proc.returncode, proc.stderr) == (
        2,
        "ketch: argument --max-turns: expected a positive integer, got '0' (see ketch run --help)\n",
    )
    proc = env.run("run", "--allow", "bash(x", "--model", f"scripted:{script}", "go")
    assert (proc.returncode, proc.stderr) == (
        2,
        f"ketch: --allow: Invalid permission rule 'bash(x': {RULE_FORMS}\n",
    )
    missing = env.work / "missing"
    for command in (("run", "--cwd", str(missing), "go"), ("config", "--cwd", str(missing)), ("sessions", "list", "--cwd", str(missing))):
        proc = env.run(*command)
        assert (proc.returncode, proc.stderr) == (2, f"ketch: --cwd {missing}: not a directory\n"), command


def test_tools_flag_limits_the_tool_set(env: Env) -> None:
    script = env.script([call_reply(("c1", "bash", {"command": "echo hi"})), "ok"])
    proc = env.run("run", "-o", "stream-json", "--tools", "read, ls", "--model", f"scripted:{script}", "go")
    events = lines(proc.stdout)
    assert events[0]["tools"] == ["read", "ls"]
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert end["result"]["content"] == [{"type": "text", "text": 'Tool "bash" not found'}]
    none = env.run("run", "-o", "stream-json", "--tools", "", "--model", f"scripted:{env.script(['ok'], 'b.json')}", "go")
    assert lines(none.stdout)[0]["tools"] == []


def test_cwd_flag_roots_the_tools(env: Env) -> None:
    sub = env.work / "sub"
    sub.mkdir()
    (sub / "marker.txt").write_text("x")
    script = env.script([call_reply(("c1", "ls", {"path": "."})), "ok"])
    proc = env.run("run", "-o", "stream-json", "-C", str(sub), "--model", f"scripted:{script}", "go")
    events = lines(proc.stdout)
    assert events[0]["cwd"] == str(sub)
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert end["result"]["content"][0]["text"] == "marker.txt"


# -- permissions -------------------------------------------------------------------------------


def _mutating_script(env: Env) -> str:
    return env.script(
        [
            call_reply(
                ("c1", "ls", {"path": "."}),
                ("c2", "write", {"path": "new.txt", "content": "hello\n"}),
                ("c3", "bash", {"command": "touch made-by-bash"}),
                ("c4", "bash", {"command": "ls"}),
            ),
            "finished",
        ]
    )


def _tool_results(stdout: str) -> dict[str, tuple[bool, str]]:
    return {
        e["tool_call_id"]: (e["is_error"], e["result"]["content"][0]["text"] if e["result"]["content"] else "")
        for e in lines(stdout)
        if e["type"] == "tool_execution_end"
    }


def test_headless_default_mode_denies_changes(env: Env) -> None:
    # without a session there is nowhere to pause (tests/cli/test_sessions.py: the pause)
    proc = env.run("run", "-o", "stream-json", "--no-session", "--model", f"scripted:{_mutating_script(env)}", "go")
    assert proc.returncode == 0
    results = _tool_results(proc.stdout)
    assert results["c1"] == (False, "(empty folder)")
    assert results["c2"] == (True, DENIED_WRITE.format(mode="default"))
    assert results["c3"] == (True, DENIED_BASH.format(mode="default"))
    assert results["c4"] == (True, DENIED_BASH.format(mode="default"))  # default mode asks for bash, sandboxed or not
    assert sorted(p.name for p in env.work.iterdir()) == []
    result = lines(proc.stdout)[-1]
    assert result["permission_denials"] == [
        {"tool_call_id": "c2", "tool_name": "write", "reason": DENIED_WRITE.format(mode="default")},
        {"tool_call_id": "c3", "tool_name": "bash", "reason": DENIED_BASH.format(mode="default")},
        {"tool_call_id": "c4", "tool_name": "bash", "reason": DENIED_BASH.format(mode="default")},
    ]
    decided = [(d["tool_call_id"], d["decided_by"], d["outcome"]) for d in result["permission_decisions"]]
    assert decided == [
        ("c1", "mode default", "allow"),
        ("c2", "no approver", "deny"),
        ("c3", "no approver", "deny"),
        ("c4", "no approver", "deny"),
    ]
    assert (result["end_reason"], result["exit_code"], result["text"]) == ("stop", 0, "finished")


def test_headless_accept_edits_allows_edits_and_sandboxed_bash(env: Env) -> None:
    proc = env.run(
        "run", "-o", "stream-json", "--permission-mode", "accept-edits", "--model", f"scripted:{_mutating_script(env)}", "go"
    )
    results = _tool_results(proc.stdout)
    assert results["c2"] == (False, "Created new.txt (6 bytes, 1 line).")
    # bash runs in the sandbox, which bounds its writes to the workspace: no question
    assert results["c3"] == (False, "(no output)")
    assert sorted(p.name for p in env.work.iterdir()) == ["made-by-bash", "new.txt"]


def test_headless_bypass_allows_everything(env: Env) -> None:
    proc = env.run("run", "-o", "stream-json", "--permission-mode", "bypass", "--model", f"scripted:{_mutating_script(env)}", "go")
    results = _tool_results(proc.stdout)
    assert [results[c][0] for c in ("c1", "c2", "c3", "c4")] == [False, False, False, False]
    assert sorted(p.name for p in env.work.iterdir()) == ["made-by-bash", "new.txt"]
    assert lines(proc.stdout)[-1]["permission_denials"] == []


def test_headless_plan_mode_is_read_only(env: Env) -> None:
    proc = env.run("run", "-o", "stream-json", "--permission-mode", "plan", "--model", f"scripted:{_mutating_script(env)}", "go")
    results = _tool_results(proc.stdout)
    assert results["c1"][0] is False
    assert results["c2"] == (True, PLAN_DENIED.format(tool="write"))
    # sandboxed bash runs in plan mode, with the whole filesystem read-only
    assert results["c3"] == (
        True,
        "touch: cannot touch 'made-by-bash': Read-only file system\n\n[Command exited with code 1.]\n\n"
        "[sandbox: plan mode: the whole filesystem is read-only, the workspace too]",
    )
    assert results["c4"] == (False, "(no output)")
    assert list(env.work.iterdir()) == []


def test_allow_and_deny_rules_from_flags_and_config(env: Env) -> None:
    env.user_config('[permissions]\nallow = ["Bash(touch:*)"]\n')
    proc = env.run("run", "-o", "stream-json", "--no-session", "--model", f"scripted:{_mutating_script(env)}", "go")
    results = _tool_results(proc.stdout)
    assert results["c3"][0] is False
    assert results["c2"] == (True, DENIED_WRITE.format(mode="default"))
    denied = env.run(
        "run", "-o", "stream-json", "--permission-mode", "bypass", "--deny", "write", "--model", f"scripted:{_mutating_script(env)}", "go"
    )
    assert _tool_results(denied.stdout)["c2"] == (True, "Permission denied: the call matches the deny rule write.")
