"""End to end on the embedded model: the real CLI, llama.cpp and SmolLM2, a project agent
file, and a forced ``subagent`` call whose subagent runs on the same model."""

from __future__ import annotations

import subprocess
import sys

from clihelp import Env
from clihelp import lines

LISTER = "---\nname: lister\ndescription: Lists the files in a directory\ntools: ls\nmax_turns: 2\n---\nYou list files.\n"


def test_the_embedded_model_delegates_to_a_subagent(env: Env) -> None:
    # What the grammar guarantees whatever the model's taste: the forced call names the one
    # agent and gives a task (the embedded model gets the single mode, whose schema
    # requires both); the subagent then runs on the same model in its own context.
    (env.work / "notes.txt").write_text("hello\n")
    agents = env.work / ".ketch" / "agents"
    agents.mkdir(parents=True)
    (agents / "lister.md").write_text(LISTER)
    proc = subprocess.run(
        [sys.executable, "-m", "ketch", "run", "--model", "local", "--tool-choice", "subagent",
         "--max-turns", "2", "--max-tokens", "200", "-o", "stream-json",
         "Ask the lister agent to list the files."],
        cwd=env.work, env=env.vars, input="", capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert "subagent" in events[0]["tools"]
    start = next(e for e in events if e["type"] == "tool_execution_start")
    assert start["tool_name"] == "subagent"
    # The call's arguments are in the assistant message (the tool events do not repeat them).
    [call] = [
        block
        for e in events
        if e["type"] == "message_end" and e["message"]["role"] == "assistant"
        for block in e["message"]["content"]
        if block["type"] == "tool_call" and block["id"] == start["tool_call_id"]
    ]
    args = call["args"]
    assert args["agent"] == "lister" and isinstance(args["task"], str)
    nested = [e["partial"] for e in events if e["type"] == "tool_execution_update"]
    assert {p["path"] for p in nested} == {"main/lister#1"}
    inner = [p["event"]["type"] for p in nested]
    assert inner[0] == "agent_start" and inner[-1] == "agent_end" and inner.count("agent_end") == 1
    child_user = next(p["event"]["message"] for p in nested if p["event"]["type"] == "message_end")
    assert child_user["role"] == "user"
    assert child_user["content"] == [{"type": "text", "text": args["task"]}]
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert end["result"]["details"]["path"] == "main/lister#1"
    summary = next(e for e in events if e["type"] == "agent_end")["summary"]
    assert list(summary["tool_usage"]) == ["main/lister#1"]
    assert events[-1]["type"] == "result"
