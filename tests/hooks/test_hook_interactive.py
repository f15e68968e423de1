"""Hooks in the interactive session: SessionStart/SessionEnd, a Notification while a
permission question waits, and a prompt a UserPromptSubmit hook blocks."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hookkit import write_script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))

from clihelp import Env
from clihelp import Terminal
from clihelp import make_env


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[Env, list[Terminal]]]:
    started: list[Terminal] = []
    try:
        yield make_env(tmp_path), started
    finally:
        for terminal in started:
            terminal.close()


def test_interactive_session_runs_session_notification_and_prompt_hooks(
    session: tuple[Env, list[Terminal]], tmp_path: Path
) -> None:
    env, terminals = session
    log = tmp_path / "log.jsonl"
    logger = write_script(
        tmp_path,
        "log.py",
        f"""
import json, sys
data = json.load(sys.stdin)
event = data["hook_event_name"]
with open({str(log)!r}, "a") as f:
    f.write(json.dumps([event, data.get("source") or data.get("reason") or data.get("message") or data.get("prompt")]) + "\\n")
if event == "UserPromptSubmit" and "secret" in data["prompt"]:
    sys.stderr.write("no secrets in prompts")
    sys.exit(2)
""",
        shell="/usr/bin/env python3",
    )
    env.project_config(
        "".join(
            f'[[hooks.{event}]]\n[[hooks.{event}.hooks]]\ncommand = "{logger}"\n'
            for event in ("SessionStart", "UserPromptSubmit", "Notification", "SessionEnd")
        )
    )
    replies: list[Any] = [
        {"blocks": [{"type": "tool_call", "id": "c1", "name": "write", "args": {"path": "a.txt", "content": "x\n"}}]},
        {"blocks": [{"type": "text", "text": "all done"}]},
    ]
    script = env.script(replies)
    term = Terminal(env, "--model", f"scripted:{script}", extra={"KETCH_TRUST_PROJECT": "1"})
    terminals.append(term)
    term.expect("/help for commands")
    term.expect("›")
    term.sendline("the secret is 42")
    term.expect("Prompt blocked by a UserPromptSubmit hook: no secrets in prompts")
    term.sendline("make a file")
    term.expect(r"Allow\? \[y\] once")
    term.sendline("y")
    term.expect("all done")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        ["SessionStart", "startup"],
        ["UserPromptSubmit", "the secret is 42"],
        ["UserPromptSubmit", "make a file"],
        ["Notification", "ketch needs your permission to use write"],
        ["SessionEnd", "prompt_input_exit"],
    ]
