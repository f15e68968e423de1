"""The TypeScript Claude Agent SDK (npm ``@anthropic-ai/claude-agent-sdk``, pinned in
scripts/test.sh, installed into ``.cache/npm``) driving ``ketch`` as its Claude Code
(``pathToClaudeCodeExecutable``), run by node on scripted models: a tool round with
partial messages, ``canUseTool`` allow / edited input / deny, and an interrupt.

Each test runs tests/cli/claude_sdk_ts.mjs with one scenario; it prints what the SDK gave
back as one JSON object."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clihelp import Env
from clihelp import call_reply
from clihelp import text_reply

HERE = Path(__file__).parent
SDK = HERE.parent.parent / ".cache/npm/node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs"
ZOD = SDK.parent.parent.parent / "zod/index.js"  # the SDK's peer dependency, for tool schemas
DRIVER = HERE / "claude_sdk_ts.mjs"
GUARD = 60  # a guard against a hung child only; nothing waits on time


def _cli(env: Env) -> str:
    """An executable running this checkout's ``ketch`` (not a .js file: the SDK runs it as
    it is, without node)."""
    path = env.home / "ketch-cli"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ketch "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _scenario(env: Env, name: str, replies: list[Any], **more: str) -> dict[str, Any]:
    if not SDK.is_file():
        pytest.fail(
            f"{SDK} is missing: run scripts/test.sh, or npm install --prefix .cache/npm "
            "--omit=optional @anthropic-ai/claude-agent-sdk@0.3.332",
            pytrace=False,
        )
    variables = {
        **env.vars,
        "KETCH_TEST_SCRIPT": env.script(replies),
        "KETCH_SDK": str(SDK),
        "KETCH_ZOD": str(ZOD),
        "KETCH_TEST_REQUESTS": str(env.home / "requests.jsonl"),
        "KETCH_CLI": _cli(env),
        "KETCH_WORK": str(env.work),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **more,
    }
    done = subprocess.run(
        ["node", str(DRIVER), name], env=variables, cwd=env.work, capture_output=True, text=True, timeout=GUARD
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"the driver printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    out: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in out, out["error"] + "\nketch's stderr:\n" + "\n".join(out["stderr"])
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_query_runs_a_tool_round_with_partial_messages(env: Env) -> None:
    (env.work / "notes.txt").write_text("hi\n")
    looking = {"blocks": [{"type": "text", "text": "Looking."}, *call_reply(("c1", "ls", {"path": "."}))["blocks"]]}
    done = text_reply("All done.", chunk_size=4, usage={"input": 10, "output": 2, "total_tokens": 12, "cost": {"total": 0.25}})
    out = _scenario(env, "tool_round", [looking, done])
    shapes = [s for s in out["shapes"] if not s.startswith("stream_event:")]
    assert shapes == ["system:init", "assistant:text,tool_use", "user:tool_result", "assistant:text", "result:success"]
    assert out["init"] == {
        "model": "scripted:scripted-model",
        "tools": ["read", "write", "edit", "bash", "grep", "find", "ls", "todo_write"],
        "permissionMode": "default",
        "cwd": str(env.work),
    }
    assert out["tool_uses"] == [{"id": "c1", "name": "ls", "input": {"path": "."}}]
    assert out["tool_results"] == [{"id": "c1", "content": "notes.txt", "is_error": False}]
    streamed = [s for s in out["shapes"] if s.startswith("stream_event:")]
    assert streamed.count("stream_event:message_start") == 2
    assert "".join(out["deltas"]) == "Looking.All done."
    assert out["deltas"][-3:] == ["All ", "done", "."]
    assert out["result"] == {
        "subtype": "success",
        "is_error": False,
        "num_turns": 2,
        "result": "All done.",
        "total_cost_usd": 0.25,
        "stop_reason": "end_turn",
        "permission_denials": [],
    }
    assert out["same_session"] is True
    assert out["stderr"] == []  # nothing the SDK sent was ignored with a warning


def test_can_use_tool_allows_edits_the_input_and_denies(env: Env) -> None:
    replies = [
        call_reply(("c1", "write", {"path": "a.txt", "content": "one\n"})),
        call_reply(("c2", "write", {"path": "b.txt", "content": "two\n"})),
        call_reply(("c3", "bash", {"command": "rm -rf build"})),
        text_reply("Stopped."),
    ]
    out = _scenario(env, "can_use_tool", replies)
    assert out["asked"] == [
        ["write", {"path": "a.txt", "content": "one\n"}, "c1"],
        ["write", {"path": "b.txt", "content": "two\n"}, "c2"],
        ["bash", {"command": "rm -rf build"}, "c3"],
    ]
    assert (env.work / "a.txt").read_text() == "one\n"
    assert (env.work / "b.txt").read_text() == "edited\n"
    assert [(r["id"], r["is_error"]) for r in out["tool_results"]] == [("c1", False), ("c2", False), ("c3", True)]
    assert out["tool_results"][2]["content"] == "not today"
    assert out["result"]["subtype"] == "success"
    assert out["result"]["permission_denials"] == [
        {"tool_name": "bash", "tool_use_id": "c3", "tool_input": {"command": "rm -rf build"}}
    ]


def test_interrupt_stops_a_running_tool_and_the_session_goes_on(env: Env) -> None:
    os.mkfifo(env.work / "gate")
    replies = [call_reply(("c1", "bash", {"command": "read x < gate"})), text_reply("After.")]
    out = _scenario(env, "interrupt", replies)
    assert out["first"] == ["system:init", "assistant:tool_use", "user:tool_result", "result:error_during_execution"]
    assert (out["first_result"]["is_error"], out["terminal_reason"]) == (True, "aborted_tools")
    assert out["tool_result_is_error"] == [True]
    assert out["second"] == ["system:init", "assistant:text", "result:success"]
    assert out["second_result"]["result"] == "After."
    assert out["stderr"] == []
    listed = env.run("sessions", "list")  # persistSession: false
    assert (listed.stdout, listed.stderr) == ("", f"ketch: no saved sessions in {env.work}\n")


def test_what_the_sdk_sends_in_its_initialize_request_is_applied(env: Env) -> None:
    replies = [
        call_reply(("c1", "mcp__calc__add", {"a": 2, "b": 3})),
        call_reply(("c2", "bash", {"command": "echo hi"})),
        text_reply("Five."),
    ]
    out = _scenario(env, "initialize_request", replies)
    assert out["shapes"] == [
        "system:init",
        "assistant:tool_use",
        "user:tool_result",
        "assistant:tool_use",
        "user:tool_result",
        "assistant:text",
        "result:success",
    ]
    assert "mcp__calc__add" in out["tools"]
    assert {"name": "calc", "status": "connected", "source": "sdk"} in out["mcp_servers"]
    assert out["tool_results"][0] == {"id": "c1", "content": "5", "is_error": False}
    assert out["tool_results"][1] == {
        "id": "c2",
        "content": "Permission denied: the call matches the deny rule Bash.",
        "is_error": True,
    }
    assert out["hooked"] == [["PostToolUse", "mcp__calc__add", "c1"]]
    requests = [json.loads(line) for line in (env.home / "requests.jsonl").read_text().splitlines()]
    assert requests[0]["system_prompt"] == "Be brief."
    assert out["stderr"] == []


def test_set_model_switches_the_model_and_a_session_resumes(env: Env) -> None:
    other = env.script([text_reply("From B.")], "b.json")
    third = env.script([text_reply("Resumed.")], "c.json")
    out = _scenario(
        env, "set_model_and_resume", [text_reply("From A.")], KETCH_OTHER_SCRIPT=other, KETCH_THIRD_SCRIPT=third
    )
    assert out["results"] == ["From A.", "From B."]
    assert out["resumed"] == ["system:init", "assistant:text", "result:success"]
    assert out["resumed_result"]["result"] == "Resumed."
    assert out["resumed_session"] == out["session_id"]
    assert env.run("sessions", "show", out["session_id"]).stdout.splitlines() == [
        "user: first",
        "assistant: From A.",
        "user: second",
        "assistant: From B.",
        "user: third",
        "assistant: Resumed.",
    ]
