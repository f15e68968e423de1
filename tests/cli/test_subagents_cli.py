"""The ketch command with agent files: loading (user and project, trust), the subagent
tool in a run, its events in stream-json, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

from clihelp import Env
from clihelp import call_reply
from clihelp import lines
from clihelp import text_reply

from ketch.cli._lines import tool_call_line
from ketch.cli._subagents import subagent_line
from ketch.loop import AgentEnd
from ketch.loop import RunSummary
from ketch.loop import ToolExecutionStart
from ketch.subagents import SubagentEvent

HELPER = "---\nname: helper\ndescription: Looks at files\ntools: ls, read\n---\nYou look at files.\n"


def _agent(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_project_agent_runs_as_a_subagent_with_tagged_events(env: Env) -> None:
    _agent(env.work / ".ketch" / "agents", "helper.md", HELPER)
    (env.work / "notes.txt").write_text("hi\n")
    script = env.script(
        [
            call_reply(("c1", "subagent", {"agent": "helper", "task": "List the files."})),
            call_reply(("c2", "ls", {"path": "."})),  # the subagent's turns (same scripted model)
            text_reply("There is notes.txt."),
            text_reply("The helper found notes.txt."),
        ]
    )
    proc = env.run("run", "-o", "stream-json", "go", extra={"KETCH_TEST_SCRIPT": script})
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert events[0]["tools"] == [
        "read", "write", "edit", "bash", "grep", "find", "ls",
        "subagent", "task_list", "task_output", "task_wait", "task_stop",
    ]  # fmt: skip
    nested = [e["partial"] for e in events if e["type"] == "tool_execution_update"]
    assert {p["type"] for p in nested} == {"subagent_event"}
    assert {p["path"] for p in nested} == {"main/helper#1"}
    kinds = [p["event"]["type"] for p in nested]
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert "tool_execution_start" in kinds
    updates = [p["event"] for p in nested if p["event"]["type"] == "message_update"]
    assert updates and all("message" not in u for u in updates)  # slimmed like top-level updates
    result_msg = next(
        e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "tool_result"
    )
    assert result_msg["content"] == [{"type": "text", "text": "There is notes.txt."}]
    assert result_msg["details"]["path"] == "main/helper#1"
    assert result_msg["details"]["session_id"]
    assert events[-1]["text"] == "The helper found notes.txt."


def test_a_bad_agent_file_is_a_one_line_error(env: Env) -> None:
    path = _agent(env.xdg / "ketch" / "agents", "bad.md", "---\nname: bad\ndescription: d\nmax_turns: many\n---\n")
    proc = env.run("run", "go", extra={"KETCH_TEST_SCRIPT": env.script(["x"])})
    assert proc.returncode == 2
    assert proc.stderr == f"ketch: {path}: max_turns must be a positive integer, got 'many'\n"


def test_an_untrusted_project_agent_does_not_widen_the_permission_mode(env: Env) -> None:
    path = _agent(
        env.work / ".ketch" / "agents",
        "yolo.md",
        "---\nname: yolo\ndescription: d\npermission_mode: bypass\n---\nDo anything.\n",
    )
    proc = env.run("run", "go", extra={"KETCH_TEST_SCRIPT": env.script(["ok"])})
    assert proc.returncode == 0, proc.stderr
    assert f"permission_mode bypass of agent yolo ({path})" in proc.stderr
    assert proc.stderr.startswith("ketch: ignored settings of the untrusted project")
    from ketch.cli._config import load_settings
    from ketch.cli._subagents import load_cli_agents

    settings = load_settings(env.work, environ=env.vars)
    assert [(s.name, s.permission_mode) for s in load_cli_agents(settings, env.vars)] == [("yolo", None)]
    trusted = load_settings(env.work, environ=env.vars, trust=True)
    assert [(s.name, s.permission_mode) for s in load_cli_agents(trusted, env.vars)] == [("yolo", "bypass")]


def test_without_agent_files_nothing_is_added(env: Env) -> None:
    proc = env.run("run", "-o", "stream-json", "go", extra={"KETCH_TEST_SCRIPT": env.script(["ok"])})
    assert json.loads(proc.stdout.splitlines()[0])["tools"] == ["read", "write", "edit", "bash", "grep", "find", "ls"]


def test_nested_collapsed_lines() -> None:
    start = SubagentEvent(
        path="main/helper#1", event=ToolExecutionStart(tool_call_id="c", tool_name="read", args={"path": "a.txt"})
    )
    assert subagent_line(start, tool_call_line) == "  ↳ main/helper#1 → read a.txt"
    end = SubagentEvent(
        path="main/helper#1/scout#2", event=AgentEnd(messages=[], summary=RunSummary(turns=2, tool_calls=1))
    )
    assert subagent_line(end, tool_call_line) == "    ↳ main/helper#1/scout#2 done: 2 turns, 1 tool call"
    failed = SubagentEvent(
        path="main/h#1", event=AgentEnd(messages=[], summary=RunSummary(turns=1, end_reason="error", error="boom"))
    )
    assert subagent_line(failed, tool_call_line) == "  ↳ main/h#1 ended (error: boom): 1 turn, 0 tool calls"
    assert subagent_line("text chunk", tool_call_line) is None


def test_a_background_bash_command_in_the_command(env: Env) -> None:
    _agent(env.work / ".ketch" / "agents", "helper.md", HELPER)
    script = env.script(
        [
            call_reply(("c1", "bash", {"command": "echo from-the-background", "background": True})),
            call_reply(("c2", "task_wait", {"task_id": "bash-1", "timeout": 60})),
            call_reply(("c3", "task_output", {"task_id": "bash-1"})),
            text_reply("done"),
        ]
    )
    proc = env.run(
        "run", "--permission-mode", "bypass", "-o", "stream-json", "go", extra={"KETCH_TEST_SCRIPT": script}
    )
    assert proc.returncode == 0, proc.stderr
    results = [
        e["message"]["content"][0]["text"]
        for e in lines(proc.stdout)
        if e["type"] == "message_end" and e["message"]["role"] == "tool_result"
    ]
    assert results[0].startswith("Started background task bash-1: echo from-the-background\n")
    assert results[1].startswith("bash-1 [completed] shell: echo from-the-background (exit code 0)")
    assert results[2] == "from-the-background\n\n[status: completed; next_offset: 20]"
