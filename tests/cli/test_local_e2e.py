"""End to end on the embedded model: the real CLI, llama.cpp and SmolLM2, no network."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys

from clihelp import Env
from clihelp import lines
from clihelp import shape

README_TASK = "List the files in this directory."


def run_ketch(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ketch *args`` in the workspace, with time for a slow shared machine."""
    return subprocess.run(
        [sys.executable, "-m", "ketch", *args],
        cwd=env.work,
        env=env.vars,
        input="",
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_local_model_calls_a_tool_in_the_workspace(env: Env) -> None:
    # What a constraint guarantees, whatever the CPU, the path length or the model's taste:
    # the forced call is a grammar-constrained `ls` call whose free strings are bounded so
    # that it ends within --max-tokens, so the turn ends with tool_use and one tool result.
    (env.work / "notes.txt").write_text("hello\n")
    proc = run_ketch(
        env,
        "run",
        "--model",
        "local",
        "--tool-choice",
        "ls",
        "--max-turns",
        "1",
        "--max-tokens",
        "200",
        "-o",
        "stream-json",
        'List the files in "." with ls.',
    )
    assert proc.returncode == 3, proc.stderr
    events = lines(proc.stdout)
    # the permission decision (tool_call_note) exists only when the model's arguments were valid
    collapsed = [k for k, _ in itertools.groupby(shape(events)) if k != "tool_call_note"]
    call_id = next(e for e in events if e["type"] == "tool_execution_start")["tool_call_id"]
    assert collapsed == [
        "init",
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "update:toolcall_start",
        "update:toolcall_delta",
        "update:toolcall_end",
        "message_end:assistant",
        f"tool_execution_start:{call_id}",
        f"tool_execution_end:{call_id}",
        "message_start:tool_result",
        "message_end:tool_result",
        "turn_end",
        "agent_end",
        "result",
    ]
    init = events[0]
    assert (init["model"], init["provider"], init["cwd"]) == ("local:smollm2", "local", str(env.work))
    assistant = next(e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "assistant")
    assert assistant["stop_reason"] == "tool_use"
    [call] = [b for b in assistant["content"] if b["type"] == "tool_call"]
    assert call["name"] == "ls" and call["id"] == call_id
    assert set(call.get("args", {})) <= {"path", "limit"}  # the schema's keys, if any
    tool_result = next(e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "tool_result")
    assert (tool_result["tool_call_id"], tool_result["tool_name"]) == (call_id, "ls")
    request = next(e for e in events if e["type"] == "message_start" and e["message"]["role"] == "user")
    assert request["message"]["content"] == [{"type": "text", "text": 'List the files in "." with ls.'}]
    result = events[-1]
    assert (result["end_reason"], result["exit_code"], result["turns"], result["tool_calls"], result["cost"]) == (
        "max_turns",
        3,
        1,
        1,
        0.0,
    )
    assert result["usage"]["input"] > 0 and result["usage"]["output"] > 0


def test_readme_first_command_gives_the_same_answer_every_time(env: Env) -> None:
    # The README's first command, twice in one folder: greedy decoding with a fixed seed
    # makes the whole output identical, and the forced `ls` lists the folder's real files.
    (env.work / "notes.txt").write_text("hello\n")
    (env.work / "README.md").write_text("# demo\n")
    (env.work / "src").mkdir()
    first = run_ketch(env, "run", "--tool-choice", "ls", README_TASK)
    second = run_ketch(env, "run", "--tool-choice", "ls", README_TASK)
    assert first.returncode == 0, first.stderr
    assert (second.returncode, second.stdout, second.stderr) == (first.returncode, first.stdout, first.stderr)
    assert first.stdout.strip() != ""
    traced = run_ketch(env, "run", "--tool-choice", "ls", "-o", "stream-json", README_TASK)
    assert traced.returncode == 0, traced.stderr
    events = lines(traced.stdout)
    [start] = [e for e in events if e["type"] == "tool_execution_start"]
    [end] = [e for e in events if e["type"] == "tool_execution_end"]
    assert start["tool_name"] == "ls"
    assert end["is_error"] is False
    assert end["result"]["content"] == [{"type": "text", "text": "notes.txt\nREADME.md\nsrc/"}]
    # The text output's final answer is the stream-json run's final answer.
    assert events[-1]["text"].strip() == first.stdout.strip()


def test_doctor_benchmarks_the_local_model(env: Env) -> None:
    proc = env.run("doctor", "--max-tokens", "8")
    assert (proc.returncode, proc.stderr) == (0, "")
    rows = {line[6:28].strip(): (line[:4].strip(), line[29:]) for line in proc.stdout.splitlines()}
    assert rows["local model"][0] == "ok" and re.fullmatch(r"/.+\.gguf \(\d+ MB\)", rows["local model"][1])
    assert rows["local model load"][0] == "ok" and re.fullmatch(r"\d+ ms", rows["local model load"][1])
    assert rows["first token"][0] == "ok" and re.fullmatch(r"\d+ ms", rows["first token"][1])
    assert rows["generation"][0] == "ok" and re.fullmatch(r"\d+ tokens, \d+\.\d tokens/s", rows["generation"][1])


def test_eval_on_the_local_model_scores_the_answer_ketch_run_prints(env: Env) -> None:
    # The request's words route the first call to ls, whose one argument the grammar
    # bounds to "." (the only folder): its result is the answer, whatever the model's taste.
    task = "What files are in this folder?"
    run = run_ketch(env, "run", "--model", "local", task)  # in the empty workspace
    assert (run.returncode, run.stdout) == (0, "(empty folder)\n"), run.stderr
    dataset = env.home / "ds.json"
    case = {"name": "list", "input": task, "expected": "(empty folder)"}
    dataset.write_text(json.dumps({"name": "local", "cases": [case]}))
    report = env.home / "r.json"
    proc = run_ketch(env, "eval", str(dataset), "--model", "local", "--json", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = json.loads(report.read_text())["results"]
    assert (result["passed"], result["text"], result["turns"]) == (True, "(empty folder)", 1)
