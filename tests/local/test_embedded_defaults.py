"""White-box test: imports ketch implementation modules (private) directly.

The embedded model's defaults for a new user: a few tools, a grammar-constrained call of
one of them on the first turn of each run (then an answer from the result), and one line
on stderr saying what the model is good for. Other models keep theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ketch.cli import _factory
from ketch.cli._config import Settings
from ketch.cli._factory import BUILTIN_TOOLS
from ketch.cli._factory import EMBEDDED_NOTICE
from ketch.cli._factory import EMBEDDED_TOOLS
from ketch.cli._factory import build_agent
from ketch.cli._factory import route_embedded
from ketch.llm._providers.local import LocalModel


def test_the_embedded_model_calls_a_tool_first_then_answers(tmp_path: Path) -> None:
    info: Any = None
    built = build_agent(Settings(), tmp_path, approver=None, model=LocalModel("smollm2"))
    chooser = built.tool_choice
    assert chooser is not None
    built.arm()
    assert chooser.options.tool_choice == "required"
    chooser(info)
    assert chooser.options.tool_choice == "none"
    built.arm()  # every run starts with a call again
    assert chooser.options.tool_choice == "required"


def test_the_first_call_follows_the_words_of_the_request(tmp_path: Path) -> None:
    info: Any = None
    built = build_agent(Settings(), tmp_path, approver=None, model=LocalModel("smollm2"))
    chooser = built.tool_choice
    assert chooser is not None
    expected = {
        "What does notes.txt say?": "read",
        "List the files here.": "ls",
        "Find the markdown files.": "find",
        "Create hello.py that prints hello.": "write",
        "How many lines are in data.csv?": "bash",
        "Rename a.txt to b.txt.": "bash",
        "Hello!": "required",  # no action named: the model picks one of its tools
    }
    for text, tool in expected.items():
        built.arm()
        chooser.route(text)
        assert chooser.options.tool_choice == tool, text
        chooser(info)
        assert chooser.options.tool_choice == "none"
    assert route_embedded("What does notes.txt say?", ["ls"]) == "required"  # read is not offered


def test_a_forced_tool_is_not_routed(tmp_path: Path) -> None:
    built = build_agent(Settings(), tmp_path, approver=None, tool_choice="ls", model=LocalModel("smollm2"))
    assert built.tool_choice is not None
    built.arm()
    built.tool_choice.route("What does notes.txt say?")
    assert built.tool_choice.options.tool_choice == "ls"


def test_the_embedded_model_gets_few_tools_unless_tools_are_configured(tmp_path: Path) -> None:
    built = build_agent(Settings(), tmp_path, approver=None, model=LocalModel("smollm2"))
    assert tuple(t.name for t in built.agent.tools) == EMBEDDED_TOOLS
    mine = build_agent(Settings(tools=["read", "grep"]), tmp_path, approver=None, model=LocalModel("smollm2"))
    assert [t.name for t in mine.agent.tools] == ["read", "grep"]


def test_auto_and_other_models_choose_freely(tmp_path: Path) -> None:
    free = build_agent(Settings(), tmp_path, approver=None, tool_choice="auto", model=LocalModel("smollm2"))
    assert free.tool_choice is None
    other = build_agent(Settings(), tmp_path, approver=None, model=LocalModel(str(tmp_path / "big.gguf")))
    assert other.tool_choice is None
    assert tuple(t.name for t in other.agent.tools) == BUILTIN_TOOLS


def test_the_notice_is_said_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_factory, "_told", False)
    build_agent(Settings(), tmp_path, approver=None, model=LocalModel(str(tmp_path / "big.gguf")))
    assert capsys.readouterr().err == ""
    build_agent(Settings(), tmp_path, approver=None, model=LocalModel("smollm2"))
    build_agent(Settings(), tmp_path, approver=None, model=LocalModel("smollm2"))
    assert capsys.readouterr().err == EMBEDDED_NOTICE + "\n"
    assert len(EMBEDDED_NOTICE.splitlines()) == 1


def test_a_plain_question_gets_the_grounded_call_and_its_result_as_the_answer(installed: None, tmp_path: Path) -> None:
    # What the grammar guarantees whatever the model writes: the routed call (read) of the
    # one file the request names (its path is an enum of one), whose result is the answer.
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("Buy milk\nCall Anna at 5\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "ketch", "run", "--max-tokens", "96", "--permission-mode", "bypass", "-o", "stream-json",
         "What does notes.txt say?"],
        cwd=work, env=env, input="", capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == EMBEDDED_NOTICE
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["model"] == "local:smollm2"
    assert events[0]["tools"] == list(EMBEDDED_TOOLS)
    starts = [e for e in events if e["type"] == "tool_execution_start"]
    assert len(starts) == 1
    [start] = starts
    assert start["tool_name"] == "read"
    assistants = [e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
    assert len(assistants) == 1
    [call] = [b for b in assistants[0]["content"] if b["type"] == "tool_call"]  # the wire names the call once
    assert (call["id"], call["name"]) == (start["tool_call_id"], start["tool_name"])
    assert call["args"] == {"path": "notes.txt"}
    assert assistants[0]["stop_reason"] == "tool_use"
    assert events[-1]["type"] == "result" and events[-1]["turns"] == 1
    assert events[-1]["text"] == "     1\tBuy milk\n     2\tCall Anna at 5"


def test_ketch_eval_runs_on_the_embedded_model(installed: None, tmp_path: Path) -> None:
    # Whatever the model writes, its first call is the tool the request names (offered alone,
    # grammar-constrained), so a trajectory check passes; the report says it ran on local.
    (tmp_path / "ds.json").write_text(json.dumps({"name": "files", "cases": [
        {"name": "list", "input": "List the files in this directory.",
         "evaluators": [{"type": "tool_trajectory", "calls": [{"name": "ls", "args": {"path": "."}}]}]},
    ]}))  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "ketch", "eval", "ds.json", "--model", "local", "--json", "out.json"],
        cwd=tmp_path, env=env, input="", capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["model"] == "local"
    [trial] = report["results"]
    assert (trial["case"], trial["passed"], trial["turns"], trial["error"]) == ("list", True, 1, None)
