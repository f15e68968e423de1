"""``ketch.client.Process`` driving ``ketch run --input-format stream-json`` on scripted models."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ketch.client import Process
from ketch.client import ProcessError

SRC = str(Path(__file__).resolve().parents[2] / "src")
GUARD = 60  # against a hung child only; nothing waits on time


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.work = tmp_path / "work"
        for d in (self.home, self.work, tmp_path / "xdg"):
            d.mkdir()
        self.vars = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
            "PYTHONPATH": SRC,
            "LANG": "C.UTF-8",
        }

    def script(self, replies: list[Any], name: str = "script.json") -> str:
        path = self.home / name
        path.write_text(json.dumps(replies))
        return f"scripted:{path}"

    def process(self, *args: str) -> Process:
        return Process(*args, cwd=self.work, env=self.vars)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def _text(text: str) -> dict[str, Any]:
    return {"blocks": [{"type": "text", "text": text}]}


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"blocks": [{"type": "tool_call", "id": call_id, "name": name, "args": args}], "chunk_size": 1000}


async def _until(events: Any, kind: str) -> list[dict[str, Any]]:
    out = []
    async for event in events:
        out.append(event)
        if event["type"] == kind:
            return out
    raise AssertionError(f"the process ended before a {kind} line: {out}")


async def test_multi_turn_session_with_results_and_events(env: Env) -> None:
    async with env.process("--model", env.script([_text("One."), _text("Two.")]), "--no-session") as ketch:
        assert ketch.init is not None
        assert (ketch.init["type"], ketch.init["session_id"]) == ("init", None)
        ack = await ketch.prompt("first")
        assert ack == {"type": "ack", "id": 1, "command": "user", "as": "prompt"}
        assert (await asyncio.wait_for(ketch.result(), GUARD))["text"] == "One."
        await ketch.prompt("second")
        assert (await asyncio.wait_for(ketch.result(), GUARD))["text"] == "Two."
        events = ketch.events()
        lines = await _until(events, "result")
        assert [e["type"] for e in lines[:3]] == ["init", "ack", "agent_start"]
        lines = await _until(events, "result")
        assert lines[-1]["text"] == "Two."
    assert ketch.returncode == 0


async def test_steer_follow_up_and_settings(env: Env) -> None:
    gate = env.work / "gate"
    os.mkfifo(gate)
    script = env.script([_call("g1", "bash", {"command": "read x < gate"}), _text("Done."), _text("Followed.")])
    ketch = env.process("--model", script, "--no-session", "--permission-mode", "bypass")
    try:
        await ketch.start()
        events = ketch.events()
        await ketch.prompt("start")
        await _until(events, "tool_execution_start")
        assert (await ketch.steer("mind the tests"))["as"] == "steer"
        assert (await ketch.follow_up("then the docs"))["as"] == "follow_up"
        assert (await ketch.set_thinking("low"))["applies"] == "next_run"
        assert (await ketch.set_permission_mode("plan"))["permission_mode"] == "plan"
        await asyncio.to_thread(gate.write_text, "go\n")
        result = await asyncio.wait_for(ketch.result(), GUARD)
        assert (result["text"], result["turns"]) == ("Followed.", 3)
        users = [
            e["message"]["content"][0]["text"]
            for e in await _until(events, "result")
            if e["type"] == "message_end" and e["message"]["role"] == "user"
        ]
        assert users == ["mind the tests", "then the docs"]
        assert await ketch.close() == 0
    finally:
        await ketch.kill()


async def test_interrupt_and_approvals(env: Env) -> None:
    script = env.script(
        [
            {"blocks": [{"type": "text", "text": "Working"}], "hang": True},
            _call("w1", "write", {"path": "a.txt", "content": "A"}),
            _text("Wrote it."),
            _call("w2", "write", {"path": "b.txt", "content": "B"}),
            _text("Did not."),
        ]
    )
    async with env.process("--model", script, "--no-session") as ketch:
        events = ketch.events()
        await ketch.prompt("long")
        await _until(events, "message_update")
        assert (await ketch.interrupt())["running"] is True
        assert (await asyncio.wait_for(ketch.result(), GUARD))["end_reason"] == "aborted"
        await ketch.prompt("write a")
        paused = await asyncio.wait_for(ketch.result(), GUARD)
        assert [p["tool_call_id"] for p in paused["pending_approvals"]] == ["w1"]
        assert (await ketch.approve("w1"))["as"] == "resume"
        assert (await asyncio.wait_for(ketch.result(), GUARD))["text"] == "Wrote it."
        assert (env.work / "a.txt").read_text() == "A"
        await ketch.prompt("write b")
        await asyncio.wait_for(ketch.result(), GUARD)
        await ketch.deny("w2", "no b")
        assert (await asyncio.wait_for(ketch.result(), GUARD))["text"] == "Did not."
        assert not (env.work / "b.txt").exists()


async def test_a_refused_command_raises_and_the_session_goes_on(env: Env) -> None:
    async with env.process("--model", env.script([_text("Fine.")]), "--no-session") as ketch:
        with pytest.raises(ProcessError) as info:
            await ketch.set_thinking("max")
        assert str(info.value) == "control set_thinking: \"level\" 'max' is not one of off, minimal, low, medium, high, xhigh"
        assert info.value.line == {"type": "error", "id": 1, "line": 1, "error": str(info.value)}
        with pytest.raises(ProcessError, match="^approve c9: no run is paused"):
            await ketch.approve("c9")
        await ketch.prompt("hi")
        assert (await asyncio.wait_for(ketch.result(), GUARD))["text"] == "Fine."


async def test_a_process_that_fails_to_start_raises_with_its_error(env: Env) -> None:
    ketch = env.process("--model", "scripted:/nonexistent.json")
    with pytest.raises(ProcessError) as info:
        await ketch.start()
    assert info.value.returncode == 2
    assert str(info.value) == (
        "ketch exited with code 2: ketch: cannot read model script /nonexistent.json: No such file or directory"
    )
    missing = Process(command=[str(env.work / "no-such-ketch")])
    with pytest.raises(ProcessError, match="^cannot start .*no-such-ketch: No such file or directory$"):
        await missing.start()


async def test_a_process_that_dies_fails_waiting_calls(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "text", "text": "Working"}], "hang": True}])
    ketch = env.process("--model", script, "--no-session")
    await ketch.start()
    events = ketch.events()
    await ketch.prompt("long")
    await _until(events, "message_update")
    assert ketch.pid is not None
    os.kill(ketch.pid, 9)
    with pytest.raises(ProcessError, match="^ketch exited with code -9$"):
        await asyncio.wait_for(ketch.result(), GUARD)
    with pytest.raises(ProcessError, match="^ketch exited with code -9$"):
        await ketch.prompt("again")
    assert await ketch.close() == -9


async def test_leaving_on_an_exception_stops_the_process(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "text", "text": "Working"}], "hang": True}])
    with pytest.raises(RuntimeError, match="boom"):
        async with env.process("--model", script, "--no-session") as ketch:
            events = ketch.events()
            await ketch.prompt("long")
            await _until(events, "message_update")
            raise RuntimeError("boom")
    # SIGTERM: the run is aborted and the command exits 130 after its result line
    assert ketch.returncode == 130
    lines = [e async for e in ketch.events()]
    assert lines[-1]["type"] == "result" and lines[-1]["end_reason"] == "aborted"


def test_the_client_imports_only_the_standard_library() -> None:
    import ast

    import ketch.client

    found: set[str] = set()
    for path in Path(ketch.client.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.add("." * node.level + (node.module or "").split(".")[0])
    assert found - {"._process"} <= set(sys.stdlib_module_names) | {"__future__"}


async def test_a_cancelled_close_stops_the_process(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "text", "text": "Working"}], "hang": True}])
    ketch = env.process("--model", script, "--no-session")
    await ketch.start()
    events = ketch.events()
    await ketch.prompt("long")
    await _until(events, "message_update")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(ketch.close(), 0.5)  # the run hangs: close never ends by itself
    assert ketch.returncode == 130
    lines = [e async for e in events]
    assert lines[-1]["type"] == "result" and lines[-1]["end_reason"] == "aborted"
